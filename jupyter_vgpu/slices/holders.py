"""Who holds a slice: process liveness (pid plus start time) and GPU usage by process tree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from ..gpus import Snapshot

# psutil derives a start time from boot time plus clock ticks (10 ms), identically in every
# process, so two readings of one process agree to within float rounding; a reused pid
# belongs to a process that started at least one tick later.
_START_TOLERANCE = 0.001


def process_start(pid: int) -> float | None:
    """Start time of ``pid`` (seconds since the epoch), or None if it does not exist."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def process_alive(pid: int | None, start: float | None) -> bool:
    """True if ``pid`` runs and is the same process that started at ``start``.

    A zombie counts as dead; a pid reused by a newer process counts as dead.
    """
    if pid is None or pid <= 0:
        return False
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

    def attribute(self, snapshot: Snapshot, holders: Mapping[str, int | None]) -> Attribution:
        """``holders`` maps slice id -> holder pid."""
        by_pid = {pid: sid for sid, pid in holders.items() if pid}
        if by_pid != self._holders:
            self._holders = by_pid
            self._owner = {}
        seen: set[int] = set()
        result = Attribution()
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                if proc.mps_server:
                    continue
                seen.add(proc.pid)
                if proc.pid in self._owner:
                    sid = self._owner[proc.pid]
                else:
                    sid = next((by_pid[p] for p in ancestors(proc.pid) if p in by_pid), None)
                    self._owner[proc.pid] = sid
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
        for pid in [p for p in self._owner if p not in seen]:
            del self._owner[pid]
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


def live(pids: Iterable[tuple[int | None, float | None]]) -> list[bool]:
    """Liveness of several (pid, start) pairs."""
    return [process_alive(pid, start) for pid, start in pids]
