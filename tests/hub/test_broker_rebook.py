"""Booking a lost slice again through the node broker (after an admin reset its damaged ledger):
only the caller's own running process gets it, never under another user's slice id, and while
new slices wait after the reset only processes that ran before it. Two real users, a root broker."""

from __future__ import annotations

import json
import subprocess

import pytest

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.ledger.wire import slice_to_wire

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, Users
from .test_broker import hold, vgpu

pytestmark = pytest.mark.hub

#: Book again the slice given as JSON (argv 1), held by process argv 2 ('' = the caller); prints what happened.
REBOOK = """
import json, sys
from dataclasses import replace
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.ledger.wire import slice_from_wire
record = slice_from_wire(json.loads(sys.argv[1]))
pid = int(sys.argv[2]) if sys.argv[2] else None
try:
    booked = open_ledger().rebook(replace(record, pid=pid, keeper_pid=None))
    print("booked", booked.id, booked.owner, booked.pid)
except Exception as error:
    print(type(error).__name__, error)
"""


def rebook(user, broker: BrokerProcess, record: dict, pid: int | None = None) -> str:  # type: ignore[no-untyped-def,type-arg]
    result = user.run(PYTHON, "-c", REBOOK, json.dumps(record), "" if pid is None else str(pid),
                      env=user.env(JUPYTER_VGPU_BROKER=str(broker.socket)))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_nobody_books_a_slice_again_under_another_users_slice_id(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    proc, slice_id = hold(alice, broker, "1/4", "alice/train.ipynb", "kernel-of-alice")
    try:
        record = slice_to_wire(open_ledger().get(slice_id))
        said = rebook(bob, broker, record)
        assert said == f"NotPermitted Slice {slice_id} is booked for another holder; only a lost slice can be booked again."
        said = rebook(bob, broker, record, pid=proc.pid)
        assert said == f"NotPermitted Process {proc.pid} belongs to {alice.name}; a slice can be held only by your own processes."
        (kept,) = open_ledger().slices()
        assert (kept.id, kept.owner, kept.pid) == (slice_id, alice.name, proc.pid)
    finally:
        proc.kill()


def test_after_an_admin_resets_the_brokers_ledger_only_the_holder_books_its_slice_again(
    system_users: Users, broker: BrokerProcess
) -> None:
    alice, bob = system_users.alice, system_users.bob
    proc, slice_id = hold(alice, broker, "1/4", "alice/train.ipynb", "kernel-of-alice")
    try:
        record = slice_to_wire(open_ledger().get(slice_id))
        with open(broker.ledger, "r+b") as handle:  # a damaged header, then the admin's way back
            handle.write(b"\xde\xad" * 50)
        admin = {k: v for k, v in broker.env.items() if k != "JUPYTER_VGPU_BROKER"}
        reset = subprocess.run([JUPYTER_VGPU, "gc", "--reset-ledger"], capture_output=True, text=True, timeout=60,
                               env={**admin, "JUPYTER_VGPU_LEDGER": str(broker.ledger)})  # fmt: skip
        assert reset.returncode == 0, reset.stderr
        assert open_ledger().slices() == []

        waits = vgpu(bob, broker, "run", "-p", "1/4", "--", "true")
        assert waits.returncode == 75 and "was reset" in waits.stderr, waits.stderr
        # bob's process started after the reset: it held nothing to book again, under any id
        said = rebook(bob, broker, record)
        assert said.startswith("NotPermitted Process ") and "started after the " in said and " was reset" in said, said
        # alice's kernel (the process that held it) gets its slice back: same id, size, GPU; hers
        assert rebook(alice, broker, record, pid=proc.pid) == f"booked {slice_id} {alice.name} {proc.pid}"
        (kept,) = open_ledger().slices()
        assert (kept.id, kept.owner, kept.memory, kept.gpus) == (slice_id, alice.name, tuple(record["memory"]), tuple(record["gpus"]))
        assert rebook(bob, broker, record).startswith("NotPermitted ")
    finally:
        proc.kill()
