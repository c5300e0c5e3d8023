"""One book: a process with several handles on the ledger keeps writing the file every other
process reads while commands come and go around it (issue 18: closing any descriptor of the
file dropped SQLite's locks, and the next command to exit deleted the WAL under the server)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.errors import SliceNotFound, SliceUnavailable
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.ledger.file import LedgerFile
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.units import GiB

from .views import deleted_ledger_files

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


def command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JUPYTER_VGPU, *args], capture_output=True, text=True, timeout=60)


def status_ids() -> set[str]:
    result = command("status", "--json")
    assert result.returncode == 0, result.stderr
    return {s["id"] for s in json.loads(result.stdout)["slices"]}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_a_process_with_two_handles_and_commands_around_it_keeps_one_book(vgpu_env: dict[str, str]) -> None:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    first = SQLiteLedger(path, Inventory("1x16GiB"))
    second = SQLiteLedger(path, Inventory("1x16GiB"))  # a server holds several (monitor, provisioner, handlers)
    try:
        held = first.reserve_now(SliceRequest.parse(0.75), Holder("command", "server-side slice"))
        for step in range(3):  # commands start and exit around the long-lived process
            assert status_ids() == {held.id}, f"step {step}: a command does not see the server's slice"
            assert {s.id for s in second.slices()} == {held.id}
            assert deleted_ledger_files(os.getpid(), path) == [], f"step {step}: the WAL was deleted under this process"
        refused = command("run", "-p", "0.75", "--", "true")
        assert refused.returncode == 75, refused.stderr  # 12 GiB of 16 are booked: no room, not a second book
        assert "No room" in refused.stderr
        granted = subprocess.Popen([JUPYTER_VGPU, "run", "-p", "0.25", "--", "sleep", "30"], stderr=subprocess.PIPE, text=True)
        try:
            assert granted.stderr is not None
            said = granted.stderr.readline()  # "jupyter vgpu: slice ... reserved ..." once it holds it
            assert "slice" in said and granted.poll() is None, said + granted.stderr.read()
            ids = {s.id for s in first.slices()}
            assert len(ids) == 2 and held.id in ids, "this process does not see the command's slice"
            assert status_ids() == ids == {s.id for s in second.slices()}
            with pytest.raises(SliceUnavailable):
                second.reserve_now(SliceRequest.parse(memory="1GiB"), Holder("command", "over-booking"))
        finally:
            granted.kill()
            granted.wait()
        assert deleted_ledger_files(os.getpid(), path) == []
        booked = sum(s.memory[0] for s in first.slices())
        assert booked <= 16 * GiB
    finally:
        first.close()
        second.close()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_a_split_is_noticed_said_and_repaired(vgpu_env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """Make the old defect on purpose (open and close the database file beside SQLite), let a
    command come and go so the WAL is deleted under this process, then check the process
    notices, says so, and rejoins the one book."""
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    ledger = SQLiteLedger(path, Inventory("1x16GiB"))
    try:
        ledger.reserve_now(SliceRequest.parse(0.25), Holder("command", "before the split"))
        os.close(os.open(path, os.O_RDWR))  # drops this process's SQLite locks: what the old code did
        assert command("status").returncode == 0  # the last other process exits: it deletes the WAL
        assert deleted_ledger_files(os.getpid(), path), "the defect was not reproduced (no deleted WAL)"
        with caplog.at_level(logging.WARNING, logger="jupyter_vgpu"):
            problem = ledger.file.check_split()
        assert problem is not None and "deleted" in problem
        assert any("split" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
        assert ledger.file.check_split() is None  # repaired
        assert deleted_ledger_files(os.getpid(), path) == []
        mine = ledger.reserve_now(SliceRequest.parse(0.25), Holder("command", "after the split"))
        assert mine.id in status_ids()
        assert status_ids() == {s.id for s in ledger.slices()}
    finally:
        ledger.close()


def test_every_handle_of_a_path_shares_one_connection(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    first = SQLiteLedger(path, Inventory("1x16GiB"))
    second = SQLiteLedger(path, Inventory("1x16GiB"))
    assert first.file._connection is second.file._connection
    first.close()
    assert second.slices() == []  # the other handle still works
    second.close()
    third = SQLiteLedger(path, Inventory("1x16GiB"))
    assert third.file._connection is not second.file._connection  # the last close closed it
    third.close()


def test_a_new_ledger_is_created_owner_only_and_its_logs_follow(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    old = os.umask(0o022)
    try:
        ledger = SQLiteLedger(path, Inventory("1x16GiB"))
        ledger.reserve_now(SliceRequest.parse(0.25), Holder("command", "x"))
        for suffix in ("", "-wal", "-shm", ".lock"):
            assert (path.with_name(path.name + suffix).stat().st_mode & 0o777) == 0o600, suffix
        ledger.close()
    finally:
        os.umask(old)


def _open_reserve_close(path: str, rounds: int, answers: Any) -> None:
    """A short-lived process, many times over: open the ledger, reserve, release, close."""
    failures = []
    for _ in range(rounds):
        try:
            ledger = SQLiteLedger(path, Inventory("2x16GiB"), context_allowance=0)
            try:
                held = ledger.reserve_now(SliceRequest.parse("1/8"), Holder.command("churn", pid=os.getpid()))
                with contextlib.suppress(SliceNotFound):  # in the file moved aside meanwhile
                    ledger.release(held.id)
            finally:
                ledger.close()
        except Exception as error:  # what a user would see instead of their slice
            failures.append(f"{type(error).__name__}: {error}")
    answers.put(failures)


def test_opening_while_a_damaged_ledger_is_moved_aside_never_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `jupyter vgpu gc --reset-ledger` moves a damaged ledger aside while commands start and
    # exit: each must open the old file or the new one, never fail ("disk I/O error" when two
    # processes met a new file still in rollback mode; a close deleting the new file's log by
    # name), and the file left at the path is a whole, healthy ledger. (Without the few seconds
    # new slices wait after a reset, so that every round reserves and writes: the forked workers
    # inherit this.)
    import multiprocessing

    from jupyter_vgpu.ledger import schema

    monkeypatch.setattr(schema, "RESET_GRACE", 0.0)

    path = str(tmp_path / "ledger.sqlite")
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    workers = [context.Process(target=_open_reserve_close, args=(path, 120, answers)) for _ in range(3)]
    for worker in workers:
        worker.start()
    moved = 0
    while any(worker.is_alive() for worker in workers):
        if LedgerFile.reset(path) is not None:
            moved += 1
    failures = [failure for _ in workers for failure in answers.get(timeout=60)]
    for worker in workers:
        worker.join(10)
    assert moved > 10, "the ledger was hardly moved; the test proved nothing"
    assert failures == []
    assert LedgerFile.damage(path) is None
    ledger = SQLiteLedger(path, Inventory("2x16GiB"))
    assert ledger.slices() == []
    ledger.close()
