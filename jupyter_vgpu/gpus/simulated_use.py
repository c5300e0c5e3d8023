"""What processes hold on simulated GPUs: a simulated driver's per-process memory.

On a real GPU the driver knows each process's memory and NVML lists it. On simulated GPUs a
framework's tensors live in host memory, so the process itself says what its frameworks hold
there: each sliced process that imported a framework writes a small file of its own
(``<pid>.json``) in a folder beside the ledger, and :class:`~.simulated_nvml.SimulatedNVML` lists
it as a process on its GPUs with that memory, as a driver would. Every view (the server's
monitor, ``jupyter vgpu status``, ``%vgpu``) then shows the slice's use, the GPU's, the near-limit
colours and the watchdog's warnings, under their "simulated" label.

File shape::

    {"pid": 1234, "stamp": "<process start time>", "used": {"GPU-...": 123456},
     "utilization": {"GPU-...": 40}, "updated": 1700000000.0}

A file whose process has ended (or whose pid now names another process) is ignored and removed.

With a node broker the folder is the broker's own, beside the node's ledger: a process there says
what it holds to the broker, which writes its file for it (``simulated_use`` on the broker's
socket; the pid is the socket's peer) in a folder of its user's (``u<uid>/``), so every user's
server, ``jupyter vgpu status`` and the line see it as they would see a real driver's figure. At
most :data:`MAX_FILES` files are read per folder: one user's many processes hide only their own
figures, never another user's (hardening round five, L-1).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..ownfiles import read_own_json, write_json

#: The folder's name beside the ledger.
FOLDER = "simulated-use"

#: Largest file read (a few hundred bytes are written).
MAX_FILE = 16 * 1024

#: Most files read per folder and scan: the processes of one user's slices.
MAX_FILES = 256

#: A user's folder under a broker's: ``u<uid>``.
USER_FOLDER = "u"


def use_folder(ledger_dir: str | Path) -> Path:
    """Where the processes of the ledger in ``ledger_dir`` say what they hold on simulated GPUs."""
    return Path(ledger_dir) / FOLDER


@dataclass(frozen=True)
class SimulatedUse:
    """What one process holds on one simulated GPU."""

    pid: int
    gpu: str  # the GPU's UUID
    used: int
    utilization: int


def _stamp(pid: int) -> str | None:
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return None


def user_folder(folder: Path, uid: int) -> Path:
    """Where a broker writes the figures of user ``uid``'s processes."""
    return folder / f"{USER_FOLDER}{int(uid)}"


def _folders(folder: Path) -> list[Path]:
    """``folder`` and its users' folders (a broker's)."""
    try:
        users = sorted(
            e.path
            for e in os.scandir(folder)
            if e.name[1:].isdigit() and e.name[:1] == USER_FOLDER and e.is_dir(follow_symlinks=False)
        )
    except OSError:
        return [folder]
    return [folder, *map(Path, users)]


def write_use(
    folder: Path,
    used: dict[str, int],
    utilization: dict[str, int],
    *,
    pid: int | None = None,
    slice_id: str | None = None,
    uid: int | None = None,
) -> None:
    """Say what this process (or the broker's caller ``pid`` of user ``uid``, for its slice
    ``slice_id``) holds on each simulated GPU (by UUID); atomic, so a reader never sees half a file."""
    if uid is not None:
        folder = user_folder(folder, uid)
    pid = os.getpid() if pid is None else pid
    data: dict[str, object] = {
        "pid": pid,
        "stamp": _stamp(pid),
        "used": used,
        "utilization": utilization,
        "updated": time.time(),
    }
    if slice_id is not None:
        data["slice"] = slice_id
    write_json(folder / f"{pid}.json", data, prefix=str(pid))


def drop_uses(folder: Path, live: set[str]) -> None:
    """Remove the figures written for a slice not in ``live`` (it ended; its process may not have)."""
    for where in _folders(folder):
        try:
            names = [entry.name for entry in os.scandir(where) if entry.name.endswith(".json")]
        except OSError:
            continue
        for name in names:
            data = read_own_json(where / name, MAX_FILE)
            if isinstance(data, dict) and isinstance(data.get("slice"), str) and data["slice"] not in live:
                (where / name).unlink(missing_ok=True)


def remove_use(folder: Path) -> None:
    """This process holds nothing any more (it is ending)."""
    (folder / f"{os.getpid()}.json").unlink(missing_ok=True)


def read_uses(folder: Path) -> list[SimulatedUse]:
    """What the running processes say they hold, per GPU; the files of ended processes are
    removed. Files not this user's, or not in the shape above, are ignored."""
    found = []
    for where in _folders(folder):
        found.extend(_read_folder(where))
    return found


def _read_folder(folder: Path) -> list[SimulatedUse]:
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.name.endswith(".json"))[:MAX_FILES]
    except OSError:
        return []
    found = []
    for name in names:
        path = folder / name
        data = read_own_json(path, MAX_FILE)
        pid = data.get("pid") if isinstance(data, dict) else None
        if not isinstance(data, dict) or isinstance(pid, bool) or not isinstance(pid, int) or name != f"{pid}.json":
            continue
        if data.get("stamp") != _stamp(pid):
            path.unlink(missing_ok=True)  # ended, or the pid is another process's now
            continue
        used, busy = data.get("used"), data.get("utilization")
        if not isinstance(used, dict):
            continue
        for gpu, amount in used.items():
            if (
                isinstance(gpu, str)
                and isinstance(amount, int)
                and not isinstance(amount, bool)
                and 0 <= amount < 1 << 50
            ):
                util = busy.get(gpu) if isinstance(busy, dict) else None
                util = util if isinstance(util, int) and not isinstance(util, bool) and 0 <= util <= 100 else 0
                found.append(SimulatedUse(pid, gpu, amount, util))
    return found
