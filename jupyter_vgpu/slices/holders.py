"""Who holds a slice: process liveness (pid plus start time) and GPU usage by process tree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def attribute(snapshot: Snapshot, holders: Mapping[str, int | None]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Split NVML's per-process memory into what each slice's process tree uses and the rest.

    ``holders`` maps slice id -> holder pid. A GPU process belongs to a slice when the
    slice's holder is that process or one of its ancestors (so ``!python train.py`` run from
    a notebook counts against that notebook). Returns ``(used[slice_id][gpu_uuid],
    foreign[gpu_uuid])`` where foreign is memory used by processes that hold no slice; a MIG
    device with such processes also appears in ``foreign`` under its ``MIG-...`` UUID (at least 1,
    so a MIG device in use counts as taken even when NVML cannot tell the memory).

    The MPS server is never foreign: it holds memory for its clients, which NVML lists
    themselves (``nvmlDeviceGetMPSComputeRunningProcesses``) and which are attributed like any
    other process.
    """
    by_pid = {pid: sid for sid, pid in holders.items() if pid}
    used: dict[str, dict[str, int]] = {}
    foreign: dict[str, int] = {}
    owner_cache: dict[int, str | None] = {}
    for gpu in snapshot.gpus:
        for proc in gpu.processes:
            if proc.mps_server:
                continue
            sid = owner_cache.get(proc.pid, "?")
            if sid == "?":
                sid = next((by_pid[p] for p in ancestors(proc.pid) if p in by_pid), None)
                owner_cache[proc.pid] = sid
            amount = proc.used or 0
            if sid is None:
                foreign[gpu.uuid] = foreign.get(gpu.uuid, 0) + amount
                if proc.mig_device:
                    foreign[proc.mig_device] = foreign.get(proc.mig_device, 0) + max(1, amount)
            else:
                per_gpu = used.setdefault(sid, {})
                per_gpu[gpu.uuid] = per_gpu.get(gpu.uuid, 0) + amount
    return used, foreign


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
