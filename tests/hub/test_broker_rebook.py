"""Booking a lost slice again through the node broker (after an admin reset its damaged ledger):
only with the slice's claim, which only the user it was granted to gets; only in the seconds after
a reset; counted against the user's quotas; and a running `jupyter vgpu run` command's slice comes
back by itself. Two real users, a root broker, no GPU promised twice at any step."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import defaultdict

import pytest

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.ledger.wire import slice_to_wire

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, Users, wait_until
from .test_broker import vgpu

pytestmark = pytest.mark.hub

#: Hold a slice as a kernel (argv: share, kernel id); prints its id and its claim, then sleeps.
HOLD = """
import sys, time
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.ledger import open_ledger
ledger = open_ledger()
s = ledger.reserve(SliceRequest.parse(sys.argv[1]), Holder.kernel(sys.argv[2]))
print(s.id, ledger.claim(s.id), flush=True)
time.sleep(120)
"""

#: Book again the slice given as JSON (argv 1), held by process argv 2 ('' = the caller), with claim argv 3.
REBOOK = """
import json, sys
from dataclasses import replace
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.ledger.wire import slice_from_wire
record = slice_from_wire(json.loads(sys.argv[1]))
pid = int(sys.argv[2]) if sys.argv[2] else None
try:
    booked = open_ledger().rebook(replace(record, pid=pid, keeper_pid=None), sys.argv[3])
    print("booked", booked.id, booked.owner, booked.pid)
except Exception as error:
    print(type(error).__name__, error)
"""

#: Ask for the claim of slice argv 1.
CLAIM = """
import sys
from jupyter_vgpu.ledger import open_ledger
try:
    print(open_ledger().claim(sys.argv[1]))
except Exception as error:
    print(type(error).__name__, error)
"""


def hold(user, broker: BrokerProcess, share: str, kernel: str) -> tuple[subprocess.Popen[str], str, str]:  # type: ignore[no-untyped-def]
    """``user`` holds a slice as a kernel; the process, the slice's id and its claim."""
    proc = user.popen(PYTHON, "-c", HOLD, share, kernel, env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 2:
        proc.kill()
        raise AssertionError(proc.stderr.read() if proc.stderr else "no slice")
    return proc, line[0], line[1]


def python(user, broker: BrokerProcess, script: str, *args: str) -> str:  # type: ignore[no-untyped-def]
    result = user.run(PYTHON, "-c", script, *args, env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))
    assert result.returncode == 0, result.stderr
    return str(result.stdout.strip())


def rebook(user, broker: BrokerProcess, record: dict, claim: str, pid: int | None = None) -> str:  # type: ignore[no-untyped-def,type-arg]
    return python(user, broker, REBOOK, json.dumps(record), "" if pid is None else str(pid), claim)


def reset(broker: BrokerProcess) -> None:
    """Damage the broker's ledger file, then take the admin's way back (`gc --reset-ledger`)."""
    with open(broker.ledger, "r+b") as handle:
        handle.write(b"\xde\xad" * 50)
    admin = {k: v for k, v in broker.env.items() if k != "JUPYTER_VGPU_BROKER"}
    done = subprocess.run([JUPYTER_VGPU, "gc", "--reset-ledger"], capture_output=True, text=True, timeout=60,
                          env={**admin, "JUPYTER_VGPU_LEDGER": str(broker.ledger)})  # fmt: skip
    assert done.returncode == 0, done.stderr


def booked() -> dict[str, tuple[str, int | None]]:
    """What the book holds (root sees all): slice id -> (owner, pid); and no GPU promised twice."""
    ledger = open_ledger()
    slices = ledger.slices()
    assert ledger.overcommitted() == []
    on: dict[str, int] = defaultdict(int)
    for s in slices:
        for gpu, memory, total in zip(s.gpus, s.memory, s.memory_total):
            on[gpu] += memory
            assert on[gpu] <= total, f"GPU {gpu} promised {on[gpu]} of {total} bytes"
    return {s.id: (s.owner, s.pid) for s in slices}


def test_nobody_books_a_slice_again_under_another_users_slice_id(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    proc, slice_id, claim = hold(alice, broker, "1/4", "kernel-of-alice")
    mine, my_id, my_claim = hold(bob, broker, "1/4", "kernel-of-bob")
    try:
        record = slice_to_wire(open_ledger().get(slice_id))
        assert python(bob, broker, CLAIM, slice_id) == (
            f"NotPermitted Slice {slice_id} belongs to {alice.name}; only its own user gets its claim."
        )
        refused = f"NotPermitted Slice {slice_id} was not granted to {bob.name} for this process, or its claim was not given: "
        assert rebook(bob, broker, record, "").startswith(refused)
        assert rebook(bob, broker, record, "0" * 32).startswith(refused)
        assert rebook(bob, broker, record, my_claim, pid=mine.pid).startswith(refused)  # his claim is for his id
        assert rebook(bob, broker, record, claim, pid=mine.pid).startswith(refused)  # hers is for her, not him
        said = rebook(bob, broker, record, claim, pid=proc.pid)
        assert said.startswith(refused) or said == (
            f"NotPermitted Process {proc.pid} belongs to {alice.name}; a slice can be held only by your own processes."
        )
        assert booked() == {slice_id: (alice.name, proc.pid), my_id: (bob.name, mine.pid)}
    finally:
        proc.kill()
        mine.kill()


def test_after_an_admin_resets_the_brokers_ledger_only_the_holder_books_its_slice_again(
    system_users: Users, broker: BrokerProcess
) -> None:
    """The round-four attack: bob, with a process that ran before the reset, races alice's server
    for her slice id the moment the book is new. Without her claim he gets nothing."""
    alice, bob = system_users.alice, system_users.bob
    proc, slice_id, claim = hold(alice, broker, "1/4", "kernel-of-alice")
    mine, my_id, my_claim = hold(bob, broker, "1/4", "kernel-of-bob")
    try:
        record = slice_to_wire(open_ledger().get(slice_id))
        bobs = slice_to_wire(open_ledger().get(my_id))
        big = {**record, "memory": [16 << 30], "request": {**record["request"], "fraction": 1.0}}
        reset(broker)
        assert booked() == {}

        waits = vgpu(bob, broker, "run", "-p", "1/4", "--", "true")
        assert waits.returncode == 75 and "was reset" in waits.stderr, waits.stderr
        # bob's process ran before the reset, but alice's id is not his, at any size, with any claim he has
        refused = f"NotPermitted Slice {slice_id} was not granted to {bob.name} for this process, or its claim was not given: "
        assert rebook(bob, broker, big, my_claim, pid=mine.pid).startswith(refused)
        assert rebook(bob, broker, record, "", pid=mine.pid).startswith(refused)
        assert booked() == {}
        # alice's kernel (the process that held it) gets its slice back: same id, size, GPU; hers
        assert rebook(alice, broker, record, claim, pid=proc.pid) == f"booked {slice_id} {alice.name} {proc.pid}"
        assert rebook(bob, broker, bobs, my_claim, pid=mine.pid) == f"booked {my_id} {bob.name} {mine.pid}"
        kept = open_ledger().get(slice_id)
        assert (kept.owner, kept.memory, kept.gpus) == (alice.name, tuple(record["memory"]), tuple(record["gpus"]))
        assert booked() == {slice_id: (alice.name, proc.pid), my_id: (bob.name, mine.pid)}
        assert rebook(bob, broker, record, my_claim).startswith("NotPermitted ")
    finally:
        proc.kill()
        mine.kill()


def test_a_slice_is_booked_again_only_after_a_reset(system_users: Users, broker: BrokerProcess) -> None:
    """Outside a reset's grace a rebook is refused, even of the caller's own slice with its claim:
    it is no way around the line and the quotas (round four, S3)."""
    bob = system_users.bob
    mine, my_id, my_claim = hold(bob, broker, "1/4", "kernel-of-bob")
    try:
        record = slice_to_wire(open_ledger().get(my_id))
        assert vgpu(bob, broker, "release", my_id).returncode == 0
        said = rebook(bob, broker, record, my_claim, pid=mine.pid)
        assert said == (
            f"NotPermitted Slice {my_id} can be booked again only in the 10 s after the node broker's ledger was reset; "
            "ask for a new slice instead."
        ), said
        assert booked() == {}
    finally:
        mine.kill()


def test_quotas_hold_while_slices_are_booked_again(system_users: Users, broker: BrokerProcess) -> None:
    """bob may hold two slices. A claim he kept from a slice he released does not get him a third
    while the book is new: a rebook counts against max_slices like any request."""
    bob = system_users.bob
    broker.write_policy({"default": {}, "users": {bob.name: {"max_slices": 2}}})
    assert broker.process is not None
    broker.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "policy reloaded" in broker.log.read_text(), what="the policy reloaded")
    old, old_id, old_claim = hold(bob, broker, "1/4", "kernel-released")
    old_record = slice_to_wire(open_ledger().get(old_id))
    assert vgpu(bob, broker, "release", old_id).returncode == 0
    a, a_id, a_claim = hold(bob, broker, "1/4", "kernel-a")
    b, b_id, b_claim = hold(bob, broker, "1/4", "kernel-b")
    try:
        records = {i: slice_to_wire(open_ledger().get(i)) for i in (a_id, b_id)}
        reset(broker)
        assert rebook(bob, broker, records[a_id], a_claim, pid=a.pid) == f"booked {a_id} {bob.name} {a.pid}"
        assert rebook(bob, broker, records[b_id], b_claim, pid=b.pid) == f"booked {b_id} {bob.name} {b.pid}"
        said = rebook(bob, broker, old_record, old_claim, pid=old.pid)
        assert said.startswith(f"NotPermitted {bob.name}: at most 2 slices at once ("), said
        assert booked() == {a_id: (bob.name, a.pid), b_id: (bob.name, b.pid)}
    finally:
        for proc in (old, a, b):
            proc.kill()


def test_a_run_commands_slice_is_booked_again_after_a_reset(system_users: Users, broker: BrokerProcess) -> None:
    """No server watches a `jupyter vgpu run` command: it watches its own book, books its slice
    again within the reset's grace, under its owner, and says so on its terminal."""
    alice, bob = system_users.alice, system_users.bob
    env = alice.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    command = alice.popen(JUPYTER_VGPU, "run", "-p", "1/4", "--", "sleep", "60", env=env)
    try:
        wait_until(lambda: len(booked()) == 1, what="the command's slice booked")
        ((slice_id, (owner, _)),) = booked().items()
        assert owner == alice.name
        reset(broker)
        wait_until(lambda: slice_id in booked(), timeout=10, what="the command's slice booked again within the grace")
        assert booked()[slice_id][0] == alice.name
        # the room it holds is not promised to anyone else
        refused = vgpu(bob, broker, "run", "-p", "1", "--", "true")
        assert refused.returncode == 75, refused.stderr
        assert len(booked()) == 1
    finally:
        command.send_signal(signal.SIGTERM)
        _, err = command.communicate(timeout=30)
    assert f"jupyter vgpu: the ledger was reset; slice {slice_id} (1/4 GPU) is booked again." in err, err
