"""The node broker as two real users meet it: quotas, ownership, privacy, restarts, bad policies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from jupyter_vgpu.errors import InvalidRequest, LeftLine, NotPermitted
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.ledger.broker_client import BrokerLedger
from jupyter_vgpu.slices import Holder, SliceRequest

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, Users, wait_until

pytestmark = pytest.mark.hub

HOLD = """
import sys, time
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.ledger import open_ledger
ledger = open_ledger()
s = ledger.reserve(SliceRequest.parse(sys.argv[1]), Holder.kernel(sys.argv[2], labels={"path": sys.argv[3]}))
print(s.id, flush=True)
time.sleep(120)
"""


def hold(user, broker: BrokerProcess, share: str, path: str, kernel: str = "k-0001") -> tuple[subprocess.Popen[str], str]:  # type: ignore[no-untyped-def]
    """``user`` holds a slice as a kernel with a notebook path; returns the process and the slice id."""
    proc = user.popen(PYTHON, "-c", HOLD, share, kernel, path,
                      env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise AssertionError(proc.stderr.read() if proc.stderr else "no slice")
    return proc, line


def vgpu(user, broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return user.run(JUPYTER_VGPU, *args, env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))


def test_each_users_slices_are_owned_by_their_own_uid(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    a, a_id = hold(alice, broker, "1/4", "alice/train.ipynb")
    b, b_id = hold(bob, broker, "1/2", "bob/eval.ipynb")
    try:
        held = {s.id: s for s in open_ledger().slices()}  # root: sees everything
        assert (held[a_id].owner, held[a_id].uid, held[a_id].labels["path"]) == (alice.name, alice.uid, "alice/train.ipynb")
        assert (held[b_id].owner, held[b_id].uid, held[b_id].memory) == (bob.name, bob.uid, (8 << 30,))
        assert held[a_id].pid == a.pid or held[a_id].pid in _children(a.pid)  # the peer's pid, not a claim
    finally:
        a.kill()
        b.kill()


def _children(pid: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(pid).children(recursive=True)]


def test_a_request_over_the_per_kernel_limit_is_refused_naming_the_limit(system_users: Users, broker: BrokerProcess) -> None:
    result = vgpu(system_users.alice, broker, "run", "-p", "1/2", "--", "true")
    assert result.returncode == 77
    expected = f"{system_users.alice.name}: at most 1/4 GPU per kernel (group {system_users.students}); asked for 1/2 GPU."
    assert expected in result.stderr
    assert open_ledger().slices() == []


def test_the_total_limit_counts_every_slice_of_the_user(system_users: Users, broker: BrokerProcess) -> None:
    alice = system_users.alice
    first, _ = hold(alice, broker, "1/4", "a.ipynb", "k-1")
    second, _ = hold(alice, broker, "1/4", "b.ipynb", "k-2")
    try:
        result = vgpu(alice, broker, "run", "-p", "1/4", "--", "true")
        assert result.returncode == 77
        assert (
            f"{alice.name}: at most 1/2 GPU in total (group {system_users.students}); already holds 1/2 GPU "
            "and asked for 1/4 GPU." in result.stderr
        )
        # bob (staff: up to a whole GPU per kernel) is not held back by alice's quota
        assert vgpu(system_users.bob, broker, "run", "-p", "1/2", "--", "true").returncode == 0
    finally:
        first.kill()
        second.kill()


def test_a_user_cannot_release_or_read_another_users_slice(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    proc, slice_id = hold(alice, broker, "1/4", "private/thesis.ipynb", "kernel-of-alice")
    try:
        refused = vgpu(bob, broker, "release", slice_id)
        assert refused.returncode == 77
        assert f"Slice {slice_id} belongs to {alice.name}; you can release only your own slices." in refused.stderr
        seen = json.loads(vgpu(bob, broker, "status", "--json").stdout)
        (row,) = seen["slices"]
        assert row["owner"] == alice.name and row["holder"] == "another user's kernel" and row["labels"] == {}
        text = vgpu(bob, broker, "status").stdout + json.dumps(seen)
        assert "thesis" not in text and "kernel-of-alice" not in text
        assert f"slices kept by: node broker at {broker.socket}" in text
        # alice herself sees her path, and may release her slice
        mine = json.loads(vgpu(alice, broker, "status", "--json").stdout)
        assert mine["slices"][0]["labels"]["path"] == "private/thesis.ipynb"
        assert vgpu(alice, broker, "release", slice_id).returncode == 0
    finally:
        proc.kill()


def test_a_full_gpu_message_does_not_leak_other_users_notebooks(system_users: Users, broker: BrokerProcess) -> None:
    broker.write_policy({"default": {}})
    time.sleep(1.1)  # the broker re-reads a changed file at most once a second
    proc, _ = hold(system_users.alice, broker, "1/2", "private/secret-plan.ipynb", "k-alice")
    other, _ = hold(system_users.bob, broker, "1/4", "bob.ipynb", "k-bob")
    try:
        result = vgpu(system_users.bob, broker, "run", "-p", "1/2", "--", "true")
        assert result.returncode == 75
        assert "No room for 1/2 GPU" in result.stderr
        assert "secret-plan" not in result.stderr and "another user's kernel" in result.stderr
        assert "bob.ipynb" in result.stderr  # his own holders he may see
        detail = system_users.bob.run(
            PYTHON, "-c",
            "import json\nfrom jupyter_vgpu.slices import Holder, SliceRequest\nfrom jupyter_vgpu.ledger import open_ledger\n"
            "from jupyter_vgpu.errors import SliceUnavailable\n"
            "try:\n    open_ledger().reserve(SliceRequest.parse('1/2'), Holder.command('x'))\n"
            "except SliceUnavailable as e:\n    print(json.dumps(e.detail))\n",
            env=system_users.bob.env(JUPYTER_VGPU_BROKER=str(broker.socket)),
        )  # fmt: skip
        assert "secret-plan" not in detail.stdout and "k-alice" not in detail.stdout, detail.stdout
        (gpu,) = json.loads(detail.stdout)["gpus"]  # the refusal's structure, as the sidebar gets it
        assert sorted(h["label"] for h in gpu["holders"]) == ["another user's kernel", "bob.ipynb"]
    finally:
        proc.kill()
        other.kill()


def test_hiding_other_users_holders_never_garbles_a_message(system_users: Users, broker: BrokerProcess) -> None:
    """Other users' labels were removed by string replacement: a notebook labelled "." turned a
    refusal into "No room for 1 GPU (16another user's kernel0 GiB)" (issue 19). They are now left
    out of the refusal's structure, before any text is made."""
    broker.write_policy({"default": {}})
    time.sleep(1.1)
    proc, _ = hold(system_users.alice, broker, "1/2", ".", "k-alice")
    try:
        result = vgpu(system_users.bob, broker, "run", "-p", "1", "--", "true")
        assert result.returncode == 75, result.stderr
        first = result.stderr.splitlines()[0]
        assert first == "jupyter vgpu: No room for 1 GPU (16.0 GiB) now: at most 8.0 GiB (about 1/2 GPU) on GPU 0 is free.", first
        assert "reserved by another user's kernel [" in result.stderr and "k-alice" not in result.stderr
    finally:
        proc.kill()


def test_a_slice_cannot_be_pinned_to_another_users_process(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    proc, _ = hold(alice, broker, "1/4", "a.ipynb")
    script = (
        "import sys\nfrom jupyter_vgpu.slices import Holder, SliceRequest\nfrom jupyter_vgpu.ledger import open_ledger\n"
        "ledger = open_ledger()\n"
        "s = ledger.reserve(SliceRequest.parse('1/4'), Holder.command('x'))\n"
        "try:\n    ledger.attach(s.id, int(sys.argv[1]))\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
        "try:\n    ledger.reserve(SliceRequest.parse('1/4'), Holder.command('y', pid=int(sys.argv[1])))\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    try:
        result = bob.run(PYTHON, "-c", script, str(proc.pid),
                         env=bob.env(JUPYTER_VGPU_BROKER=str(broker.socket)))
        lines = result.stdout.splitlines()
        assert lines == [
            f"NotPermitted Process {proc.pid} belongs to {alice.name}; a slice can be held only by your own processes.",
        ] * 2, result.stderr
    finally:
        proc.kill()


def test_the_caller_is_taken_from_the_socket_not_from_the_request(system_users: Users, broker: BrokerProcess) -> None:
    script = (
        "import json, socket, sys\n"
        "c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])\n"
        "c.sendall(json.dumps({'op': 'reserve', 'args': {'request': {'fraction': 0.25}, 'holder_kind': 'command',"
        " 'holder': 'x', 'owner': 'root', 'uid': 0}}).encode() + b'\\n')\n"
        "print(c.makefile().readline())\n"
    )
    result = system_users.bob.run(PYTHON, "-c", script, str(broker.socket))
    answer = json.loads(result.stdout)
    assert answer["ok"] is False and answer["error"] == "InvalidRequest"
    assert open_ledger().slices() == []


def test_killed_broker_restarts_with_every_slice_and_reclaims_dead_holders(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    living, living_id = hold(alice, broker, "1/4", "keeps.ipynb", "k-live")
    dying, _ = hold(bob, broker, "1/4", "dies.ipynb", "k-dead")
    broker.kill(signal.SIGKILL)
    dying.kill()
    dying.wait()
    broker.start()
    try:
        ledger = open_ledger()
        wait_until(lambda: [s.id for s in ledger.slices()] == [living_id], what="the dead holder's slice reclaimed")
        assert ledger.get(living_id).labels["path"] == "keeps.ipynb"
        # the surviving holder goes on using the restarted broker
        assert vgpu(alice, broker, "release", living_id).returncode == 0
    finally:
        living.kill()


def test_a_bad_policy_file_stops_the_broker_at_start_with_a_clear_error(broker: BrokerProcess) -> None:
    broker.kill(signal.SIGTERM)
    broker.write_policy({"groups": {"students": {"max_per_kernel": "half"}}})
    result = subprocess.run(
        [JUPYTER_VGPU, "broker", "--socket", str(broker.socket), "--ledger", str(broker.ledger), "--policy", str(broker.policy)],
        env=broker.env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"jupyter vgpu: The policy in {broker.policy} is not valid: groups.students.max_per_kernel 'half' is not "
        'a GPU share such as "1/4", "25%", 0.5 or 2 (GPUs), or memory such as "8GiB".'
    )
    broker.write_policy("{not json")
    result = subprocess.run(
        [JUPYTER_VGPU, "broker", "--socket", str(broker.socket), "--ledger", str(broker.ledger), "--policy", str(broker.policy)],
        env=broker.env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1 and f"The policy file {broker.policy} is not valid JSON" in result.stderr


def test_a_bad_policy_on_reload_keeps_the_last_good_one(system_users: Users, broker: BrokerProcess) -> None:
    alice = system_users.alice
    broker.write_policy({"default": {}, "groups": {system_users.students: {"max_per_kernel": "oops"}}})
    assert broker.process is not None
    broker.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "Keeping the last good policy" in broker.log.read_text(), what="the reload error logged")
    still = vgpu(alice, broker, "run", "-p", "1/2", "--", "true")
    assert still.returncode == 77 and "at most 1/4 GPU per kernel" in still.stderr
    # a good file takes over without a signal, when the broker sees it changed
    broker.write_policy({"default": {"max_per_kernel": 1}})
    wait_until(lambda: vgpu(alice, broker, "run", "-p", "1/2", "--", "true").returncode == 0, what="the new policy in force")


def test_the_client_maps_refusals_to_the_same_errors(system_users: Users, broker: BrokerProcess) -> None:
    ledger = open_ledger()
    assert isinstance(ledger, BrokerLedger)
    assert ledger.inventory.simulated and ledger.context_allowance is None  # by each GPU's compute capability
    held = ledger.reserve(SliceRequest.parse("1/4"), Holder("command", "root-job"))
    other, other_id = hold(system_users.bob, broker, "1/4", "b.ipynb")
    try:
        root_can = ledger.release(other_id)  # root may release anyone's slice
        assert root_can.owner == system_users.bob.name
        from_bob = system_users.bob.run(
            PYTHON, "-c", f"from jupyter_vgpu.ledger import open_ledger; open_ledger().release({held.id!r})",
            env=system_users.bob.env(JUPYTER_VGPU_BROKER=str(broker.socket)),
        )
        assert f"jupyter_vgpu.errors.NotPermitted: Slice {held.id} belongs to root" in from_bob.stderr
        with pytest.raises(NotPermitted, match="at most 1/4 GPU per kernel"):
            _as_alice_in_process(system_users, broker)
    finally:
        other.kill()
        ledger.release(held.id)


def _as_alice_in_process(users: Users, broker: BrokerProcess) -> None:
    """The error class survives the wire: alice's refusal, raised again in this process."""
    from jupyter_vgpu.ledger.wire import error_from_wire

    result = users.alice.run(
        PYTHON, "-c",
        "import json\nfrom jupyter_vgpu.ledger.broker_client import BrokerClient\nfrom jupyter_vgpu.errors import VGPUError\n"
        f"c = BrokerClient({str(broker.socket)!r})\n"
        "try:\n    c.call('reserve_now', request={'fraction': 0.5}, holder={'kind': 'command', 'name': 'z'})\n"
        "except VGPUError as e:\n    print(json.dumps({'error': type(e).__name__, 'message': str(e)}))\n",
        env=users.alice.env(JUPYTER_VGPU_BROKER=str(broker.socket)),
    )
    raise error_from_wire(json.loads(result.stdout))


def test_allowed_gpus_keep_a_users_slices_on_them(system_users: Users, broker: BrokerProcess) -> None:
    from .conftest import student_policy

    alice, bob = system_users.alice, system_users.bob
    broker.kill(signal.SIGTERM)
    broker.env["JUPYTER_VGPU_SIMULATE"] = "2x16GiB"
    policy = student_policy(system_users)
    policy["users"] = {bob.name: {"gpus": [1]}}
    broker.write_policy(policy)
    broker.start()
    alices, _ = hold(alice, broker, "1/4", "a.ipynb", "k-alice")
    bobs, _ = hold(bob, broker, "1/2", "b.ipynb", "k-bob")
    try:
        rows = {row["owner"]: row for row in json.loads(vgpu(bob, broker, "status", "--json").stdout)["slices"]}
        assert rows[alice.name]["gpu_indices"] == [0]  # alice is not restricted: the tie goes to GPU 0
        assert rows[bob.name]["gpu_indices"] == [1]  # binpack alone would put bob beside alice on GPU 0
        pinned = vgpu(bob, broker, "run", "-p", "1/4", "--gpu", "0", "--", "true")
        assert pinned.returncode == 77
        assert f"{bob.name}: may use GPU 1 only" in pinned.stderr and "asked for GPU 0" in pinned.stderr
    finally:
        bobs.kill()
        alices.kill()


def test_max_wait_cuts_a_users_wait_in_line_short(system_users: Users, broker: BrokerProcess) -> None:
    from .conftest import student_policy

    alice, bob = system_users.alice, system_users.bob
    policy = student_policy(system_users)
    policy["groups"][system_users.students]["max_wait"] = 1
    broker.write_policy(policy)
    broker.process.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
    whole, _ = hold(bob, broker, "1", "big.ipynb", "k-big")  # staff: the whole GPU
    try:
        waited = vgpu(alice, broker, "run", "-p", "1/4", "--wait", "300", "--", "true")
        assert waited.returncode == 75
        assert f"{alice.name}: waits at most 1 s in line" in waited.stderr
        said = float(waited.stderr.split("Waited ", 1)[1].split(" s in line", 1)[0])
        assert 1 <= said < 30, waited.stderr  # what it waited, not the 300 it was ready to (issue 19)
    finally:
        whole.kill()


def test_every_operation_of_the_ledger_contract_works_through_the_broker(system_users: Users, broker: BrokerProcess) -> None:
    """The client implements the contract, not a copy of the SQLite ledger: each operation is one
    call the broker serves with the same method of its own ledger."""
    import asyncio

    from jupyter_vgpu.errors import InvalidRequest, SliceNotFound, SliceUnavailable
    from jupyter_vgpu.ledger.contract import OPERATIONS, Ledger

    ledger = open_ledger()
    assert isinstance(ledger, BrokerLedger) and isinstance(ledger, Ledger)
    used = set()
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("contract", labels={"a": "1"}))
    used.add("reserve_now")
    assert ledger.get(held.id).holder == "contract" and [s.id for s in ledger.slices()] == [held.id]
    used |= {"get", "slices"}
    assert ledger.attach(held.id, os.getpid()).pid == held.pid  # this process: sent as "the caller"
    assert ledger.update_labels(held.id, {"a": None, "b": "2"}).labels == {"b": "2"}
    assert ledger.resize(held.id, SliceRequest.parse("1/2")).memory == (8 << 30,)
    used |= {"attach", "update_labels", "resize"}
    with pytest.raises(InvalidRequest, match=f"Slice {held.id} is cooperative, not a slice with a memory partition to join"):
        ledger.join_hold(held.id, os.getpid())  # tests/hub/test_broker_partition.py: one that has one
    used.add("join_hold")
    from jupyter_vgpu.ledger.broker_client import BrokerClient

    with pytest.raises(InvalidRequest, match=f"Slice {held.id} is cooperative, not a slice with a memory partition to join"):
        BrokerClient(broker.socket).call("join_partition", slice_id=held.id, pid=None)  # a client of the release before
    full = ledger.reserve_now(SliceRequest.parse("1/2"), Holder.command("fills the GPU"))
    ticket = ledger.enqueue(SliceRequest.parse("1/4"), Holder.command("waits"))
    assert [w.holder for w in ledger.waiting()] == ["waits"]
    assert ledger.try_grant(ticket, final=False) is None and "waiting" not in ticket.last_reason
    ledger.leave_queue(ticket)
    assert ledger.waiting() == []
    used |= {"enqueue", "waiting", "try_grant", "leave_queue"}
    with pytest.raises(SliceUnavailable, match="Waited 0.3 s in line. No room for 1/4 GPU"):
        asyncio.run(ledger.reserve_async(SliceRequest.parse("1/4"), Holder.command("async"), wait=0.3))
    assert ledger.waiting() == []
    assert ledger.release(full.id).id == full.id and ledger.release(held.id).id == held.id
    used.add("release")
    with pytest.raises(SliceNotFound):
        ledger.get(held.id)
    assert ledger.reap() == [] and ledger.overcommitted() == []
    used |= {"reap", "overcommitted"}
    assert ledger.book_id() == ledger.book_id() != ""
    lost = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("lost"))
    claim = ledger.claim(lost.id)
    assert len(claim) == 32 and ledger.claim(lost.id) == claim
    assert ledger.rebook(lost, claim) == lost  # booked already: found
    ledger.release(lost.id)  # as a reset loses it, but no reset: refused (tests/hub/test_broker_rebook.py books one)
    with pytest.raises(NotPermitted, match=f"Slice {lost.id} can be booked again only in the 10 s after"):
        ledger.rebook(lost, claim)
    used |= {"book_id", "claim", "rebook"}
    assert used == set(OPERATIONS)


def test_a_lost_answer_leaves_one_slice_that_asking_again_finds(system_users: Users, broker: BrokerProcess) -> None:
    """The broker stops (SIGSTOP) while a kernel start asks for a slice: the client gives up,
    then the broker carries the request out anyway. Asking again with the same token finds that
    slice; nothing is booked twice (issue 18)."""
    assert broker.process is not None
    client = BrokerLedger(broker.socket, path=broker.ledger.parent / "user-ledger.sqlite", timeout=1.0)
    holder = Holder.kernel("k-lost-answer", labels={"path": "lost.ipynb"}, token="start-k-lost-answer")
    broker.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(Exception, match="did not answer"):
            client.reserve_now(SliceRequest.parse("1/4"), holder)  # asks twice with the token, no answer
    finally:
        broker.process.send_signal(signal.SIGCONT)
    wait_until(lambda: len(open_ledger().slices()) == 1, what="the broker carried out the lost request once")
    (first,) = open_ledger().slices()
    again = client.reserve_now(SliceRequest.parse("1/4"), holder)
    assert again.id == first.id
    assert len(open_ledger().slices()) == 1
    other = client.reserve_now(SliceRequest.parse("1/4"), Holder.kernel("k-other"))  # no token given: a new one
    assert other.id != first.id and len(open_ledger().slices()) == 2
    with pytest.raises(Exception, match="is not a request token"):
        Holder.kernel("k", token="../../etc")


def test_a_place_in_line_asked_again_after_its_grant_gets_the_slice_it_was_granted(
    system_users: Users, broker: BrokerProcess
) -> None:
    """A place in line asks for its turn; the broker grants it and dies before it answers (CI of
    787b6f0). Asked again with the request's token, the place gets the slice it was granted, never
    a second one nor "cancelled"; without a token, a place that is gone is still said to be gone."""
    client = BrokerLedger(broker.socket, path=broker.ledger.parent / "user-ledger.sqlite", timeout=30)
    full = client.reserve_now(SliceRequest.parse("1"), Holder.command("full"))
    ticket = client.enqueue(SliceRequest.parse("1/4"), Holder.command("in-line"))
    assert ticket.token and client.try_grant(ticket, final=False) is None
    client.release(full.id)
    granted = client.try_grant(ticket, final=False)
    assert granted is not None
    assert client.try_grant(ticket, final=False) == granted  # the answer was lost: asked again
    assert [s.id for s in open_ledger().slices()] == [granted.id] and open_ledger().waiting() == []
    ticket.token = None
    with pytest.raises(LeftLine, match="in line was cancelled"):
        client.try_grant(ticket, final=False)
    with pytest.raises(InvalidRequest, match="is not a request token"):
        client.client.call("try_grant", ticket={"number": ticket.number, "token": "../x"})
    with pytest.raises(InvalidRequest, match="ticket takes number and token; not 'slice'"):
        client.client.call("try_grant", ticket={"number": ticket.number, "slice": "x"})


def test_an_elastic_request_keeps_its_limit_through_the_broker(system_users: Users, broker: BrokerProcess) -> None:
    """Issue 42: the wire carries the limit; the broker books the request only."""
    alice = system_users.alice
    env = alice.env(JUPYTER_VGPU_BROKER=str(broker.socket), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    script = "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'], os.environ['JUPYTER_VGPU_BURST_LIMIT'])"
    result = alice.run(JUPYTER_VGPU, "run", "-p", "1/4", "--limit", "1/2", "--", PYTHON, "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    reserved, burst = (int(n) for n in result.stdout.split())
    assert reserved == 4 << 30 and burst > reserved  # 8 GiB less the context allowance
    assert "(1/4 GPU, up to 1/2)" in result.stderr
    refused = alice.run(JUPYTER_VGPU, "run", "-p", "1/4", "--limit", "1/8", "--", "true", env=env)
    assert refused.returncode != 0 and "--limit '1/8' is below its request (1/4)" in refused.stderr, refused.stderr
