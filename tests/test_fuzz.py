"""Property-based tests (Hypothesis): whatever a hostile or careless user sends, the answer is one
sentence or a valid result, and the ledger never over-commits a GPU or loses a live holder's slice.

The budget is ``VGPU_FUZZ_EXAMPLES`` examples per property (default 200) and ``VGPU_FUZZ_RUNS``
random operation sequences (default 50) of up to 30 steps per state machine: three writer
processes on one ledger, three users' places in line through the broker, and connection
patterns against the broker's socket.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from jupyter_vgpu.errors import InvalidRequest, SliceNotFound, VGPUError
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.ledger.file import LedgerFile
from jupyter_vgpu.slices import Actor, Holder, SliceRequest, Ticket
from jupyter_vgpu.slices.holders import process_alive

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("VGPU_FUZZ_EXAMPLES", "200"))
RUNS = int(os.environ.get("VGPU_FUZZ_RUNS", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Values a user could write anywhere a setting goes: numbers of every size, text that looks almost
#: right, JSON shapes that are not what was asked for.
anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=80)
    | st.sampled_from(["1/4", "25%", "0.25", "6GiB", "512MiB", "1e999", "nan", "-1", "0", "1/0", "9" * 400, "2x16GiB"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=6,
)


def one_sentence(error: BaseException) -> None:
    text = str(error)
    assert text and len(text) < 600 and "\n" not in text and "Traceback" not in text, text


@FUZZ
@given(fraction=anything, memory=anything, gpus=anything, gpu=anything, logical=anything, placement=anything)
def test_the_request_parser_answers_a_request_or_one_sentence(
    fraction: Any, memory: Any, gpus: Any, gpu: Any, logical: Any, placement: Any
) -> None:
    try:
        request = SliceRequest.parse(fraction, memory, gpus=gpus, gpu=gpu, logical_devices=logical, placement=placement)
    except InvalidRequest as error:
        one_sentence(error)
        return
    assert (request.fraction is None) != (request.memory is None)
    assert request.fraction is None or 0 < request.fraction <= 1
    assert request.memory is None or 0 < request.memory <= 1024**5
    assert 1 <= request.gpus <= 1024 and 1 <= request.logical_devices <= 1024
    assert request.placement in ("binpack", "spread")
    assert request.gpu is None or request.gpus == 1
    request.describe()


KEYS = ["gpu_fraction", "gpu_memory", "gpus", "gpu", "logical_devices", "placement", "wait_timeout", "no_gpu",
        "slice_id", "gpu_fracton", "kernel_id", "log"]  # fmt: skip


@FUZZ
@given(config=st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=12), anything, max_size=4))
@example(config={"self": None})  # was Python's TypeError "multiple values for argument 'self'"
def test_a_kernelspec_config_builds_a_request_or_says_what_is_wrong(config: dict[str, Any]) -> None:
    from jupyter_vgpu.provisioner import InvalidKernelConfig, VGPUProvisioner

    config = {k: v for k, v in config.items() if k not in ("kernel_id", "log", "parent", "config", "kernel_spec")}
    try:
        provisioner = VGPUProvisioner(kernel_id="fuzz", **config)
        request = provisioner.request()
    except InvalidKernelConfig as error:
        one_sentence(error)
        return
    assert set(config) <= {"gpu_fraction", "gpu_memory", "gpus", "gpu", "logical_devices", "placement", "wait_timeout", "no_gpu"}
    assert request.gpus >= 1 and provisioner.slice_id is None


# -- the broker's wire ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from jupyter_vgpu.hub.broker import Broker, PolicySource

    pytest.importorskip("jupyterhub")
    ledger = SQLiteLedger(
        tmp_path_factory.mktemp("node") / "ledger.sqlite",
        Inventory("2x16GiB"),
        context_allowance=300 << 20,
        actor=Actor("root", 0, admin=True),
    )
    return Broker(ledger, PolicySource(None))


OPS = ["info", "snapshot", "slices", "get", "waiting", "reserve_now", "enqueue", "try_grant", "leave_queue",
       "attach", "update_labels", "resize", "release", "reap", "overcommitted", "reserve", "__init__", "_grant",
       "idle", "idle_times"]  # fmt: skip
ARG_NAMES = ["slice_id", "request", "holder", "ticket", "final", "pid", "labels", "uid", "owner", "self", "since"]


@FUZZ
@given(
    op=st.sampled_from(OPS) | anything,
    args=st.dictionaries(st.sampled_from(ARG_NAMES) | st.text(max_size=8), anything, max_size=3) | anything,
)
def test_any_broker_message_gets_an_answer_and_takes_nothing_of_others(node: Any, op: Any, args: Any) -> None:
    from jupyter_vgpu.hub.broker import Caller

    theirs = node.ledger.reserve(SliceRequest.parse("1/8"), Holder.command("someone else's"))
    mallory = Caller(pid=os.getpid(), uid=4242, gid=4242, user="mallory", groups=(), admin=False)
    try:
        answer = node.handle(mallory, {"op": op, "args": args})
        assert isinstance(answer, dict) and isinstance(answer.get("ok"), bool)
        json.dumps(answer)
        if not answer["ok"]:
            assert answer["error"] != "VGPUError" or "failed on" not in answer["message"], answer  # no crash inside
            assert len(answer["message"]) < 800
        assert node.ledger.get(theirs.id).holder == "someone else's"
        assert node.ledger.overcommitted() == []
    finally:
        node.ledger.release(theirs.id)
        for s in node.ledger.slices():  # what mallory reserved, if anything
            node.ledger.release(s.id)
        for w in node.ledger.waiting():
            node.ledger.leave_queue(Ticket(w.ticket, w.request))


@FUZZ
@given(slice_id=st.text(max_size=40) | st.sampled_from(["%", "%%%%%%", "______", "' OR 1=1 --", "a" * 1000]))
def test_an_id_names_exactly_one_slice_or_none(tmp_path_factory: pytest.TempPathFactory, slice_id: str) -> None:
    ledger = SQLiteLedger(tmp_path_factory.mktemp("ids") / "l.sqlite", Inventory("1x16GiB"), context_allowance=300 << 20)
    held = ledger.reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    try:
        found = ledger.get(slice_id)
    except SliceNotFound as error:
        one_sentence(error)
    else:
        assert found.id == held.id and (slice_id.strip() == held.id or (len(slice_id.strip()) >= 6 and held.id.startswith(slice_id.strip())))
    finally:
        ledger.close()


# -- random operations across processes -----------------------------------------------------------
def _writer(path: str, spec: str, pipe: Any) -> None:
    """A process with its own connection to the ledger, doing what the test asks."""
    ledger = SQLiteLedger(path, Inventory(spec), context_allowance=300 << 20, poll_interval=0.02)
    while True:
        command = pipe.recv()
        if command is None:
            return
        verb, *args = command
        try:
            if verb == "reserve":
                share, pid = args
                result: Any = ledger.reserve_now(SliceRequest.parse(share), Holder.command(f"pid {pid}", pid=pid)).id
            elif verb == "wait":
                share, pid, seconds = args
                result = ledger.reserve(SliceRequest.parse(share), Holder.command(f"pid {pid}", pid=pid), wait=seconds).id
            elif verb == "release":
                result = ledger.release(args[0]).id
            else:
                result = [s.id for s in ledger.reap()]
            pipe.send(("ok", result))
        except VGPUError as error:
            pipe.send((type(error).__name__, str(error)))


class LedgerRace(RuleBasedStateMachine):
    """Three writer processes reserve, wait, release and reap while holders crash and the ledger is reset."""

    @initialize()
    def start(self) -> None:
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="vgpu-fuzz-"))
        self.path = str(self.folder / "ledger.sqlite")
        self.spec = "2x16GiB"
        context = multiprocessing.get_context("fork")
        self.writers = []
        for _ in range(3):
            ours, theirs = context.Pipe()
            process = context.Process(target=_writer, args=(self.path, self.spec, theirs), daemon=True)
            process.start()
            self.writers.append((process, ours))
        self.holders: dict[int, subprocess.Popen[bytes]] = {}
        self.expected: dict[str, int] = {}  # slice id -> holder pid, for live holders

    def teardown(self) -> None:
        for process, pipe in self.writers:
            pipe.send(None)
            process.join(5)
        for holder in self.holders.values():
            holder.kill()
            holder.wait()

    def _ask(self, writer: int, *command: Any) -> tuple[str, Any]:
        _, pipe = self.writers[writer % 3]
        pipe.send(command)
        answer: tuple[str, Any] = pipe.recv()
        return answer

    def _holder(self) -> int:
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.holders[holder.pid] = holder
        return holder.pid

    @rule(writer=st.integers(0, 2), share=st.sampled_from(["1/8", "1/4", "1/3", "1/2", "3/4", "1"]))
    def reserve(self, writer: int, share: str) -> None:
        pid = self._holder()
        status, result = self._ask(writer, "reserve", share, pid)
        assert status in ("ok", "SliceUnavailable"), result
        if status == "ok":
            self.expected[result] = pid

    @rule(writer=st.integers(0, 2), share=st.sampled_from(["1/4", "1/2"]))
    def wait(self, writer: int, share: str) -> None:
        pid = self._holder()
        status, result = self._ask(writer, "wait", share, pid, 0.1)
        assert status in ("ok", "SliceUnavailable"), result
        if status == "ok":
            self.expected[result] = pid

    # No preconditions on what the processes did: whether a wait was granted depends on timing,
    # and rules enabled by it would make Hypothesis draw differently when it replays an example.
    @rule(writer=st.integers(0, 2), pick=st.integers(0, 100))
    def release(self, writer: int, pick: int) -> None:
        if not self.expected:
            return
        slice_id = sorted(self.expected)[pick % len(self.expected)]
        status, result = self._ask(writer, "release", slice_id)
        assert status == "ok", result
        del self.expected[slice_id]

    @rule(pick=st.integers(0, 100))
    def crash(self, pick: int) -> None:
        if not self.expected:
            return
        slice_id = sorted(self.expected)[pick % len(self.expected)]
        pid = self.expected.pop(slice_id)
        os.kill(pid, signal.SIGKILL)
        self.holders.pop(pid).wait()

    @rule(writer=st.integers(0, 2))
    def reap(self, writer: int) -> None:
        status, result = self._ask(writer, "reap")
        assert status == "ok", result
        assert not set(result) & set(self.expected), "a live holder's slice was reaped"

    @rule()
    def reset(self) -> None:
        # `gc --reset-ledger --force`: refused while a holder runs; otherwise the ledger every
        # writer has open is emptied in place.
        try:
            LedgerFile.clear(self.path)
        except VGPUError as error:
            assert self.expected, f"refused with no live holder: {error}"
        else:
            assert not self.expected, "emptied a ledger whose holders run"

    @rule()
    def replace_damaged(self) -> None:
        # `gc --reset-ledger` on a damaged file: it is moved aside and every writer follows to a
        # fresh one. Holders of slices in the moved file are no longer slices (their memory then
        # counts as used outside slices), so the test stops expecting them.
        LedgerFile.reset(self.path)
        self.expected.clear()

    @invariant()
    def never_overcommitted_and_no_live_holder_lost(self) -> None:
        if not getattr(self, "writers", None):
            return
        ledger = SQLiteLedger(self.path, Inventory(self.spec), context_allowance=300 << 20)
        try:
            assert ledger.overcommitted() == []
            present = {s.id for s in ledger.slices()}
            assert set(self.expected) <= present, "a live holder lost its slice"
            assert all(process_alive(s.pid, s.pid_start, s.pid_stamp) for s in ledger.slices() if s.id in self.expected)
        finally:
            ledger.close()


def machine_test(machine: type[RuleBasedStateMachine], *, broker: bool = False) -> Any:
    """``machine`` as a test: RUNS sequences of up to 30 steps (skipped without the broker's extras)."""
    machine.TestCase.settings = settings(
        max_examples=RUNS, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    if broker and importlib.util.find_spec("jupyterhub") is None:
        return pytest.mark.skip(reason="the broker's policy needs jupyterhub (pip install jupyter-vgpu[hub])")(machine.TestCase)
    return machine.TestCase


test_random_operations_across_processes_keep_the_ledger_sound = machine_test(LedgerRace)



# -- places in line from several users, through the broker -----------------------------------------
USERS = ("alice", "bob", "carol")
MAX_WAITING = 3  # the policy's places in line per user, low so the machine reaches it


class PlacesInLineFromSeveralUsers(RuleBasedStateMachine):
    """Three users (their uids as the broker's peer check gives them) take places in line, ask,
    leave, reserve and release, each also aiming at the others' tickets and slices. Nobody moves
    another's place or slice, nobody sees another's holder, nobody holds more places than the
    policy allows, and the node is never over-committed."""

    @initialize()
    def start(self) -> None:
        import tempfile

        from jupyter_vgpu.hub.broker import Broker, Caller, PolicySource

        self.folder = Path(tempfile.mkdtemp(prefix="vgpu-fuzz-line-"))
        policy = self.folder / "policy.json"
        policy.write_text(json.dumps({"default": {"max_waiting": MAX_WAITING}}))
        self.ledger = SQLiteLedger(
            self.folder / "ledger.sqlite", Inventory("2x16GiB"), context_allowance=0, actor=Actor("root", 0, admin=True)
        )
        self.broker = Broker(self.ledger, PolicySource(policy))
        self.callers = [
            Caller(pid=os.getpid(), uid=6001 + i, gid=6001 + i, user=name, groups=(), admin=False)
            for i, name in enumerate(USERS)
        ]
        self.tickets: dict[int, int] = {}  # waiting ticket -> user index
        self.held: dict[str, int] = {}  # slice id -> user index

    def teardown(self) -> None:
        ledger = getattr(self, "ledger", None)
        if ledger is not None:
            ledger.close()

    def _call(self, who: int, op: str, **args: Any) -> dict[str, Any]:
        answer = self.broker.handle(self.callers[who], {"op": op, "args": args})
        json.dumps(answer)  # what goes on the wire
        if not answer["ok"]:
            assert answer["error"] != "VGPUError", answer  # a refusal has its kind, never a crash
            assert "Traceback" not in answer["message"] and len(answer["message"]) < 2000, answer
        return answer

    def _holder(self, who: int) -> dict[str, Any]:
        return {"kind": "command", "name": f"{USERS[who]}'s secret job", "labels": {"path": f"{USERS[who]}/x.ipynb"}}

    @rule(who=st.integers(0, 2), share=st.sampled_from(["1/4", "1/2", "3/4", "1"]))
    def take_a_place(self, who: int, share: str) -> None:
        mine = sum(1 for owner in self.tickets.values() if owner == who)
        answer = self._call(who, "enqueue", request={"fraction": share}, holder=self._holder(who))
        if answer["ok"]:
            assert mine < MAX_WAITING, f"{USERS[who]} holds {mine + 1} places; the policy allows {MAX_WAITING}"
            self.tickets[answer["result"]] = who
        else:
            assert mine >= MAX_WAITING and answer["error"] == "NotPermitted", answer

    def _pick(self, table: dict[Any, int], pick: int) -> Any:
        return sorted(table)[pick % len(table)] if table else None

    @rule(who=st.integers(0, 2), pick=st.integers(0, 100), final=st.booleans())
    def ask(self, who: int, pick: int, final: bool) -> None:
        ticket = self._pick(self.tickets, pick)
        if ticket is None:
            return
        answer = self._call(who, "try_grant", ticket=ticket, final=final)
        if self.tickets[ticket] != who:
            assert not answer["ok"], f"{USERS[who]} was answered for another user's place: {answer}"
            return
        if answer["ok"] and answer["result"]["slice"] is not None:
            del self.tickets[ticket]
            self.held[answer["result"]["slice"]["id"]] = who
        elif not answer["ok"]:
            assert answer["error"] in ("SliceUnavailable", "NotPermitted", "LeftLine"), answer
            if ticket not in {w.ticket for w in self.ledger.waiting()}:
                del self.tickets[ticket]

    @rule(who=st.integers(0, 2), pick=st.integers(0, 100))
    def leave(self, who: int, pick: int) -> None:
        ticket = self._pick(self.tickets, pick)
        if ticket is None:
            return
        answer = self._call(who, "leave_queue", ticket=ticket)
        if self.tickets[ticket] != who:
            assert not answer["ok"], f"{USERS[who]} took another user's place out of line: {answer}"
        else:
            assert answer["ok"], answer
            del self.tickets[ticket]

    @rule(who=st.integers(0, 2), share=st.sampled_from(["1/8", "1/4", "1/2"]))
    def reserve_now(self, who: int, share: str) -> None:
        answer = self._call(who, "reserve_now", request={"fraction": share}, holder=self._holder(who))
        if answer["ok"]:
            self.held[answer["result"]["id"]] = who
        else:
            assert answer["error"] in ("SliceUnavailable", "NotPermitted"), answer

    @rule(who=st.integers(0, 2), pick=st.integers(0, 100))
    def release(self, who: int, pick: int) -> None:
        slice_id = self._pick(self.held, pick)
        if slice_id is None:
            return
        answer = self._call(who, "release", slice_id=slice_id)
        if self.held[slice_id] != who:
            assert not answer["ok"], f"{USERS[who]} released another user's slice: {answer}"
        else:
            assert answer["ok"], answer
            del self.held[slice_id]

    @rule(who=st.integers(0, 2))
    def look(self, who: int) -> None:
        for op in ("waiting", "slices"):
            answer = self._call(who, op)
            assert answer["ok"], answer
            text = json.dumps(answer)
            for other, name in enumerate(USERS):
                if other != who:
                    assert f"{name}'s secret job" not in text and f"{name}/x.ipynb" not in text, (USERS[who], text)

    @invariant()
    def nobody_moved_anothers_place_or_slice_and_no_gpu_is_overcommitted(self) -> None:
        if not hasattr(self, "ledger"):
            return
        assert self.ledger.overcommitted() == []
        waiting = self.ledger.waiting()
        assert {w.ticket for w in waiting} == set(self.tickets)
        assert {w.ticket: w.uid for w in waiting} == {t: 6001 + who for t, who in self.tickets.items()}
        slices = self.ledger.slices()
        assert {s.id: s.uid for s in slices} == {sid: 6001 + who for sid, who in self.held.items()}
        for gpu in self.ledger.inventory.snapshot().gpus:
            assert sum(m for s in slices for g, m in zip(s.gpus, s.memory) if g == gpu.uuid) <= gpu.memory_total


test_places_in_line_from_several_users_stay_theirs = machine_test(PlacesInLineFromSeveralUsers, broker=True)


# -- connection patterns against the broker's socket -------------------------------------------------
class BrokerConnectionPatterns(RuleBasedStateMachine):
    """A real broker socket (in this process) meets what a careless or hostile client does with a
    connection: close at once, stop mid-line, send bytes that are not JSON or not UTF-8, an
    over-long line, several requests in one write, half-close, stay open idle. After every step
    a well-behaved client is answered, and the node is never over-committed."""

    @initialize()
    def start(self) -> None:
        import socket
        import tempfile
        import threading

        from jupyter_vgpu.hub.broker import Broker, PolicySource
        from jupyter_vgpu.hub.listener import BrokerServer

        self.socket_module = socket
        self.folder = Path(tempfile.mkdtemp(prefix="vgpu-fuzz-wire-"))
        self.ledger = SQLiteLedger(
            self.folder / "ledger.sqlite", Inventory("2x16GiB"), context_allowance=0, actor=Actor("root", 0, admin=True)
        )
        self.path = self.folder / "sock" / "broker.sock"
        self.path.parent.mkdir(mode=0o755)
        self.server = BrokerServer(self.path, Broker(self.ledger, PolicySource(None)))
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.idle: list[Any] = []

    def teardown(self) -> None:
        for connection in getattr(self, "idle", []):
            connection.close()
        if hasattr(self, "server"):
            self.server.shutdown()
            self.server.server_close()
            self.ledger.close()

    def _open(self) -> Any:
        connection = self.socket_module.socket(self.socket_module.AF_UNIX)
        connection.settimeout(10)
        connection.connect(str(self.path))
        return connection

    def _answers(self, connection: Any, count: int) -> list[dict[str, Any]]:
        data = b""
        while data.count(b"\n") < count:
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
        answers = [json.loads(line) for line in data.splitlines()]
        for answer in answers:
            assert isinstance(answer, dict) and isinstance(answer.get("ok"), bool), answer
            if not answer["ok"]:
                assert "Traceback" not in answer["message"] and len(answer["message"]) < 2000, answer
        return answers

    @rule()
    def connect_and_close(self) -> None:
        self._open().close()

    @rule(data=st.binary(max_size=300))
    def stop_mid_line(self, data: bytes) -> None:
        connection = self._open()
        connection.sendall(data.replace(b"\n", b" "))
        connection.close()

    @rule(data=st.binary(max_size=300) | anything.map(lambda v: json.dumps(v).encode()))
    def send_one_line(self, data: bytes) -> None:
        with self._open() as connection:
            connection.sendall(data.replace(b"\n", b" ") + b"\n")
            assert len(self._answers(connection, 1)) == 1  # every line is answered, whatever it holds

    @rule(extra=st.integers(1, 5000))
    def send_an_over_long_line(self, extra: int) -> None:
        from jupyter_vgpu.hub.listener import MAX_REQUEST

        with self._open() as connection:
            try:
                connection.sendall(b"x" * (MAX_REQUEST + extra) + b"\n")
            except OSError:
                return  # the broker answered and closed before it all went
            answers = self._answers(connection, 1)
            assert answers and not answers[0]["ok"] and "at most" in answers[0]["message"], answers

    @rule(count=st.integers(2, 8), op=st.sampled_from(["slices", "waiting", "info", "overcommitted"]))
    def send_several_requests_at_once(self, count: int, op: str) -> None:
        with self._open() as connection:
            connection.sendall(b"".join(json.dumps({"op": op, "args": {}}).encode() + b"\n" for _ in range(count)))
            answers = self._answers(connection, count)
            assert len(answers) == count and all(a["ok"] for a in answers), answers

    @rule(data=st.binary(max_size=100))
    def half_close(self, data: bytes) -> None:
        with self._open() as connection:
            connection.sendall(data.replace(b"\n", b" "))
            connection.shutdown(self.socket_module.SHUT_WR)
            self._answers(connection, 1)  # an answer for a partial line, or a close: never a hang

    @rule()
    def stay_open_idle(self) -> None:
        if len(self.idle) < 6:
            self.idle.append(self._open())

    @rule()
    def close_the_idle_ones(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle = []

    @invariant()
    def a_well_behaved_client_is_answered_and_nothing_is_overcommitted(self) -> None:
        if not hasattr(self, "server"):
            return
        from jupyter_vgpu.ledger.broker_client import BrokerLedger

        client = BrokerLedger(self.path, path=self.folder / "unused.sqlite", timeout=10)
        held = client.reserve_now(SliceRequest.parse("1/4"), Holder.command("well-behaved"))
        assert client.get(held.id).holder == "well-behaved"
        client.release(held.id)
        assert self.ledger.overcommitted() == [] and self.ledger.slices() == []


test_broker_connection_patterns_never_stop_a_well_behaved_client = machine_test(BrokerConnectionPatterns, broker=True)


# -- idle reclaim: a kernel is shut down only when that lets a waiter in ------------------------
class _Kernels:
    """The kernel manager the reclaimer talks to: kernels that are idle, each holding one slice;
    shutting one down releases its slice, as the provisioner does."""

    def __init__(self, ledger: SQLiteLedger) -> None:
        self.ledger = ledger
        self.slices: dict[str, str] = {}  # kernel id -> slice id
        self.shut_down: list[str] = []

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self.slices

    def get_kernel(self, kernel_id: str) -> Any:
        if kernel_id not in self.slices:
            raise KeyError(kernel_id)
        return type("Kernel", (), {"execution_state": "idle", "iopub_port": None})()

    async def shutdown_kernel(self, kernel_id: str) -> None:
        self.ledger.release(self.slices.pop(kernel_id))
        self.shut_down.append(kernel_id)


class IdleReclaimLetsAWaiterIn(RuleBasedStateMachine):
    """Idle kernels, commands and requests in line (some pinned, some kept to GPUs by a policy) on
    two 16 GiB GPUs; the idle reclaim runs after each step with no notice. A reclaim happens only
    when it lets a waiter in: some request in line did not fit before and fits with the reclaimed
    slices gone (the rule the issue-30 reclaimer broke: any waiter counted as demand)."""

    @initialize()
    def start(self) -> None:
        import asyncio
        import logging
        import tempfile

        from jupyter_vgpu.server.reclaim import IdleSource, Reclaim

        self.folder = Path(tempfile.mkdtemp(prefix="vgpu-fuzz-reclaim-"))
        self.ledger = SQLiteLedger(self.folder / "ledger.sqlite", Inventory("2x16GiB"), context_allowance=0)
        self.kernels = _Kernels(self.ledger)
        self.events: list[Any] = []
        self.allowed: dict[int, tuple[str, ...]] = {}  # ticket -> the GPUs its "policy" allows
        self.loop = asyncio.new_event_loop()
        watchdog = type("Watchdog", (), {"record": lambda _, event, **counted: self.events.append(event)})()
        idle = IdleSource(self.kernels, watchdog, after=1e-6, notice=0.0, per_user_seconds=0.0, log=logging.getLogger("fuzz"))
        self.reclaimer = Reclaim((idle,), log=logging.getLogger("fuzz"))
        self.uuids = [g.uuid for g in self.ledger.inventory.snapshot().gpus]
        self.count = 0

    def teardown(self) -> None:
        if hasattr(self, "loop"):
            self.loop.close()
        if hasattr(self, "ledger"):
            self.ledger.close()

    def _holder(self, kind: str) -> Holder:
        self.count += 1
        return Holder(kind, f"{kind}-{self.count}", pid=os.getpid())  # type: ignore[arg-type]

    @rule(share=st.sampled_from(["1/8", "1/4", "1/2"]), pin=st.sampled_from([None, "0", "1"]))
    def start_an_idle_kernel(self, share: str, pin: str | None) -> None:
        holder = self._holder("kernel")
        try:
            found = self.ledger.reserve_now(SliceRequest.parse(share, gpu=pin), holder)
        except VGPUError:
            return
        self.kernels.slices[holder.name] = found.id

    @rule(share=st.sampled_from(["1/4", "1/2", "1"]), pin=st.sampled_from(["0", "1"]))
    def run_a_command(self, share: str, pin: str) -> None:
        try:
            self.ledger.reserve_now(SliceRequest.parse(share, gpu=pin), self._holder("command"))
        except VGPUError:
            pass

    @rule(
        share=st.sampled_from(["1/4", "1/2", "3/4", "1"]),
        pin=st.sampled_from([None, "0", "1"]),
        gpus=st.integers(1, 2),
        policy=st.sampled_from([None, (0,), (1,)]),
    )
    def wait_in_line(self, share: str, pin: str | None, gpus: int, policy: tuple[int, ...] | None) -> None:
        ticket = self.ledger.enqueue(SliceRequest.parse(share, gpus=1 if pin else gpus, gpu=pin), self._holder("command"))
        if policy is not None:
            self.allowed[ticket.number] = tuple(self.uuids[i] for i in policy)

    @rule(pick=st.integers(0, 100))
    def give_up_a_place(self, pick: int) -> None:
        waiting = self.ledger.waiting()
        if waiting:
            w = waiting[pick % len(waiting)]
            self.ledger.leave_queue(Ticket(w.ticket, w.request))

    @rule()
    def reclaim(self) -> None:
        import asyncio
        import time
        from dataclasses import replace

        from jupyter_vgpu.server.monitor import Sample
        from jupyter_vgpu.slices.placement import place
        from jupyter_vgpu.slices.usage import SliceUsage

        occupancy = self.ledger.occupancy()
        waiting = tuple(replace(w, allowed_gpus=self.allowed.get(w.ticket)) for w in self.ledger.waiting())
        slices = self.ledger.slices()
        usages = tuple(SliceUsage(s, s.pid, {}, 0, 0, "measured", None) for s in slices)
        sample = Sample(time.time(), self.ledger.inventory.snapshot(), occupancy, usages, waiting)
        before = set(self.kernels.slices.values())
        async def tick() -> None:
            await self.reclaimer.check(sample)
            await asyncio.gather(*self.reclaimer._tasks)  # the shutdowns it started

        self.loop.run_until_complete(tick())
        gone = before - set(self.kernels.slices.values())
        if not gone:
            return

        def fits(w: Any, freed: set[str]) -> bool:
            gpus = [
                replace(g, shares=tuple(s for s in g.shares if s.slice.id not in freed)) for g in occupancy.gpus
            ]
            allowed = None if w.allowed_gpus is None else frozenset(w.allowed_gpus)
            try:
                return bool(place(w.request, gpus, allowance=lambda g: 0, allowed=allowed))
            except InvalidRequest:
                return False  # pinned to a GPU its policy does not allow

        let_in = [w for w in waiting if not fits(w, set()) and fits(w, gone)]
        assert let_in, f"reclaimed {gone} for nobody: waiting {[(w.request.describe(), w.allowed_gpus) for w in waiting]}"

    @invariant()
    def never_over_committed(self) -> None:
        if hasattr(self, "ledger"):
            assert self.ledger.overcommitted() == []


test_an_idle_reclaim_always_lets_a_waiter_in = machine_test(IdleReclaimLetsAWaiterIn)
