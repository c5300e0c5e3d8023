"""The JSON the REST API returns (shapes documented in docs/rest.md).

Built from the monitor's latest sample plus what only the server knows at request time: the
notebook path of each kernel (session manager) and the kernel's name (kernel manager).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..slices.placement import TIER_COOPERATIVE
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
    """The enforcement tier in force for a slice (DESIGN.md, "Enforcement tiers"): the strongest
    first (``hard (MIG 1g.10gb)``, ``hard (MPS)`` or ``cooperative``), then ``+watched``."""
    parts = []
    if usage.slice.tier != TIER_COOPERATIVE:
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
    """One slice (``SLICE`` in docs/rest.md); history only after ``since``."""
    s = usage.slice
    is_kernel = s.holder_kind == "kernel"
    kernel = kernels.get(s.holder) if is_kernel else None
    report = usage.report or {}
    frameworks = report.get("frameworks")
    return {
        "id": s.id,
        "holder_kind": s.holder_kind,
        "kernel_id": s.holder if is_kernel else None,
        "kernel_name": (s.labels.get("kernel_name") or (kernel.name if kernel else None)) if is_kernel else None,
        "kernel_display_name": s.labels.get("kernel_display_name") if is_kernel else None,
        "path": ((kernel.path if kernel else None) or s.labels.get("path")) if is_kernel else None,
        "command": None if is_kernel else s.holder,
        "running_here": kernel is not None,
        "owner": s.owner,
        "pid": usage.pid,
        "gpus": list(s.gpus),
        "gpu_indices": list(s.gpu_indices),
        "fraction": s.fraction,
        "request_text": s.request.describe(),
        "memory_reserved": s.memory_per_gpu,
        "memory_reserved_total": usage.memory_reserved_total,
        "context_allowance": s.context_allowance,
        "memory_limit": s.memory_limit,
        "memory_used": usage.memory_used,
        "memory_used_by_gpu": dict(usage.used_by_gpu) if usage.source == MEASURED else None,
        "utilization": usage.utilization,
        "usage_source": usage.source,
        "tier": tier(usage, watchdog),
        "tier_kind": s.tier,
        "visible_devices": list(s.visible_devices),
        "mig_devices": list(s.mig_devices),
        "mig_profiles": list(s.mig_profiles),
        "state": usage.state,
        "frameworks": frameworks if isinstance(frameworks, dict) else {},
        "history": _points(monitor.slice_history.get(s.id, ()), since),
        "watchdog": {"action": watchdog.action, "events": [e.to_dict() for e in watchdog.events(s.id)]},
        "labels": dict(s.labels),
        "created": s.created,
    }


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
    for entry in sample.gpus:
        gpu = entry.gpu
        history = [p for p in monitor.gpu_history.get(gpu.uuid, ()) if p[0] > since]
        if gpu.mig_mode:
            gpu_tier = "hard (MIG)"
        elif gpu.mps:
            gpu_tier = "hard (MPS)"
        elif watchdog.action != "none":
            gpu_tier = "watched"
        else:
            gpu_tier = "cooperative"
        devices.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "memory_total": gpu.memory_total,
                "memory_used": gpu.memory_used,
                "memory_reserved": entry.reserved,
                "memory_foreign": entry.foreign,
                "memory_reservable": entry.reservable,
                "utilization": gpu.utilization,
                "utilization_history": [[t, util] for t, _, util in history],
                "history": _points(history, since),
                "mig_mode": gpu.mig_mode,
                "mig_devices": [
                    {
                        "uuid": m.uuid,
                        "profile": m.profile,
                        "memory_total": m.memory_total,
                        "memory_used": m.memory_used,
                        "slice": entry.mig_held.get(m.uuid) if entry.mig_held.get(m.uuid) != "foreign" else None,
                        "in_use_without_slice": entry.mig_held.get(m.uuid) == "foreign",
                    }
                    for m in gpu.mig_devices
                ],
                "mps": gpu.mps,
                "tier": gpu_tier,
                "slices": list(entry.slices),
            }
        )
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
