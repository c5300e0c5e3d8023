"""What a process holding a slice says about itself, for the server to read.

A kernel writes a small JSON report next to the ledger (``<ledger dir>/reports/<slice id>.json``):
which frameworks it configured and how, and the GPU memory its frameworks say they hold. The
server uses it to show what was applied, and as the usage figure when NVML's pids cannot be
matched (containers), marked "reported" rather than "measured".

Report shape::

    {"slice_id": "...", "pid": 1234, "updated": 1700000000.0,
     "frameworks": {"tensorflow": {"status": "applied", "detail": "2 logical GPUs of 1.8 GiB"}},
     "memory_used": 123456 | null,      # bytes the frameworks report holding, all GPUs
     "peak_memory_used": 234567 | null,
     "tier_problem": "..."}             # only where the slice's hard tier does not hold it (why)

Any other Python process of the slice (a command under ``jupyter vgpu run``, ``!python train.py``
from a notebook, a DataLoader worker) that configures a framework writes its own report beside
it (``<slice id>.p<pid>.json``, the same shape plus ``stamp`` and ``command``), so ``%vgpu`` and
``jupyter vgpu status`` can say which processes of a slice are configured (:func:`configured_processes`).

The server writes back what its watchdog says to the slice's holder, beside the report
(``<slice id>.notices.json``), so the kernel can print it into the cell that is running::

    {"slice_id": "...", "notices": [
        {"id": "1700000000.0-warn", "t": 1700000000.0, "action": "warn",   # or interrupt | restart | shutdown
         "stage": "ahead" | "done",       # "ahead": the action follows in a moment
         "message": "...", "memory_used": 123 | null, "memory_reserved": 456}]}
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from ..ownfiles import read_own_json, write_json
from .ids import is_slice_id

#: Where this process writes its slice's reports instead (a Slurm kernel: a folder the login node
#: reads, set by the ``slurm`` launcher).
ENV_REPORTS = "JUPYTER_VGPU_REPORTS"


def report_dir(ledger_path: str | Path) -> Path:
    override = os.environ.get(ENV_REPORTS)
    return Path(override) if override else Path(ledger_path).parent / "reports"


def report_path(ledger_path: str | Path, slice_id: str) -> Path:
    return report_dir(ledger_path) / f"{slice_id}.json"


#: The newest notices kept per slice.
MAX_NOTICES = 20


def notices_path(ledger_path: str | Path, slice_id: str) -> Path:
    return report_dir(ledger_path) / f"{slice_id}.notices.json"


def idle_path(ledger_path: str | Path, slice_id: str) -> Path:
    return report_dir(ledger_path) / f"{slice_id}.idle.json"


def write_idle(ledger_path: str | Path, slice_id: str, since: float) -> None:
    """Since when the slice's kernel has done nothing (the server's idle reclaim judges it; the
    CLI and %vgpu read it here)."""
    _write_json(idle_path(ledger_path, slice_id), slice_id, {"slice_id": slice_id, "idle_since": since, "updated": time.time()})


#: An idle time the server has not confirmed for this long is stale (the server has gone).
IDLE_STALE_SECONDS = 120.0


def read_idle(ledger_path: str | Path, slice_id: str, now: float | None = None) -> float | None:
    """Seconds the slice has been idle, as its server last judged; None when unknown or stale."""
    data = _read_own(idle_path(ledger_path, slice_id))
    if not isinstance(data, dict) or data.get("slice_id") != slice_id:
        return None
    since, updated = data.get("idle_since"), data.get("updated")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (since, updated)):
        return None
    now = time.time() if now is None else now
    if now - float(updated) > IDLE_STALE_SECONDS:  # type: ignore[arg-type]
        return None
    return max(0.0, now - float(since))  # type: ignore[arg-type]


def _write_json(target: Path, slice_id: str, data: dict[str, Any]) -> None:
    write_json(target, data, prefix=slice_id)


def add_notice(ledger_path: str | Path, slice_id: str, notice: dict[str, Any]) -> None:
    """Append a notice for the slice's holder (the newest :data:`MAX_NOTICES` are kept)."""
    notices = [n for n in read_notices(ledger_path, slice_id) if n.get("id") != notice.get("id")]
    notices = [*notices, notice][-MAX_NOTICES:]
    _write_json(notices_path(ledger_path, slice_id), slice_id, {"slice_id": slice_id, "notices": notices})


#: Largest report read (a kernel's report is a few hundred bytes).
MAX_REPORT = 64 * 1024

#: No GPU holds more than this (1 PiB): a larger "memory used" is not a measurement.
MAX_BYTES = 1 << 50


def _read_own(path: Path) -> Any:
    """The JSON in ``path`` if this user owns the file (another user's file in a shared folder is
    not a report or a notice of ours), at most :data:`MAX_REPORT` bytes; None otherwise."""
    return read_own_json(path, MAX_REPORT)


def read_notices(ledger_path: str | Path, slice_id: str) -> list[dict[str, Any]]:
    """The slice's notices, oldest first ([] when there are none, the file cannot be read or is
    not this user's)."""
    data = _read_own(notices_path(ledger_path, slice_id))
    notices = data.get("notices") if isinstance(data, dict) else None
    return [n for n in notices if isinstance(n, dict)] if isinstance(notices, list) else []


def write_report(ledger_path: str | Path, slice_id: str, report: dict[str, Any]) -> None:
    """Atomically replace the slice's report (readers never see half a file)."""
    data = {"slice_id": slice_id, "pid": os.getpid(), "updated": time.time(), **report}
    _write_json(report_path(ledger_path, slice_id), slice_id, data)


def process_report_path(ledger_path: str | Path, slice_id: str, pid: int) -> Path:
    return report_dir(ledger_path) / f"{slice_id}.p{pid}.json"


def write_process_report(ledger_path: str | Path, slice_id: str, report: dict[str, Any]) -> None:
    """Atomically replace this process's report for the slice (a process other than the kernel)."""
    import sys

    import psutil

    from .holders import start_stamp

    pid = os.getpid()
    try:
        command = " ".join(psutil.Process(pid).cmdline())  # python -c's code too, which sys.argv leaves out
    except (psutil.Error, OSError):
        command = " ".join(sys.argv)
    command = command or sys.executable
    data = {
        "slice_id": slice_id,
        "pid": pid,
        "stamp": start_stamp(pid),
        "command": command if len(command) <= 120 else command[:117] + "...",
        "updated": time.time(),
        **report,
    }
    _write_json(process_report_path(ledger_path, slice_id, pid), slice_id, data)


def remove_process_report(ledger_path: str | Path, slice_id: str, pid: int) -> None:
    process_report_path(ledger_path, slice_id, pid).unlink(missing_ok=True)


def _process_report_paths(ledger_path: str | Path, slice_id: str) -> list[Path]:
    """The slice's process reports, by name ([] when the folder cannot be read)."""
    try:
        return sorted(report_dir(ledger_path).glob(f"{slice_id}.p*.json"))
    except OSError:
        return []


#: Most process reports read per slice (a DataLoader with many workers writes one each).
MAX_PROCESS_REPORTS = 64


def configured_processes(ledger_path: str | Path, slice_id: str) -> list[dict[str, Any]]:
    """The slice's processes that configured a framework, oldest pid first: the kernel's report
    (``"kernel": true``) and each running process's own. A report of a process that has ended is
    removed; another user's file is ignored."""
    from .holders import process_alive

    found: list[dict[str, Any]] = []
    kernel = read_report(ledger_path, slice_id)
    if kernel is not None and kernel.get("frameworks"):
        found.append({"pid": kernel.get("pid"), "kernel": True, "command": None, "frameworks": kernel["frameworks"]})
    kernel_pid = kernel.get("pid") if kernel else None
    for path in _process_report_paths(ledger_path, slice_id)[:MAX_PROCESS_REPORTS]:
        data = _read_own(path)
        if not isinstance(data, dict) or data.get("slice_id") != slice_id:
            continue
        pid = data.get("pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid == kernel_pid:
            continue
        if not process_alive(pid, None, data.get("stamp") if isinstance(data.get("stamp"), str) else None):
            path.unlink(missing_ok=True)
            continue
        frameworks = data.get("frameworks")
        command = data.get("command")
        found.append({
            "pid": pid,
            "kernel": False,
            "command": " ".join(command.split())[:120] if isinstance(command, str) else None,  # `python -c` code: one line
            "frameworks": frameworks if isinstance(frameworks, dict) else {},
        })  # fmt: skip
    return sorted(found, key=lambda p: (not p["kernel"], p["pid"] if isinstance(p["pid"], int) else 0))


def frameworks_text(frameworks: dict[str, Any], *, details: bool = False, separator: str = ", ") -> str:
    """A configured process's frameworks in words: ``tensorflow applied`` (``details``: with what
    was applied), or "no framework imported yet"."""
    words = [
        f"{name} {record.get('status', '?')}" + (f" ({record['detail']})" if details and record.get("detail") else "")
        for name, record in frameworks.items()
        if isinstance(record, dict)
    ]
    return separator.join(words) or "no framework imported yet"


def report_bytes(value: object) -> int | None:
    """A byte count from a report, or None unless it is a whole, finite number from 0 to 1 PiB
    (a report is written by the notebook's own process: anything may be in it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value <= MAX_BYTES else None


def read_report(ledger_path: str | Path, slice_id: str) -> dict[str, Any] | None:
    """The slice's last report, or None if there is none (it cannot be read, or is not this
    user's). Its byte counts are checked (:func:`report_bytes`): one that is not a plausible count
    reads as None."""
    return read_report_file(report_path(ledger_path, slice_id))


def read_report_file(path: str | Path) -> dict[str, Any] | None:
    """:func:`read_report` of the report at ``path`` (a launcher's folder: ``folder/<slice>.json``)."""
    data = _read_own(Path(path))
    if not isinstance(data, dict):
        return None
    for key in ("memory_used", "peak_memory_used"):
        if key in data:
            data[key] = report_bytes(data[key])
    return data


class _Ended:
    """A slice that has ended, as a tier's :meth:`~.enforcement.base.Enforcement.ended` reads it here."""

    gpus: tuple[str, ...] = ()
    memory: tuple[int, ...] = ()
    memory_allowed: tuple[int, ...] = ()

    def __init__(self, slice_id: str) -> None:
        self.id = slice_id


def remove_report(ledger_path: str | Path, slice_id: str, tier: str = "") -> None:
    """Remove the slice's report, notices and idle time (the slice has ended), and let its tier
    (every tier, when ``tier`` is not given) remove what it kept in the owner's folder: this is the
    owner's side of the end of the slice, the ledger's is :meth:`~.enforcement.base.Enforcement.ended`
    with the GPUs (a node broker's ledger does not reach the owner's folder)."""
    from ..enforcement import TIERS
    from ..enforcement.base import Where

    where = Where(folder=str(report_dir(ledger_path)))
    for plugin in TIERS:
        if not tier or plugin.tier.value == tier:
            plugin.ended(_Ended(slice_id), where)
    report_path(ledger_path, slice_id).unlink(missing_ok=True)
    notices_path(ledger_path, slice_id).unlink(missing_ok=True)
    idle_path(ledger_path, slice_id).unlink(missing_ok=True)
    for path in _process_report_paths(ledger_path, slice_id):
        path.unlink(missing_ok=True)


#: A file of a slice that is not in the book is swept only once it is this old: a slice booked
#: after the book was read may have written its first report already.
SWEEP_AFTER = 60.0


def sweep_ended(ledger_path: str | Path, live: set[str], now: float | None = None) -> list[str]:
    """Remove what slices no longer in the book left in the reports folder (their holder's server
    was SIGKILLed, so nobody removed it: hardening round five, L-5); the slice ids swept. Only this
    user's files, named by a slice id, untouched for :data:`SWEEP_AFTER` seconds."""
    now = time.time() if now is None else now
    folder = report_dir(ledger_path)
    ended: set[str] = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        sid = entry.name.split(".", 1)[0]
        if sid in live or sid in ended or not is_slice_id(sid):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == os.geteuid() and now - st.st_mtime >= SWEEP_AFTER:
            ended.add(sid)
    for sid in sorted(ended):
        remove_report(ledger_path, sid)
    return sorted(ended)
