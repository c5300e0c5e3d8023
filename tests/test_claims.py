"""A slice's claim: what its holder brings to book it again after a reset. Only the user a slice
was granted to gets it; a rebook without it, outside a reset's grace, or of an id that is another
holder's is refused in one sentence; the key behind the claims is the keeper's private file; the
tier is the ledger's own, never the record's. (Two real users and a root broker:
tests/hub/test_broker_rebook.py.)"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from jupyter_vgpu.enforcement import Tier
from jupyter_vgpu.errors import LedgerError, NotPermitted
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.ledger.claims import Claims, claimant, key_path
from jupyter_vgpu.ledger.file import LedgerFile
from jupyter_vgpu.server.rebooking import Rebooking
from jupyter_vgpu.slices import Actor, Holder, SliceRequest


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SQLiteLedger:
    monkeypatch.delenv("JUPYTER_VGPU_HAMI_CORE", raising=False)
    monkeypatch.delenv("JUPYTER_VGPU_TIERS", raising=False)
    return SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"), context_allowance=512 << 20)


def reset(ledger: SQLiteLedger) -> SQLiteLedger:
    """What `jupyter vgpu gc --reset-ledger` does (this process holds slices: a grace begins)."""
    assert LedgerFile.reset(ledger.path) is not None
    assert ledger.slices() == []
    return ledger


def test_only_the_slices_own_user_gets_its_claim_and_the_key_is_private(ledger: SQLiteLedger) -> None:
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("train"))
    claim = ledger.claim(held.id)
    assert len(claim) == 32 and ledger.claim(held.id) == claim
    key = key_path(ledger.path)
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_uid == os.geteuid()
    other = ledger.acting_for(Actor("someone", os.getuid() + 1000, admin=True))
    with pytest.raises(NotPermitted, match=f"Slice {held.id} belongs to .*; only its own user gets its claim."):
        other.claim(held.id)  # an admin too: a claim is for the user it was granted to
    assert Claims(ledger.path).of(held.id, os.getuid() + 1000, claimant(held)) != claim


def test_a_key_that_is_not_the_keepers_alone_is_refused_in_one_sentence(ledger: SQLiteLedger) -> None:
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("train"))
    key = key_path(ledger.path)
    key.write_text("00" * 32 + "\n")
    key.chmod(0o644)  # planted, readable by others: its claims are no secret
    with pytest.raises(LedgerError, match=r"The ledger's key .* is not this user's private file \(owner uid \d+, mode 644\); remove it"):
        SQLiteLedger(ledger.path, ledger.inventory).claim(held.id)
    key.unlink()
    key.symlink_to("/etc/hostname")
    with pytest.raises(LedgerError, match=r"The ledger's key .* cannot be read"):
        SQLiteLedger(ledger.path, ledger.inventory).claim(held.id)


def test_a_rebook_needs_the_claim_and_a_reset(ledger: SQLiteLedger) -> None:
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("train"))
    claim = ledger.claim(held.id)
    ledger.release(held.id)
    with pytest.raises(NotPermitted, match=f"Slice {held.id} can be booked again only in the 10 s after the ledger .* was reset"):
        ledger.rebook(held, claim)  # released on purpose, the book the same: no way around the line
    assert ledger.slices() == []
    ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("another"))  # runs: the reset keeps a grace
    reset(ledger)
    with pytest.raises(NotPermitted, match=f"Slice {held.id} was not granted to .*, or its claim was not given"):
        ledger.rebook(held, "")
    with pytest.raises(NotPermitted, match="Slice 0123456789ab was not granted to"):
        ledger.rebook(replace(held, id="0123456789ab"), claim)  # a claim is for one id
    again = ledger.rebook(held, claim)
    assert (again.id, again.memory, again.gpus) == (held.id, held.memory, held.gpus)
    assert ledger.rebook(held, claim) == again  # asked again: found, not booked twice
    assert [s.id for s in ledger.slices()] == [held.id]


def test_after_a_split_the_users_own_ledger_books_it_again_outside_a_grace(ledger: SQLiteLedger) -> None:
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("train"))
    claim = ledger.claim(held.id)
    ledger.release(held.id)  # as a split loses this process's write
    assert ledger.rebook(held, claim, split=True).id == held.id


def test_the_tier_is_the_ledgers_not_the_records(ledger: SQLiteLedger) -> None:
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("train"))
    assert held.tier is Tier.COOPERATIVE
    claim = ledger.claim(held.id)
    reset(ledger)
    again = ledger.rebook(replace(held, tier=Tier.HAMI_CORE), claim)  # no HAMi-core here
    assert again.tier is Tier.COOPERATIVE


def test_a_server_tells_a_kernel_whose_slice_id_is_held_by_another_holder(ledger: SQLiteLedger) -> None:
    """The id alone proves nothing: a kernel's slice is its own only with its id, user and holder."""
    rebooking = Rebooking(ledger, uid=os.getuid(), server_pid=os.getpid(), log=logging.getLogger("test"))
    snapshot = ledger.inventory.snapshot()
    held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.kernel("k-1", pid=os.getpid()))
    pids = {"k-1": os.getpid()}
    assert [s.id for s in rebooking.step(ledger.slices(), pids, None, snapshot)] == [held.id]
    assert rebooking.take_untold() == []
    with ledger.file.transaction() as db:  # the same id, now another kernel's
        db.execute("UPDATE slices SET holder = 'k-2' WHERE id = ?", (held.id,))
    rebooking.step(ledger.slices(), pids, None, snapshot)
    ((usage, told),) = rebooking.take_untold()
    assert usage.slice.id == held.id
    assert told.startswith("this kernel's GPU slice id is held by someone else now (Slice ") and "restart the kernel" in told


def test_a_kernel_is_told_of_a_reset_though_its_server_met_it_as_a_split_too(ledger: SQLiteLedger) -> None:
    """`gc --reset-ledger` of a damaged ledger: SQLite's check of the damaged file deletes the log
    the server has open, so its next tick finds a split as well as a new book (CI of 5c7831a: the
    kernel was told "the ledger split from this server's"). A new book is a reset."""
    rebooking = Rebooking(ledger, uid=os.getuid(), server_pid=os.getpid(), log=logging.getLogger("test"))
    snapshot = ledger.inventory.snapshot()
    kernel = subprocess.Popen(["sleep", "60"])
    try:
        held = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.kernel("k-1", pid=kernel.pid))
        assert [s.id for s in rebooking.step(ledger.slices(), {"k-1": kernel.pid}, None, snapshot)] == [held.id]
    finally:
        kernel.kill()  # its process gone: the slice cannot be booked again, so the kernel is told why
        kernel.wait()
    with open(ledger.path, "r+b") as handle:
        handle.write(b"\xde\xad" * 50)
    env = {**os.environ, "JUPYTER_VGPU_LEDGER": str(ledger.path), "JUPYTER_VGPU_SIMULATE": "1x16GiB"}
    done = subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "gc", "--reset-ledger"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    split = ledger.check_split()
    assert rebooking.step(ledger.slices(), {"k-1": kernel.pid}, split, snapshot) == []
    ((usage, told),) = rebooking.take_untold()
    assert usage.slice.id == held.id
    assert told.startswith("the ledger was reset and this kernel's GPU slice could not be booked again: "), told


def test_a_claim_is_for_the_process_that_kept_the_slice_not_for_its_id_alone(ledger: SQLiteLedger) -> None:
    """Hardening round five, M1: a user kept the claims of slices he had released and, in a reset's
    grace, booked those ids again from another process of his, ahead of the live holders."""
    import subprocess
    import sys

    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    old, holder = subprocess.Popen(sleep), subprocess.Popen(sleep)
    try:
        released = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("done long ago", pid=old.pid))
        stale = ledger.claim(released.id)
        ledger.release(released.id)
        # A command under `jupyter vgpu run`: run (this process) keeps it; the program holds it.
        kept = ledger.reserve_now(SliceRequest.parse("1/4"), Holder("command", "train", pid=holder.pid, keeper=os.getpid()))
        claim = ledger.claim(kept.id)
        old.kill()
        old.wait()
        reset(ledger)
        for pid in (os.getpid(), holder.pid):  # his running processes, both started before the reset
            with pytest.raises(NotPermitted, match=f"Slice {released.id} was not granted to .* for this process"):
                ledger.rebook(replace(released, pid=pid), stale)
        assert ledger.slices() == []
        # The kept slice goes back from its keeper, whichever process holds it now.
        again = ledger.rebook(replace(kept, pid=holder.pid), claim)
        assert again.id == kept.id and again.keeper_pid == os.getpid()
    finally:
        for process in (old, holder):
            process.kill()
            process.wait()
