"""Holders are known whatever the wall clock does, and one stopped process holds nobody up
for long (issue 18)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.ledger import sqlite as ledger_module
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.holders import process_alive, start_stamp

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


def vgpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JUPYTER_VGPU, *args], capture_output=True, text=True, timeout=90, env=env)


def hold(share: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [JUPYTER_VGPU, "run", "-p", share, "--", "sleep", "120"], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert holder.stderr is not None
    assert "slice" in holder.stderr.readline()
    return holder


def kill(holder: subprocess.Popen[str]) -> None:
    """SIGKILL the command and what it runs: nobody releases anything."""
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()


def slice_ids() -> set[str]:
    result = vgpu("status", "--json")
    assert result.returncode == 0, result.stderr
    return {s["id"] for s in json.loads(result.stdout)["slices"]}


def in_a_stepped_clock(tmp_path: Path, seconds: int, *command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` where the boot time (``btime`` in /proc/stat, what wall-clock start times are
    derived from) is ``seconds`` later, as after a wall-clock step: a copy of /proc/stat bind-mounted
    in a private mount namespace."""
    stat = Path("/proc/stat").read_text().splitlines()
    moved = [f"btime {int(line.split()[1]) + seconds}" if line.startswith("btime ") else line for line in stat]
    copy = tmp_path / "stat"
    copy.write_text("\n".join(moved) + "\n")
    script = f'mount --bind "{copy}" /proc/stat && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", *command], capture_output=True, text=True, timeout=90
    )


def can_step_the_clock(tmp_path: Path) -> str | None:
    try:
        probe = in_a_stepped_clock(tmp_path, 2, "grep", "^btime", "/proc/stat")
    except FileNotFoundError:
        return "unshare is not installed"
    if probe.returncode != 0:
        return f"cannot make a private mount namespace here ({probe.stderr.strip()[:120]}); needs root"
    return None


def test_a_wall_clock_step_frees_no_live_slice(vgpu_env: dict[str, str], tmp_path: Path) -> None:
    if reason := can_step_the_clock(tmp_path):
        pytest.skip(reason)
    holders = [hold("0.25"), hold("0.25")]
    try:
        ids = slice_ids()
        assert len(ids) == 2
        for step in (2, -2, 3600):
            gc = in_a_stepped_clock(tmp_path, step, JUPYTER_VGPU, "gc")
            assert gc.returncode == 0, gc.stderr
            assert "Freed" not in gc.stdout and gc.stdout.startswith("0 slices freed"), gc.stdout
            assert slice_ids() == ids, f"a clock step of {step} s freed a live slice"
            crowded = in_a_stepped_clock(tmp_path, step, JUPYTER_VGPU, "run", "-p", "0.75", "--", "true")
            assert crowded.returncode == 75, crowded.stderr  # 1/2 is booked: 3/4 more is no room, not a second book
    finally:
        for holder in holders:
            kill(holder)
    assert "2 slices freed; 0 in use." in vgpu("gc").stdout  # and the dead are still found


def test_a_holder_is_known_by_its_boot_and_start_tick(tmp_path: Path) -> None:
    stamp = start_stamp(os.getpid())
    if stamp is None:
        pytest.skip("no /proc here: holders are known by their wall-clock start")
    assert process_alive(os.getpid(), 0.0, stamp)  # the wall-clock start no longer matters
    boot, _, ticks = stamp.partition(":")
    assert not process_alive(os.getpid(), None, f"{boot}:{int(ticks) + 1}")  # a reused pid
    assert not process_alive(os.getpid(), None, f"another-boot:{ticks}")  # before a reboot
    child = subprocess.Popen(["true"])
    child.wait()
    assert not process_alive(child.pid, None, start_stamp(os.getpid()))


def test_a_wall_clock_jump_keeps_every_place_in_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"))
    try:
        ledger.reserve_now(SliceRequest.parse(1), Holder("command", "everything"))
        ticket = ledger.enqueue(SliceRequest.parse(0.5), Holder("command", "waiting"))
        real = time.time
        monkeypatch.setattr(ledger_module.time, "time", lambda: real() + 3600)  # the clock jumps an hour ahead
        ledger.reap()
        assert [w.ticket for w in ledger.waiting()] == [ticket.number]
        monkeypatch.setattr(ledger_module, "boot_clock", lambda: 10**9)  # but a place nobody asks for goes
        ledger.reap()
        assert ledger.waiting() == []
    finally:
        ledger.close()


STOPPED_WRITER = """
import os, signal, sys
from jupyter_vgpu.ledger.file import LedgerFile
ledger = LedgerFile(sys.argv[1])
with ledger.transaction() as db:
    print("in the writers' turn", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads /proc")
def test_a_process_stopped_in_the_writers_turn_holds_everyone_up_only_for_the_bound(
    vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_LOCK_TIMEOUT", "1.5")
    holder = hold("0.25")
    stopped = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WRITER, vgpu_env["JUPYTER_VGPU_LEDGER"]], stdout=subprocess.PIPE, text=True
    )
    try:
        assert stopped.stdout is not None and "writers' turn" in stopped.stdout.readline()
        for _ in range(200):
            if state(stopped.pid) == "T":
                break
            time.sleep(0.02)
        assert state(stopped.pid) == "T"
        assert len(slice_ids()) == 1  # readers never take the writers' turn
        for args in (("run", "-p", "0.25", "--", "true"), ("gc",), ("release", "000000000000")):
            result = vgpu(*args)
            assert result.returncode in (75,), (args, result.returncode, result.stderr)
            assert f"process {stopped.pid} (python" in result.stderr, result.stderr
            assert "which is stopped" in result.stderr and "nothing was changed" in result.stderr
            assert "Traceback" not in result.stderr
        os.kill(stopped.pid, signal.SIGCONT)
        assert stopped.wait(timeout=30) == 0
        assert vgpu("run", "-p", "0.25", "--", "true").returncode == 0
    finally:
        if stopped.poll() is None:
            os.kill(stopped.pid, signal.SIGCONT)
            stopped.kill()
            stopped.wait()
        kill(holder)


def test_a_bad_lock_timeout_is_one_sentence(vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("soon", "0", "1e9", "nan", "٣"):
        monkeypatch.setenv("JUPYTER_VGPU_LOCK_TIMEOUT", value)
        result = vgpu("status")
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().endswith("is not a number of seconds from 0.1 to 3600."), result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads /proc")
def test_a_writer_that_gave_up_leaves_the_turn_free_for_the_next(
    vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived process (a server) gives up waiting while another is stopped in its turn;
    once that one goes on, this process's next write gets the turn (the helper that waited in
    the kernel for it lets go) and nothing is left held."""
    from jupyter_vgpu.errors import LedgerBusy

    monkeypatch.setenv("JUPYTER_VGPU_LOCK_TIMEOUT", "0.5")
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    ledger = SQLiteLedger(path, Inventory("1x16GiB"))
    stopped = subprocess.Popen([sys.executable, "-c", STOPPED_WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert stopped.stdout is not None and "writers' turn" in stopped.stdout.readline()
        for attempt in range(3):  # each gives up; one helper waits for the turn meanwhile
            with pytest.raises(LedgerBusy, match=f"process {stopped.pid} \\(python"):
                ledger.reserve_now(SliceRequest.parse(0.25), Holder("command", f"attempt {attempt}"))
        assert ledger.slices() == []  # reading never waited
        os.kill(stopped.pid, signal.SIGCONT)
        assert stopped.wait(timeout=30) == 0
        held = ledger.reserve_now(SliceRequest.parse(0.25), Holder("command", "after"))
        assert [s.id for s in ledger.slices()] == [held.id]
        assert vgpu("run", "-p", "0.25", "--", "true").returncode == 0  # another process gets the turn too
    finally:
        if stopped.poll() is None:
            os.kill(stopped.pid, signal.SIGCONT)
            stopped.kill()
            stopped.wait()
        ledger.close()
