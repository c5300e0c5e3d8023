"""The JSON the REST API returns (shapes documented in docs/rest.md).

Built from the monitor's latest sample plus what only the server knows at request time: the
notebook path of each kernel (session manager) and the kernel's name (kernel manager).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..slices import Tier
from .monitor import Point, Sample, UsageMonitor
from .usage import MEASURED, NO_USAGE, SliceUsage
from .watchdog import Watchdog


@dataclass(frozen=True)
class KernelInfo:
    """What the server knows about one of its kernels when a request comes in."""

    name: str | None
    path: str | None


def _points(history: Iterable[Point], since: float) -> list[dict[str, Any]]:
    return [{"t": t, "used": used, "util": util} for t, used, util in history if t > since]


def tier(usage: SliceUsage, watchdog: Watchdog) -> str:
    """The enforcement tier in force for a slice (README.md, "Enforcement tiers"): the strongest
    first (``hard (MIG 1g.10gb)``, ``hard (MPS)`` or ``cooperative``), then ``+watched``."""
    parts = []
    if usage.slice.tier is not Tier.COOPERATIVE:
        parts.append(usage.slice.tier_text)  # recorded when the slice was placed
    # Kernels and `jupyter vgpu run` commands start with the slice's framework limits in their env.
    elif usage.slice.holder_kind in ("kernel", "command"):
        parts.append("cooperative")
    if watchdog.action != "none" and usage.source != NO_USAGE:
        parts.append("watched")
    return "+".join(parts) or "none"


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
            "tier": tier(usage, watchdog),
            "state": usage.state,
            "frameworks": frameworks if isinstance(frameworks, dict) else {},
            "history": _points(monitor.slice_history.get(s.id, ()), since),
            "watchdog": {"action": watchdog.action, "events": [e.to_dict() for e in watchdog.events(s.id)]},
        }
    )
    del view["holder"], view["uid"]  # said by kernel_id / command, and yours
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
        "waiting": [w.to_dict() for w in sample.waiting],
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
        if not entry.in_mig_mode and not entry.gpu.mps and watchdog.action != "none":
            device["tier"] = "watched"
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
