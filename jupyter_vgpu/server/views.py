"""The JSON the REST API returns (shapes documented in docs/rest.md).

Built from the monitor's latest sample plus what only the server knows at request time: the
notebook path of each kernel (session manager) and the kernel's name (kernel manager).
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psutil

from ..slices.records import Slice, Waiter, notebook_path
from ..slices.usage import MEASURED, NO_USAGE, SliceUsage
from .dashboard import GPU_FIELDS, SLICE_FIELDS, DashboardHistory, points
from .elsewhere import elsewhere_view, elsewhere_waiting_view, launchers_view
from .kernelinfo import KernelInfo
from .monitor import Point, Sample, UsageMonitor
from .reclaim.board import NoticeBoard
from .watchdog import Watchdog

#: This machine's name, in every reply (a CPU-only JupyterLab shows which GPU node answers).
NODE = socket.gethostname()


def _points(history: Sequence[Point], since: float, until: float) -> list[dict[str, Any]]:
    """The points taken after ``since`` and by ``until``, the time of the sample a reply is made
    of: the monitor may record a newer point while a handler awaits, and a poller that asks
    ``?since=`` the reply's ``taken_at`` next would get that point twice."""
    if history and since < history[0]["t"] and history[-1]["t"] <= until:
        return list(history)  # every point: the usual full reply
    return [point for point in history if since < point["t"] <= until]


def watched(usage: SliceUsage, watchdog: Watchdog) -> bool:
    """The watchdog compares this slice's use with its reservation (README.md, "Enforcement
    tiers"): it has an action, and the slice's use can be seen."""
    return watchdog.action != "none" and usage.source != NO_USAGE


def slice_view(
    usage: SliceUsage,
    monitor: UsageMonitor,
    watchdog: Watchdog,
    kernels: Mapping[str, KernelInfo],
    since: float = 0.0,
    until: float = math.inf,
    *,
    board: NoticeBoard | None = None,
) -> dict[str, Any]:
    """One slice (``SLICE`` in docs/rest.md): the shared slice fields, then live use; history
    only after ``since``, up to ``until`` (the time of the sample ``usage`` comes from); the
    reclaim's idle time and notices from ``board`` (none without one)."""
    s = usage.slice
    report = usage.report or {}
    frameworks = report.get("frameworks")
    view = s.to_dict()
    view.update(
        {
            **_holder(s, monitor, kernels),
            "pid": usage.pid,
            "memory_used": usage.memory_used,
            "memory_used_by_gpu": dict(usage.used_by_gpu) if usage.source == MEASURED else None,
            "utilization": usage.utilization,
            "usage_source": usage.source,
            "tier": usage.tier_text,  # what holds it, where its holder says its tier did not take
            "watched": watched(usage, watchdog),
            "memory_peak": monitor.slice_peak.get(s.id),
            "state": usage.state,
            "usage_note": usage.note,
            "idle_seconds": board.idle_seconds(s.id) if board is not None else None,
            "idle_notice": board.notice("idle", s.id) if board is not None else None,
            "memory_burst": usage.memory_burst,
            "burst_notice": board.notice("burst", s.id) if board is not None else None,
            "frameworks": frameworks if isinstance(frameworks, dict) else {},
            "history": _points(monitor.slice_history.get(s.id, ()), since, until),
            "watchdog": {"action": watchdog.action, "events": [e.to_dict() for e in watchdog.events(s.id)]},
        }
    )
    del view["holder"], view["uid"]  # said by kernel_id / command, and yours
    return view


def _holder(s: Slice, monitor: UsageMonitor, kernels: Mapping[str, KernelInfo]) -> dict[str, Any]:
    """Who holds a slice, as the views name it: the kernel (and its notebook) or the command."""
    is_kernel = s.holder_kind == "kernel"
    kernel = kernels.get(s.holder) if is_kernel else None
    return {
        "kernel_id": s.holder if is_kernel else None,
        "kernel_name": (s.labels.get("kernel_name") or (kernel.name if kernel else None)) if is_kernel else None,
        "kernel_display_name": s.labels.get("kernel_display_name") if is_kernel else None,
        # the session's API path, normalised; else the label, normalised when it was made
        "path": (notebook_path(kernel.path if kernel else None) or s.labels.get("path")) if is_kernel else None,
        "command": None if is_kernel else s.holder,
        "running_here": kernel is not None,
        "yours": s.uid == monitor.uid,
    }


def waiting_view(waiter: Waiter, monitor: UsageMonitor, board: NoticeBoard | None = None) -> dict[str, Any]:
    """A place in line (``WAITING`` in docs/rest.md): who waits, by notebook when a kernel does,
    and by when the bursts it waits for are due back (``board``)."""
    view = waiter.to_dict()
    is_kernel = waiter.holder_kind == "kernel"
    view.update(
        {
            "kernel_id": waiter.holder if is_kernel else None,
            "path": waiter.labels.get("path") if is_kernel else None,
            "kernel_display_name": waiter.labels.get("kernel_display_name") if is_kernel else None,
            "yours": waiter.uid == monitor.uid,
            "burst_due": board.due("burst", waiter.ticket) if board is not None else None,
        }
    )
    return view


def slices_view(
    sample: Sample,
    monitor: UsageMonitor,
    watchdog: Watchdog,
    kernels: Mapping[str, KernelInfo],
    since: float = 0.0,
    kernelspecs: Mapping[str, list[str]] | None = None,
    *,
    board: NoticeBoard | None = None,
) -> dict[str, Any]:
    """``GET /api/vgpu/slices``; ``kernelspecs``: the display names of this server's kernelspecs by
    the launcher each names (the reply's ``launchers``); ``board``: the reclaim's notices."""
    return {
        "node": NODE,
        "simulated": sample.snapshot.simulated,
        "available": sample.snapshot.available,
        "message": sample.message,
        "interval": monitor.interval,
        "history_step": monitor.history_step,
        "taken_at": sample.taken_at,
        "slices": [slice_view(u, monitor, watchdog, kernels, since, sample.taken_at, board=board) for u in sample.slices]
        + [elsewhere_view(r, watchdog, kernels) for r in sample.elsewhere if r.running],
        "waiting": [waiting_view(w, monitor, board) for w in sample.waiting]
        + [elsewhere_waiting_view(r, kernels) for r in sample.elsewhere if not r.running],
        "launchers": launchers_view(sample.elsewhere, kernelspecs or {}),
        "watchdog": {
            "action": watchdog.action,
            "tolerance": watchdog.tolerance,
            "grace": watchdog.grace,
            "events": [e.to_dict() for e in watchdog.recent_events()],
        },
    }


def devices_view(sample: Sample, monitor: UsageMonitor, watchdog: Watchdog, since: float = 0.0) -> dict[str, Any]:
    devices = []
    for entry in sample.occupancy.gpus:
        device = entry.to_dict()
        device["watched"] = watchdog.action != "none"
        device["history"] = _points(monitor.gpu_history.get(entry.uuid, ()), since, sample.taken_at)
        devices.append(device)
    return {
        "node": NODE,
        "simulated": sample.snapshot.simulated,
        "available": sample.snapshot.available,
        "message": sample.message,
        "driver": sample.snapshot.driver,
        "interval": monitor.interval,
        "history_step": monitor.history_step,
        "taken_at": sample.taken_at,
        "devices": devices,
    }


def history_view(
    sample: Sample, monitor: UsageMonitor, dashboard: DashboardHistory, kernels: Mapping[str, KernelInfo], since: float = 0.0
) -> dict[str, Any]:
    """The GPU dashboard's series (``GET /api/vgpu/history`` in docs/rest.md): per GPU and per
    live slice, the points after ``since``; every slice that ended within the history, whatever
    ``since`` (a few at most, and a slice that lived seconds is seen nowhere else)."""
    gpus = []
    for entry in sample.occupancy.gpus:
        gpu = entry.gpu
        gpus.append(
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "name": gpu.name,
                "memory_total": gpu.memory_total,
                "power_limit": gpu.power_limit,
                "points": points(dashboard.gpus.get(gpu.uuid), GPU_FIELDS, since),
            }
        )
    slices = []
    for usage in sample.slices:
        s = usage.slice
        slices.append(
            {
                "id": s.id,
                "holder_kind": s.holder_kind,
                **_holder(s, monitor, kernels),
                "request_text": s.request.describe(),
                "gpus": list(s.gpus),
                "gpu_indices": list(s.gpu_indices),
                "memory_reserved_total": sum(s.memory),
                # an elastic slice's limit on all its GPUs (what it may burst to), else null
                "memory_limit_total": sum(s.memory_allowed) if s.memory_burst_limit is not None else None,
                "created": s.created,
                "points": points(dashboard.slices.get(s.id), SLICE_FIELDS, since),
            }
        )
    ended = [
        {
            "id": e.slice.id,
            "holder_kind": e.slice.holder_kind,
            **_holder(e.slice, monitor, kernels),
            "request_text": e.slice.request.describe(),
            "gpus": list(e.slice.gpus),
            "gpu_indices": list(e.slice.gpu_indices),
            "memory_reserved_total": sum(e.slice.memory),
            "created": e.slice.created,
            "last_seen": e.last_seen,
            "ended": e.end,
            "memory_peak": e.peak,
        }
        for e in dashboard.ended
    ]
    return {
        "node": NODE,
        "simulated": sample.snapshot.simulated,
        "available": sample.snapshot.available,
        "message": sample.message,
        "taken_at": sample.taken_at,
        "step": dashboard.step,
        "seconds": dashboard.seconds,
        "gpus": gpus,
        "slices": slices,
        "ended": ended,
    }


class HostMeter:
    """A kernel's host CPU and memory, the way jupyter-resource-usage shows them: its process and
    every descendant (``!python train.py`` counts), CPU as per cent of one core since the
    previous reading of that kernel (like ``top``), resident memory summed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, tuple[float, float]] = {}  # kernel pid -> (monotonic time, CPU seconds)

    def read(self, pid: int) -> dict[str, Any] | None:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        cpu = rss = 0.0
        for proc in tree:
            try:
                times = proc.cpu_times()
                cpu += times.user + times.system
                rss += proc.memory_info().rss
            except psutil.Error:
                continue  # ended while we looked
        now = time.monotonic()
        with self._lock:
            before = self._last.get(pid)
            self._last[pid] = (now, cpu)
            for gone in [p for p in self._last if p != pid and not psutil.pid_exists(p)]:
                del self._last[gone]
        percent = None
        if before is not None and now - before[0] > 0.05:
            percent = round(max(0.0, cpu - before[1]) / (now - before[0]) * 100, 1)
        return {
            "cpu_percent": percent,
            "memory_rss": int(rss),
            "memory_total": psutil.virtual_memory().total,
            "cpu_count": psutil.cpu_count(),
        }


_HOST = HostMeter()


class MachineMeter:
    """This machine as a whole, as jupyter-resource-usage shows a server: CPU busy since the
    previous reading (None on the first), memory in use (all but what is available) and totals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._primed = False

    def read(self) -> dict[str, Any]:
        with self._lock:
            percent = psutil.cpu_percent(interval=None)  # since the previous call in this process
            primed, self._primed = self._primed, True
        memory = psutil.virtual_memory()
        return {
            "cpu_percent": round(percent, 1) if primed else None,
            "cpu_count": psutil.cpu_count(),
            "memory_used": int(memory.total - memory.available),
            "memory_total": int(memory.total),
        }


_MACHINE = MachineMeter()


def machine_view() -> dict[str, Any]:
    """This machine's CPU and memory (``host`` of the GPUs' reply, docs/rest.md). Blocking
    (psutil): run it on the monitor's worker thread."""
    return _MACHINE.read()


def kernelspecs_stamp(dirs: Iterable[str]) -> str:
    """A short text that changes when a kernelspec is added to, removed from or rewritten in
    ``dirs`` (``jupyter vgpu kernelspec install``): JupyterLab reads the kernelspecs again when it
    changes, instead of a minute later. One stat per kernelspec. Blocking: the worker thread."""
    seen = []
    for folder in dirs:
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        info = os.stat(os.path.join(entry.path, "kernel.json"))
                    except OSError:
                        continue  # not a kernelspec (or gone meanwhile)
                    seen.append(f"{entry.path}\0{info.st_mtime_ns}\0{info.st_size}")
        except OSError:
            continue
    return hashlib.sha1("\n".join(sorted(seen)).encode(), usedforsecurity=False).hexdigest()[:12]


def host_view(pid: int) -> dict[str, Any] | None:
    """The kernel's host CPU and RAM (``host`` of ``GET /api/vgpu/kernels/<id>``); None when its
    process cannot be read. Blocking (psutil): run it on the monitor's worker thread."""
    return _HOST.read(pid)
