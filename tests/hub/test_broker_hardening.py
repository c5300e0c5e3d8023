"""The node broker against a hostile user: places in line count and expire, nobody blocks the node,
connections and messages are bounded, nothing of another user leaks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.units import GiB

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, Users, student_policy, wait_until, world_dir

pytestmark = pytest.mark.hub

#: Run as a user: take places in line for argv[2] (a share) argv[3] times, print the answers,
#: then stay alive without ever asking again (a waiter that stopped polling).
SILENT_WAITER = """
import json, sys, time
from jupyter_vgpu.ledger.broker_client import BrokerClient
from jupyter_vgpu.errors import VGPUError
client = BrokerClient(sys.argv[1])
for _ in range(int(sys.argv[3])):
    try:
        number = client.call("enqueue", request={"fraction": sys.argv[2]}, holder={"kind": "command", "name": "waits"})
        print(json.dumps({"ticket": number}), flush=True)
    except VGPUError as error:
        print(json.dumps({"error": type(error).__name__, "message": str(error)}), flush=True)
print("done", flush=True)
time.sleep(120)
"""


def silent_waiter(user, broker: BrokerProcess, share: str, count: int) -> tuple[subprocess.Popen[str], list[dict]]:  # type: ignore[no-untyped-def]
    proc = user.popen(PYTHON, "-c", SILENT_WAITER, str(broker.socket), share, str(count))
    answers = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "done":
            break
        answers.append(json.loads(line))
    return proc, answers


def vgpu(user, broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return user.run(JUPYTER_VGPU, *args, env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))


@pytest.fixture
def quick_broker(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The broker restarted dropping silent waiters after 1 s (instead of 30)."""
    broker.kill(signal_term())
    broker.extra = ["--waiter-timeout", "1"]
    broker.start()
    yield broker


def signal_term() -> int:
    import signal

    return signal.SIGTERM


def test_one_users_silent_waiters_count_against_their_limits_and_stop_blocking_others(
    system_users: Users, quick_broker: BrokerProcess
) -> None:
    alice, bob = system_users.alice, system_users.bob
    root = open_ledger()
    big = root.reserve(SliceRequest.parse("3/4"), Holder.command("root job"))  # 4 GiB of 16 left
    bob_proc, answers = silent_waiter(bob, quick_broker, "1/2", 4)
    try:
        tickets = [a for a in answers if "ticket" in a]
        refused = [a for a in answers if "error" in a]
        assert len(tickets) == 3, answers  # max_slices 3: places in line count as slices
        assert refused and refused[0]["error"] == "NotPermitted"
        assert "at most 3 slices at once (default); already holds 0 and waits in line for 3 more" in refused[0]["message"]
        passing = vgpu(alice, quick_broker, "run", "-p", "1/4", "--", "true")
        assert passing.returncode == 0, passing.stderr  # bob's 1/2 cannot be placed now: a 1/4 that fits passes it
        wait_until(lambda: root.waiting() == [], timeout=10, what="bob's silent places to be dropped")
        granted = vgpu(alice, quick_broker, "run", "-p", "1/4", "--", "true")
        assert granted.returncode == 0, granted.stderr
    finally:
        bob_proc.kill()
        root.release(big.id)


def test_the_broker_expires_a_wait_on_its_own_clock(system_users: Users, broker: BrokerProcess) -> None:
    policy = student_policy(system_users)
    policy["users"] = {system_users.bob.name: {"max_wait": 1}}
    broker.write_policy(policy)
    root = open_ledger()
    big = root.reserve(SliceRequest.parse(1.0), Holder.command("root job"))
    bob_proc, answers = silent_waiter(system_users.bob, broker, "1/2", 1)
    try:
        assert "ticket" in answers[0], answers
        assert [w.owner for w in root.waiting()] == [system_users.bob.name]
        wait_until(lambda: root.waiting() == [], timeout=10, what="the broker to end bob's wait")
        asked = system_users.bob.run(
            PYTHON, "-c",
            "import sys\nfrom jupyter_vgpu.ledger.broker_client import BrokerClient\nfrom jupyter_vgpu.errors import VGPUError\n"
            "try:\n    BrokerClient(sys.argv[1]).call('try_grant', ticket=int(sys.argv[2]), final=False)\n"
            "except VGPUError as e:\n    print(e)\n",
            str(broker.socket), str(answers[0]["ticket"]),
            env=system_users.bob.env(),
        )  # fmt: skip
        assert f"{system_users.bob.name}: waits at most 1 s in line (user {system_users.bob.name})" in asked.stdout, asked
    finally:
        bob_proc.kill()
        root.release(big.id)


def test_connections_are_bounded_per_user_and_in_all(system_users: Users, broker: BrokerProcess) -> None:
    assert broker.process is not None
    server = psutil.Process(broker.process.pid)
    threads_before = server.num_threads()
    opener = system_users.alice.popen(
        PYTHON, "-c",
        "import socket, sys, time\nsocks = []\n"
        "for _ in range(200):\n    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); socks.append(s)\n"
        "time.sleep(1)\nrefused = 0\n"
        "for s in socks:\n    s.settimeout(0.2)\n    try:\n        refused += b'connections per user' in s.recv(4096)\n"
        "    except OSError:\n        pass\nprint(refused, flush=True)\ntime.sleep(30)\n",
        str(broker.socket),
    )  # fmt: skip
    try:
        assert opener.stdout is not None
        refused = int(opener.stdout.readline())
        assert refused >= 200 - 16, "more than 16 connections of one user were served"
        assert server.num_threads() <= threads_before + 16 + 2
        # the node still answers everyone else
        status = system_users.bob.run(JUPYTER_VGPU, "status", env=system_users.bob.env(JUPYTER_VGPU_BROKER=str(broker.socket)))
        assert status.returncode == 0, status.stderr
    finally:
        opener.kill()


def test_a_request_without_end_is_cut_off_and_memory_stays_small(broker: BrokerProcess) -> None:
    assert broker.process is not None
    server = psutil.Process(broker.process.pid)
    before = server.memory_info().rss
    clients = []
    for _ in range(8):
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(str(broker.socket))
        clients.append(conn)
    chunk = b"x" * (1 << 20)
    answers = []
    for conn in clients:
        try:
            for _ in range(16):  # 16 MiB, never a newline
                conn.sendall(chunk)
        except OSError:
            pass  # the broker hung up after its limit: that is the point
        conn.settimeout(5)
        try:
            answers.append(conn.recv(4096))
        except OSError:
            answers.append(b"")
    for conn in clients:
        conn.close()
    assert any(b"A request is at most 65536 bytes" in a for a in answers), answers
    assert server.memory_info().rss - before < 30 * 2**20


def test_an_idle_connection_is_closed(broker: BrokerProcess) -> None:
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(str(broker.socket))
    conn.settimeout(20)
    started = time.monotonic()
    assert conn.recv(4096) == b""  # closed by the broker, not by us
    assert 5 < time.monotonic() - started < 18
    conn.close()


def test_other_users_pids_are_hidden_and_the_node_ledger_is_private(system_users: Users, broker: BrokerProcess) -> None:
    root = open_ledger()
    theirs = root.reserve(SliceRequest.parse("1/4"), Holder.command("root's secret job"))
    try:
        listed = system_users.alice.run(
            PYTHON, "-c",
            "from jupyter_vgpu.ledger import open_ledger\nimport json\n"
            "print(json.dumps([[s.holder, s.pid, s.keeper_pid, s.labels] for s in open_ledger().slices()]))",
            env=system_users.alice.env(JUPYTER_VGPU_BROKER=str(broker.socket)),
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == [["another user's command", None, None, {}]]
        assert theirs.pid == os.getpid()
    finally:
        root.release(theirs.id)
    mode = stat.S_IMODE(broker.ledger.stat().st_mode)
    assert mode & 0o077 == 0, oct(mode)


GPU_VIEW = """
import json
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.cli.status import collect
ledger = open_ledger()
snapshot = ledger.inventory.snapshot()
print(json.dumps({"processes": [[p.pid, p.used, getattr(p, "slice_id", None)] for g in snapshot.gpus for p in g.processes],
                  "status": collect(ledger)}))
"""

HOLD_QUIETLY = """
import sys, time
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.ledger import open_ledger
s = open_ledger().reserve(SliceRequest.parse(sys.argv[1]), Holder.kernel(sys.argv[2], labels={"path": sys.argv[3]}))
print(s.id, flush=True)
time.sleep(120)
"""


def test_the_broker_names_each_gpu_process_slice_without_another_users_pid(
    system_users: Users, broker: BrokerProcess, tmp_path: Path
) -> None:
    # Issue 19: the broker's `snapshot` gave every user every GPU process's pid. Now another
    # user's process comes with pid 0 and the slice it counts against, so bob still sees how much
    # alice's slice uses, and nothing used outside slices that is not.
    alice, bob = system_users.alice, system_users.bob
    simulation = tmp_path / "gpus.json"
    tmp_path.chmod(0o755)
    simulation.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": []}))
    simulation.chmod(0o644)
    broker.kill(signal.SIGTERM)
    broker.env["JUPYTER_VGPU_SIMULATE"] = str(simulation)
    broker.start()
    held = []
    try:
        for user, share, path in ((alice, "1/4", "alice/secret-project.ipynb"), (bob, "1/4", "bob/eval.ipynb")):
            proc = user.popen(PYTHON, "-c", HOLD_QUIETLY, share, f"k-{user.name}", path,
                              env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))  # fmt: skip
            assert proc.stdout is not None
            held.append((proc, proc.stdout.readline().strip()))
        (a, a_id), (b, b_id) = held
        assert a_id and b_id, "a holder did not get its slice"
        simulation.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": [
            {"gpu": 0, "pid": a.pid, "memory": "3GiB"},
            {"gpu": 0, "pid": b.pid, "memory": "2GiB"},
            {"gpu": 0, "pid": 1, "memory": "1GiB"},  # root's, outside slices
        ]}))  # fmt: skip

        def view(user) -> dict:  # type: ignore[no-untyped-def,type-arg]
            seen = user.run(PYTHON, "-c", GPU_VIEW, env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))
            assert seen.returncode == 0, seen.stderr
            return json.loads(seen.stdout)  # type: ignore[no-any-return]

        bobs = view(bob)
        assert sorted(bobs["processes"], key=lambda p: p[1]) == [[0, GiB, None], [b.pid, 2 * GiB, b_id], [0, 3 * GiB, a_id]]
        rows = {row["id"]: row for row in bobs["status"]["slices"]}
        assert rows[a_id]["memory_used"] == 3 * GiB and rows[a_id]["holder_text"] == "another user's kernel"
        assert rows[b_id]["memory_used"] == 2 * GiB
        assert bobs["status"]["gpus"][0]["memory_foreign"] == GiB
        assert str(a.pid) not in json.dumps(bobs)
        alices = view(alice)
        assert sorted(alices["processes"], key=lambda p: p[1]) == [[0, GiB, None], [0, 2 * GiB, b_id], [a.pid, 3 * GiB, a_id]]
        root_view = open_ledger().inventory.snapshot()  # root is an admin: every pid
        assert sorted(p.pid for g in root_view.gpus for p in g.processes) == sorted([1, a.pid, b.pid])
    finally:
        for proc, _ in held:
            proc.kill()
            proc.wait()


FLOOD = """
import os, socket, sys
opened = 0
while not os.path.exists(sys.argv[2]):  # until the test says stop
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect(sys.argv[1])
        opened += 1
        if opened == 100:
            print("on", flush=True)
    except OSError:
        pass
    s.close()
print(opened, flush=True)
"""

CALLS = """
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from jupyter_vgpu.ledger.broker_client import BrokerLedger
times, failures = [], []
def call(_):
    started = time.monotonic()
    try:
        BrokerLedger(sys.argv[1], path="/tmp/unused-ledger.sqlite", timeout=30).slices()
    except Exception as error:
        failures.append(str(error)[:200])
    times.append(time.monotonic() - started)
    time.sleep(0.02)
# Four at a time, as a server's kernels and a terminal ask together: the flood (two busy loops on
# two cores) then lasts a quarter as long, and takes that much less from the rest of the suite.
with ThreadPoolExecutor(4) as pool:
    list(pool.map(call, range(int(sys.argv[2]))))
times.sort()
print(json.dumps({"failures": failures, "p50": times[len(times) // 2], "p99": times[int(len(times) * 0.99)],
                  "max": times[-1]}), flush=True)
"""


@pytest.mark.slow  # half a minute or more on a loaded machine
@pytest.mark.timeout(480)  # the deadline below, and the set-up around it
def test_one_users_connection_flood_costs_another_user_latency_never_a_failure(
    system_users: Users, broker: BrokerProcess
) -> None:
    """bob opens and closes connections as fast as he can (two processes, all through alice's
    calls); alice's 100 calls (each opens the ledger, two connections; four at a time) all succeed. Issue 19: 79
    of 100 failed with EAGAIN and kernel starts answered 503. The figures are printed for the
    note, not asserted."""
    stop = world_dir("vgpu-flood-") / "stop"
    floods = [system_users.bob.popen(PYTHON, "-c", FLOOD, str(broker.socket), str(stop)) for _ in range(2)]
    try:
        for flood in floods:  # the flood is on: each has opened its first 100 connections
            assert flood.stdout is not None and flood.stdout.readline().strip() == "on", flood.stderr
        started = time.monotonic()
        # The deadline is for her 100 calls to end, not a latency bound (the figures are printed):
        # 65 s in a quiet run of the whole suite, over 120 s when it ran beside ./scripts/lab's clone,
        # two busy-looping floods and the broker sharing two cores (run 12 of issue 45).
        calls = system_users.alice.run(PYTHON, "-c", CALLS, str(broker.socket), "100", timeout=360)
        took = time.monotonic() - started
        stop.touch()
        assert calls.returncode == 0, calls.stderr
        result = json.loads(calls.stdout)
        flooded = [int(f.communicate(timeout=60)[0] or 0) for f in floods]
    finally:
        stop.touch()
        for flood in floods:
            flood.kill()
        shutil.rmtree(stop.parent, ignore_errors=True)
    figures = {k: round(v * 1000, 1) for k, v in result.items() if k != "failures"}
    print(f"flood: bob opened {sum(flooded)} connections in alice's {took:.1f} s; her calls in ms {figures}, failures {len(result['failures'])}")
    assert result["failures"] == [], result["failures"][:3]
    assert sum(flooded) > 1000, "the flood did not flood"


def pending_connections(socket_path: Path) -> int:
    """Connections waiting in the broker's backlog (``ss``: a listening socket's Recv-Q)."""
    listed = subprocess.run(["ss", "-xlnH"], capture_output=True, text=True, timeout=30).stdout
    return sum(int(line.split()[2]) for line in listed.splitlines() if str(socket_path) in line.split())


@pytest.mark.slow  # half a minute or more on a loaded machine
def test_a_broker_restart_costs_a_client_a_pause_not_a_failure(system_users: Users, broker: BrokerProcess) -> None:
    """Places in line and commands lived through no broker restart: a 0.6 s gap gave "Connection
    refused" and exit 1 (issue 19). The client now reconnects for up to 15 s. The broker dies
    while the place in line asks for its turn (CI of 787b6f0 met it by chance: "Connection reset
    by peer", exit 1): that asking carries the request's token, so it is asked again, and again
    where the dying broker took the next connection too (run 16; reproduced under load)."""
    if shutil.which("ss") is None:
        pytest.skip("`ss` is needed to see the requests waiting in the broker's backlog")
    env = system_users.bob.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    holder = system_users.bob.popen(JUPYTER_VGPU, "run", "-p", "1", "--", "sleep", "30", env=env)
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1, what="bob's slice")
        waiter = system_users.bob.popen(JUPYTER_VGPU, "run", "-q", "-p", "1/4", "--wait", "60", "--", "true", env=env)
        wait_until(lambda: len(open_ledger().waiting()) == 1, what="bob's place in line")
        assert broker.process is not None
        broker.process.send_signal(signal.SIGSTOP)  # the place's next asking for its turn waits in the backlog
        try:
            wait_until(lambda: pending_connections(broker.socket) >= 1, what="the place in line asking for its turn")
        finally:
            broker.kill(signal.SIGKILL)  # dies with it in flight
        time.sleep(0.6)  # its supervisor starts it again a moment later
        broker.start(wait=False)
        status = system_users.bob.run(JUPYTER_VGPU, "status", env=env)
        assert status.returncode == 0, status.stderr  # waited for the broker instead of failing
        holder.terminate()  # run ends its command and gives the slice back: bob's place is next
        holder.wait()
        code = waiter.wait(timeout=60)
        said = waiter.stderr.read() if waiter.stderr else ""
        assert code == 0, f"{said}\nthe broker's log:\n{broker.log.read_text()[-4000:]}"
    finally:
        holder.kill()
        if waiter.poll() is None:
            waiter.kill()


def test_without_limits_in_the_policy_a_user_still_holds_at_most_8_places_in_line(
    system_users: Users, broker: BrokerProcess
) -> None:
    broker.write_policy({"default": {}})
    broker.kill(signal.SIGTERM)
    broker.start()
    filler = system_users.bob.popen(JUPYTER_VGPU, "run", "-p", "1", "--", "sleep", "60",
                                    env=system_users.bob.env(JUPYTER_VGPU_BROKER=str(broker.socket)))  # fmt: skip
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1, what="the GPU to be full")
        proc, answers = silent_waiter(system_users.alice, broker, "1/4", 9)
        try:
            assert [a.get("error") for a in answers] == [None] * 8 + ["NotPermitted"], answers
            assert "at most 8 places in line at once (the broker's default)" in answers[-1]["message"]
        finally:
            proc.kill()
    finally:
        filler.kill()


def test_a_missing_slice_is_said_without_the_brokers_private_path(system_users: Users, broker: BrokerProcess) -> None:
    missing = vgpu(system_users.alice, broker, "release", "000000000000")
    assert missing.returncode != 0
    assert "No slice '000000000000' in the node broker's ledger" in missing.stderr, missing.stderr
    assert str(broker.ledger) not in missing.stderr and str(broker.ledger.parent) not in missing.stderr


def test_the_broker_refuses_a_socket_folder_others_can_write_to(tmp_path: Path) -> None:
    """A root broker ran chmod(socket, 0o666) after bind, following a link another user swapped in
    (a root-owned 0600 file became 0666 in 8 starts; issue 19). The socket's folder must be the
    broker's alone, and the socket gets its mode as it is made."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = tmp_path / "root-only"
    target.write_text("secret")
    target.chmod(0o600)
    (shared / "broker.sock").symlink_to(target)
    started = subprocess.run(
        [JUPYTER_VGPU, "broker", "--socket", str(shared / "broker.sock"), "--ledger", str(tmp_path / "state" / "l.sqlite")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "JUPYTER_VGPU_SIMULATE": "1x16GiB"},
    )  # fmt: skip
    assert started.returncode != 0
    assert f"The broker's socket folder {shared} is writable by other users (mode 1777)" in started.stderr, started.stderr
    assert "Traceback" not in started.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "secret"


@pytest.mark.parametrize("kind", ["folder", "file", "link"])
def test_the_broker_removes_nothing_but_an_old_socket_at_its_socket_path(tmp_path: Path, kind: str) -> None:
    """A typo in --socket (a folder, a file of the admin's) is one sentence, and what is there stays."""
    (folder := tmp_path / "run").mkdir(mode=0o755)
    there = folder / "broker.sock"
    if kind == "folder":
        there.mkdir()
    elif kind == "file":
        there.write_text("notes")
    else:
        there.symlink_to(tmp_path / "elsewhere")
    started = subprocess.run(
        [JUPYTER_VGPU, "broker", "--socket", str(there), "--ledger", str(tmp_path / "state" / "l.sqlite")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "JUPYTER_VGPU_SIMULATE": "1x16GiB"},
    )  # fmt: skip
    assert started.returncode != 0 and "Traceback" not in started.stderr, started.stderr
    what = {"folder": "a folder", "file": "a file that is not a socket", "link": "a link"}[kind]
    assert f"The broker's socket path {there} is {what}, which the broker never removes" in started.stderr, started.stderr
    assert os.path.lexists(there) and (kind != "file" or there.read_text() == "notes")


def test_the_socket_is_world_writable_from_the_start(broker: BrokerProcess) -> None:
    assert stat.S_IMODE(os.lstat(broker.socket).st_mode) == 0o666


IMPOSTOR = """
import os, socket, sys, time
os.umask(0)  # a socket everyone may connect to, as the broker's is
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(8)
print("listening", flush=True)
conn, _ = server.accept()
conn.recv(65536)
conn.sendall(b'{"ok": true, "result": {"user": "you", "admin": true}}\\n')
time.sleep(30)
"""


def test_a_client_refuses_a_listener_that_is_not_the_brokers_user(system_users: Users, tmp_path: Path) -> None:
    """In a folder others can write to, another user could listen first and answer as the broker."""
    shared = Path(tempfile.mkdtemp(prefix="vgpu-shared-"))
    shared.chmod(0o1777)
    sock = shared / "broker.sock"
    impostor = system_users.alice.popen(PYTHON, "-c", IMPOSTOR, str(sock))
    try:
        assert impostor.stdout is not None and impostor.stdout.readline().strip() == "listening"
        fooled = system_users.bob.run(JUPYTER_VGPU, "status", env=system_users.bob.env(JUPYTER_VGPU_BROKER=str(sock)))
        assert fooled.returncode == 1, fooled.stdout
        expected = f"runs as uid {system_users.alice.uid}, neither root nor the owner of its folder (uid 0)"
        assert expected in fooled.stderr and "refusing to talk to it" in fooled.stderr, fooled.stderr
    finally:
        impostor.kill()
        shutil.rmtree(shared, ignore_errors=True)


def test_a_broker_backed_server_answers_an_overlong_slice_id_with_one_sentence(broker: BrokerProcess, tmp_path: Path) -> None:
    """``DELETE /api/vgpu/slices/<65 characters>`` was a 500 on a server whose ledger is the node
    broker: the broker refuses ids over 64 characters (InvalidRequest), which nothing caught."""
    from jupyter_process import isolated_env, start_jupyter

    server = start_jupyter(tmp_path, env=isolated_env(tmp_path, JUPYTER_VGPU_BROKER=str(broker.socket)))
    try:
        assert server.url.endswith("/vgpu-test/")  # under a base URL, as a hub serves it
        for length in (65, 400):
            status, body = server.api("DELETE", "api/vgpu/slices/" + "a" * length)
            assert status == 400, (status, body)
            assert body["message"] == (
                f"slice_id must be text of at most 64 characters, not 'aaaaaaaaaaaaaaaaaaa...aaaaaaaaaaaaaaaaaaa' ({length} characters)."
            )
        status, body = server.api("DELETE", "api/vgpu/slices/" + "a" * 64)
        assert status == 404 and body["message"].startswith("No slice 'aaaa"), (status, body)
        assert "Traceback" not in server.log_text()
    finally:
        server.stop()


def test_a_policy_file_nested_100000_deep_is_refused_and_every_request_answered(
    system_users: Users, broker: BrokerProcess
) -> None:
    """Issue 30: such a file dropped the request that found it changed, with a RecursionError
    traceback in the broker's log. It is refused in one sentence like any bad policy file; the
    last good policy stays in force."""
    alice = system_users.alice
    broker.write_policy("[" * 100_000 + "]" * 100_000)
    refused = f"The policy file {broker.policy} nests lists or mappings too deeply to be read"

    def asked_after_the_change() -> bool:
        status = vgpu(alice, broker, "status")
        assert status.returncode == 0, status.stderr  # answered, every time
        return refused in broker.log.read_text()

    wait_until(asked_after_the_change, what="the broker to refuse the deep policy")
    log = broker.log.read_text()
    assert "Keeping the last good policy" in log and "Traceback" not in log and "RecursionError" not in log
    still = vgpu(alice, broker, "run", "-p", "1/2", "--", "true")
    assert still.returncode == 77 and "at most 1/4 GPU per kernel" in still.stderr, still.stderr



#: Run as a user: open the broker's ledger, say so, and on a line from stdin reserve a 1/4 GPU
#: (with a request token, as every reservation has), print the slice and hold it.
RESERVE_ON_CUE = """
import sys, time
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.ledger.broker_client import BrokerLedger
ledger = BrokerLedger(sys.argv[1], path="/tmp/unused-ledger.sqlite", timeout=60)
print("ready", flush=True)
sys.stdin.readline()
print(ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("cue")).id, flush=True)
time.sleep(60)
"""


def test_a_request_in_flight_when_the_broker_dies_is_asked_again_once_it_is_back(
    system_users: Users, broker: BrokerProcess
) -> None:
    """Issue 30: a request whose connection the broker dropped by dying (killed, then started
    again by its supervisor) failed with "closed the connection without an answer". A read, and a
    reservation (it carries its token), are asked again once the broker listens again; the
    reservation is booked once."""
    if shutil.which("ss") is None:
        pytest.skip("`ss` is needed to see the requests waiting in the broker's backlog")
    bob = system_users.bob
    env = bob.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    reserver = subprocess.Popen(bob.command(PYTHON, "-c", RESERVE_ON_CUE, str(broker.socket)), env=env, cwd="/",
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert broker.process is not None and reserver.stdin is not None and reserver.stdout is not None
    try:
        assert reserver.stdout.readline().strip() == "ready"
        broker.process.send_signal(signal.SIGSTOP)  # what is asked now waits in its backlog
        try:
            status = bob.popen(JUPYTER_VGPU, "status", env=env)
            reserver.stdin.write("go\n")
            reserver.stdin.flush()
            wait_until(lambda: pending_connections(broker.socket) == 2, what="both requests in the broker's backlog")
        finally:
            broker.kill(signal.SIGKILL)  # dies with both requests in flight
        time.sleep(1.0)  # its supervisor starts it again a moment later
        broker.start(wait=False)
        out, err = status.communicate(timeout=90)
        assert status.returncode == 0, err
        assert "slices kept by: node broker" in out and "Traceback" not in err
        held = reserver.stdout.readline().strip()
        assert held, reserver.stderr.read() if reserver.poll() is not None and reserver.stderr else "no slice"
        assert [(s.id, s.owner) for s in open_ledger().slices()] == [(held, bob.name)]
    finally:
        reserver.kill()
        reserver.wait()
