"""Property-based tests (Hypothesis): whatever a hostile or careless user sends, the answer is one
sentence or a valid result, and the ledger never over-commits a GPU or loses a live holder's slice.

The budget is ``VGPU_FUZZ_EXAMPLES`` examples per property (default 200) and ``VGPU_FUZZ_RUNS``
random operation sequences (default 50) of up to 30 steps across three writer processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from jupyter_vgpu.errors import InvalidRequest, SliceNotFound, VGPUError
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.slices import Actor, Holder, SliceRequest, SQLiteLedger, Ticket
from jupyter_vgpu.slices.holders import process_alive
from jupyter_vgpu.slices.store import LedgerFile

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
       "attach", "update_labels", "resize", "release", "reap", "overcommitted", "reserve", "__init__", "_grant"]  # fmt: skip
ARG_NAMES = ["slice_id", "request", "holder", "ticket", "final", "pid", "labels", "uid", "owner", "self"]


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


LedgerRace.TestCase.settings = settings(
    max_examples=RUNS, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_random_operations_across_processes_keep_the_ledger_sound = LedgerRace.TestCase

