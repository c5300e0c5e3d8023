"""The JSON the REST API returns (shapes documented in docs/rest.md).

Built from the monitor's latest sample plus what only the server knows at request time: the
notebook path of each kernel (session manager) and the kernel's name (kernel manager).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..slices.records import Waiter
from ..slices.usage import MEASURED, NO_USAGE, SliceUsage
from .monitor import Point, Sample, UsageMonitor
from .watchdog import Watchdog


@dataclass(frozen=True)
class KernelInfo:
    """What the server knows about one of its kernels when a request comes in."""

    name: str | None
    path: str | None


def _points(history: Iterable[Point], since: float) -> list[dict[str, Any]]:
    return [{"t": t, "used": used, "util": util} for t, used, util in history if t > since]


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
) -> dict[str, Any]:
    """One slice (``SLICE`` in docs/rest.md): the shared slice fields, then live use; history
    only after ``since``."""
    s = usage.slice
    is_kernel = s.holder_kind == "kernel"
    kernel = kernels.get(s.holder) if is_kernel else None
    report = usage.report or {}
    frameworks = report.get("frameworks")
    view = s.to_dict()
    view.update(
        {
            "kernel_id": s.holder if is_kernel else None,
            "kernel_name": (s.labels.get("kernel_name") or (kernel.name if kernel else None)) if is_kernel else None,
            "kernel_display_name": s.labels.get("kernel_display_name") if is_kernel else None,
            "path": ((kernel.path if kernel else None) or s.labels.get("path")) if is_kernel else None,
            "command": None if is_kernel else s.holder,
            "running_here": kernel is not None,
            "yours": s.uid == monitor.uid,
            "pid": usage.pid,
            "memory_used": usage.memory_used,
            "memory_used_by_gpu": dict(usage.used_by_gpu) if usage.source == MEASURED else None,
            "utilization": usage.utilization,
            "usage_source": usage.source,
            "watched": watched(usage, watchdog),
            "memory_peak": monitor.slice_peak.get(s.id),
            "state": usage.state,
            "frameworks": frameworks if isinstance(frameworks, dict) else {},
            "history": _points(monitor.slice_history.get(s.id, ()), since),
            "watchdog": {"action": watchdog.action, "events": [e.to_dict() for e in watchdog.events(s.id)]},
        }
    )
    del view["holder"], view["uid"]  # said by kernel_id / command, and yours
    return view


def waiting_view(waiter: Waiter, monitor: UsageMonitor) -> dict[str, Any]:
    """A place in line (``WAITING`` in docs/rest.md): who waits, by notebook when a kernel does."""
    view = waiter.to_dict()
    is_kernel = waiter.holder_kind == "kernel"
    view.update(
        {
            "kernel_id": waiter.holder if is_kernel else None,
            "path": waiter.labels.get("path") if is_kernel else None,
            "kernel_display_name": waiter.labels.get("kernel_display_name") if is_kernel else None,
            "yours": waiter.uid == monitor.uid,
        }
    )
    return view


def slices_view(
    sample: Sample,
    monitor: UsageMonitor,
    watchdog: Watchdog,
    kernels: Mapping[str, KernelInfo],
    since: float = 0.0,
) -> dict[str, Any]:
    return {
        "simulated": sample.snapshot.simulated,
        "available": sample.snapshot.available,
        "message": sample.message,
        "interval": monitor.interval,
        "history_step": monitor.history_step,
        "taken_at": sample.taken_at,
        "slices": [slice_view(u, monitor, watchdog, kernels, since) for u in sample.slices],
        "waiting": [waiting_view(w, monitor) for w in sample.waiting],
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
        history = [p for p in monitor.gpu_history.get(entry.uuid, ()) if p[0] > since]
        device = entry.to_dict()
        device["watched"] = watchdog.action != "none"
        device["utilization_history"] = [[t, util] for t, _, util in history]
        device["history"] = _points(history, since)
        devices.append(device)
    return {
        "simulated": sample.snapshot.simulated,
        "available": sample.snapshot.available,
        "message": sample.message,
        "driver": sample.snapshot.driver,
        "interval": monitor.interval,
        "history_step": monitor.history_step,
        "taken_at": sample.taken_at,
        "devices": devices,
    }
