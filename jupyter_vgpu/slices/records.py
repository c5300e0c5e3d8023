"""What the ledger holds: slices, places in line, and how they read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..units import format_bytes
from .placement import TIER_COOPERATIVE, TIER_MIG, TIER_MPS
from .request import SliceRequest


@dataclass(frozen=True)
class Slice:
    """A reservation: ``memory`` bytes on each of ``gpus`` (UUIDs), context allowance included."""

    id: str
    owner: str
    uid: int
    holder_kind: str  # "kernel" | "command"
    holder: str  # kernel id, or the command line
    pid: int | None
    pid_start: float | None
    gpus: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    memory: tuple[int, ...]  # bytes reserved on each GPU, same order as gpus
    memory_total: tuple[int, ...]  # each GPU's capacity
    context_allowance: int
    logical_devices: int
    request: SliceRequest
    labels: dict[str, str] = field(default_factory=dict)
    created: float = 0.0
    tier: str = TIER_COOPERATIVE  # "mig" | "mps" | "cooperative": the enforcement chosen at reservation
    mig_devices: tuple[str, ...] = ()  # MIG-... UUID per GPU (same order as gpus) for a MIG slice
    mig_profiles: tuple[str, ...] = ()  # e.g. "1g.10gb", same order

    def __post_init__(self) -> None:
        for name in ("mig_devices", "mig_profiles"):  # lists from a JSON round trip
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def visible_devices(self) -> tuple[str, ...]:
        """What ``CUDA_VISIBLE_DEVICES`` names: the MIG devices of a MIG slice, else the GPUs."""
        return self.mig_devices if self.tier == TIER_MIG and self.mig_devices else self.gpus

    @property
    def device_memory(self) -> tuple[int, ...]:
        """Each visible device's total memory as CUDA reports it (a MIG device's own size)."""
        return self.memory if self.tier == TIER_MIG else self.memory_total

    @property
    def tier_text(self) -> str:
        """``hard (MIG 1g.10gb)``, ``hard (MPS)`` or ``cooperative``: the tier set at reservation."""
        if self.tier == TIER_MIG:
            return f"hard (MIG {', '.join(self.mig_profiles) or 'device'})"
        if self.tier == TIER_MPS:
            return "hard (MPS)"
        return "cooperative"

    @property
    def memory_per_gpu(self) -> int:
        return min(self.memory) if self.memory else 0

    @property
    def memory_limit(self) -> int:
        """What frameworks may allocate per GPU: the slice minus the context allowance."""
        return max(0, self.memory_per_gpu - self.context_allowance)

    @property
    def fraction(self) -> float:
        """The share of each GPU this slice holds (of the smallest, for mixed GPUs)."""
        if not self.memory:
            return 0.0
        return min(m / t for m, t in zip(self.memory, self.memory_total))

    def describe_holder(self) -> str:
        if self.holder_kind == "kernel":
            path = self.labels.get("path")
            name = self.labels.get("kernel_display_name") or self.labels.get("kernel_name")
            text = f"kernel {self.holder[:8]}"
            if path:
                text += f" ({path})"
            elif name:
                text += f" ({name})"
            return text
        return self.holder

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "uid": self.uid,
            "holder_kind": self.holder_kind,
            "holder": self.holder,
            "pid": self.pid,
            "gpus": list(self.gpus),
            "gpu_indices": list(self.gpu_indices),
            "memory_reserved": list(self.memory),
            "memory_total": list(self.memory_total),
            "memory_per_gpu": self.memory_per_gpu,
            "memory_limit": self.memory_limit,
            "context_allowance": self.context_allowance,
            "fraction": self.fraction,
            "logical_devices": self.logical_devices,
            "request": self.request.to_dict(),
            "request_text": self.request.describe(),
            "labels": dict(self.labels),
            "created": self.created,
            "tier": self.tier_text,
            "tier_kind": self.tier,
            "mig_devices": list(self.mig_devices),
            "mig_profiles": list(self.mig_profiles),
            "visible_devices": list(self.visible_devices),
        }


@dataclass
class Ticket:
    """A place in line for a request that waits."""

    number: int
    request: SliceRequest
    last_reason: str = ""


@dataclass(frozen=True)
class Waiter:
    ticket: int
    position: int
    owner: str
    holder_kind: str
    holder: str
    pid: int | None
    request: SliceRequest
    labels: dict[str, str]
    created: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "ticket": self.ticket,
            "position": self.position,
            "owner": self.owner,
            "holder_kind": self.holder_kind,
            "holder": self.holder,
            "pid": self.pid,
            "request": self.request.to_dict(),
            "request_text": self.request.describe(),
            "labels": dict(self.labels),
            "created": self.created,
            "waiting_seconds": max(0.0, time.time() - self.created),
        }


def summary(slice_: Slice) -> str:
    """``slice 1a2b3c4d5e6f: 4.0 GiB on GPU 0 (1/4 GPU)``."""
    gpus = ", ".join(str(i) for i in slice_.gpu_indices)
    return f"slice {slice_.id}: {format_bytes(slice_.memory_per_gpu)} on GPU {gpus} ({slice_.request.describe()})"
