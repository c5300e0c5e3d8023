"""Who holds a slice: process liveness (pid plus start time) and GPU usage by process tree."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from ..gpus import Snapshot
    from .records import Slice

# psutil derives a start time from boot time plus clock ticks (10 ms), identically in every
# process, so two readings of one process agree to within float rounding; a reused pid
# belongs to a process that started at least one tick later. Used only where no stamp exists.
_START_TOLERANCE = 0.001

_BOOT_ID: list[str | None] = []


def boot_id() -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), or None where there is none."""
    if not _BOOT_ID:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
                _BOOT_ID.append(handle.read(64).strip() or None)
        except OSError:
            _BOOT_ID.append(None)
    return _BOOT_ID[0]


def _stat_start(pid: int) -> tuple[int, str] | None:
    """``(start ticks since boot, state letter)`` of ``pid`` from ``/proc/<pid>/stat``; None if
    there is no such process. Raises OSError when it cannot be read for another reason."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (name) ": state is field 3
    try:
        return int(fields[19]), fields[0]  # field 22, starttime in clock ticks after boot
    except (IndexError, ValueError):
        raise OSError(f"unreadable /proc/{pid}/stat") from None


def start_stamp(pid: int | None) -> str | None:
    """Who ``pid`` is, immune to clock steps: ``<boot id>:<start ticks after boot>``. None where
    ``/proc`` cannot tell (then :func:`process_start` is the fallback)."""
    boot = boot_id()
    if pid is None or pid <= 0 or boot is None:
        return None
    try:
        found = _stat_start(pid)
    except OSError:
        return None
    return None if found is None else f"{boot}:{found[0]}"


def process_start(pid: int) -> float | None:
    """Start time of ``pid`` (seconds since the epoch, for people), or None if it does not exist.
    It moves when the wall clock is stepped: liveness uses :func:`start_stamp`."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def process_alive(pid: int | None, start: float | None, stamp: str | None = None) -> bool:
    """True if ``pid`` runs and is the same process that was recorded.

    With a ``stamp`` (:func:`start_stamp`) that is exact and ignores the wall clock: the boot
    and the start tick must match. Without one (records of older versions, systems without
    ``/proc``), the wall-clock ``start`` is compared. A zombie counts as dead; a pid reused by a
    newer process counts as dead.
    """
    if pid is None or pid <= 0:
        return False
    if stamp is not None and (boot := boot_id()) is not None:
        recorded_boot, _, ticks = stamp.partition(":")
        if recorded_boot != boot:
            return False  # recorded before this boot: every process of then is gone
        try:
            found = _stat_start(pid)
        except OSError:
            return psutil.pid_exists(pid)  # hidden from us (hidepid): it exists, we cannot tell more
        return found is not None and found[1] != "Z" and str(found[0]) == ticks
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if start is not None and abs(proc.create_time() - start) > _START_TOLERANCE:
            return False
        return True
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; we may not look at it


def boot_clock() -> float:
    """Seconds on a clock every process of this boot shares and no wall-clock step moves
    (``CLOCK_BOOTTIME`` where there is one): for how long a place in line went unasked."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents, nearest first ([pid] alone if it cannot be inspected)."""
    chain = [pid]
    try:
        chain.extend(p.pid for p in psutil.Process(pid).parents())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return chain


@dataclass
class Attribution:
    """NVML's per-process memory of one snapshot, split by slice; the rest is used outside slices."""

    used: dict[str, dict[str, int]] = field(default_factory=dict)  # slice id -> gpu uuid -> bytes
    utilization: dict[str, dict[str, int]] = field(default_factory=dict)  # slice id -> gpu uuid -> %
    foreign: dict[str, int] = field(default_factory=dict)  # gpu (or MIG device) uuid -> bytes outside slices
    foreign_pids: dict[str, int] = field(default_factory=dict)  # gpu uuid -> processes outside slices


class ProcessOwners:
    """Which slice (if any) each GPU process belongs to.

    A GPU process belongs to a slice when the slice's holder is that process or one of its
    ancestors, so ``!python train.py`` run from a notebook counts against that notebook.
    Walking a process's parents costs about half a millisecond, so one instance remembers each
    process's owner across calls (the server's monitor keeps one): a process keeps its
    ancestors for life, and an entry is dropped when its pid leaves NVML's list (which is also
    when a pid could be reused) or when the set of holders changes.

    The MPS server is never a slice's nor outside slices: it holds memory for its clients,
    which NVML lists themselves and which are attributed like any other process.
    """

    def __init__(self) -> None:
        self._holders: dict[int, str] = {}
        self._owner: dict[int, str | None] = {}

    def owners(self, snapshot: Snapshot, holders: Mapping[str, int | None]) -> dict[int, str | None]:
        """Each GPU process's slice id (None: outside slices), by pid; the MPS server and
        processes a broker withheld (pid 0) are left out. ``holders``: slice id -> holder pid."""
        by_pid = {pid: sid for sid, pid in holders.items() if pid}
        if by_pid != self._holders:
            self._holders = by_pid
            self._owner = {}
        seen: set[int] = set()
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                if proc.mps_server or proc.pid <= 0:
                    continue
                seen.add(proc.pid)
                if proc.pid not in self._owner:
                    self._owner[proc.pid] = next((by_pid[p] for p in ancestors(proc.pid) if p in by_pid), None)
        for pid in [p for p in self._owner if p not in seen]:
            del self._owner[pid]
        return {pid: self._owner[pid] for pid in seen}

    def attribute(self, snapshot: Snapshot, holders: Mapping[str, int | None]) -> Attribution:
        """``holders`` maps slice id -> holder pid (None for another user's slice, whose
        processes a node broker names by ``slice_id`` instead of a pid)."""
        owners = self.owners(snapshot, holders)
        result = Attribution()
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                if proc.mps_server:
                    continue
                if proc.pid <= 0:  # withheld by the broker: its slice, if one of those listed
                    sid = proc.slice_id if proc.slice_id in holders else None
                else:
                    sid = owners[proc.pid]
                amount = proc.used or 0
                if sid is None:
                    result.foreign[gpu.uuid] = result.foreign.get(gpu.uuid, 0) + amount
                    result.foreign_pids[gpu.uuid] = result.foreign_pids.get(gpu.uuid, 0) + 1
                    if proc.mig_device:  # a MIG device in use without a slice cannot be reserved
                        result.foreign[proc.mig_device] = result.foreign.get(proc.mig_device, 0) + max(1, amount)
                    continue
                per_gpu = result.used.setdefault(sid, {})
                per_gpu[gpu.uuid] = per_gpu.get(gpu.uuid, 0) + amount
                if proc.utilization is not None:
                    util = result.utilization.setdefault(sid, {})
                    util[gpu.uuid] = min(100, util.get(gpu.uuid, 0) + proc.utilization)
        return result


def attribute(snapshot: Snapshot, holders: Mapping[str, int | None]) -> Attribution:
    """:meth:`ProcessOwners.attribute` once, remembering nothing (a command, a reservation)."""
    return ProcessOwners().attribute(snapshot, holders)


def tree_pids(pid: int) -> set[int]:
    """``pid`` and all its descendants."""
    try:
        proc = psutil.Process(pid)
        return {pid} | {c.pid for c in proc.children(recursive=True)}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {pid}


def held(slice_: Slice) -> bool:
    """A slice is held while its holder runs, or its keeper (the server that restarts its kernel)."""
    if process_alive(slice_.pid, slice_.pid_start, slice_.pid_stamp):
        return True
    return slice_.keeper_pid is not None and process_alive(slice_.keeper_pid, slice_.keeper_start, slice_.keeper_stamp)
