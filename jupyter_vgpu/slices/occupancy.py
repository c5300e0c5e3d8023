"""Occupancy: who holds and who uses each GPU, computed once for every view and for placement.

One pure function of (inventory snapshot, slices, process attribution). Per GPU it gives what
the slices reserve, what their processes use, how far some use more than they reserved, what
is used outside slices, and what is **free**: what one new slice could get there now. The CLI,
the REST API (and so the sidebar), ``%vgpu``, the hub's admin page and placement all read it,
so "free" is the same figure everywhere.

Used outside slices counts processes that hold no slice and memory that no visible process
accounts for (other containers, other pid namespaces): neither can be handed out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..enforcement import offered_by
from ..gpus import GPU, MIGDevice, Snapshot
from ..gpus.model import instance_key
from ..units import format_bytes
from .holders import Attribution
from .records import Slice, Tier

#: At most this many holders are named in a one-line explanation of a GPU.
NAMED_HOLDERS = 4

#: Less free memory than this is no room at all: what splitting a GPU into fractions leaves over
#: (three slices of 1/3 leave a byte), which no slice could use (each holds a CUDA context).
CRUMB = 2**20


@dataclass(frozen=True)
class Share:
    """One slice on one GPU: what it reserves there and what its processes use."""

    slice: Slice
    reserved: int
    used: int  # bytes its processes use on this GPU (0 when NVML shows none)

    @property
    def over_use(self) -> int:
        """Bytes used beyond the reservation: taken from what others could reserve."""
        return max(0, self.used - self.reserved)

    def holder_text(self) -> str:
        return f"{self.slice.describe_holder()} [{self.slice.owner}]"


@dataclass(frozen=True)
class MIGState:
    """A MIG device of a GPU in MIG mode and who holds it."""

    device: MIGDevice
    slice_id: str | None  # the slice that holds it
    holder: str | None  # that slice's holder, in words
    in_use_without_slice: bool

    @property
    def free(self) -> bool:
        return self.slice_id is None and not self.in_use_without_slice

    def describe(self) -> str:
        return f"{self.device.profile} ({format_bytes(self.device.memory_total)})"


@dataclass(frozen=True)
class GPUOccupancy:
    """One GPU at one instant, as every view and placement see it."""

    gpu: GPU
    shares: tuple[Share, ...]
    foreign: int  # bytes used outside slices
    foreign_processes: int
    unaccounted: int  # part of ``foreign`` that no visible process accounts for
    mig: tuple[MIGState, ...] = ()

    @property
    def index(self) -> int:
        return self.gpu.index

    @property
    def uuid(self) -> str:
        return self.gpu.uuid

    @property
    def total(self) -> int:
        """What slices share: the GPU's memory less what the driver keeps (a fraction is of this)."""
        return self.gpu.memory_usable

    @property
    def in_mig_mode(self) -> bool:
        return bool(self.gpu.mig_mode)

    @property
    def reserved(self) -> int:
        return sum(s.reserved for s in self.shares)

    @property
    def used_by_slices(self) -> int:
        return sum(s.used for s in self.shares)

    @property
    def over_use(self) -> int:
        return sum(s.over_use for s in self.shares)

    @property
    def free(self) -> int:
        """What one new slice could get here now: on a GPU in MIG mode its largest free MIG
        device; otherwise what neither a reservation, nor a slice's use beyond it, nor a
        process outside slices takes."""
        if self.in_mig_mode:
            return max((m.device.memory_total for m in self.mig if m.free), default=0)
        left = self.total - self.reserved - self.over_use - self.foreign
        return left if left >= CRUMB else 0  # what fractions leave over (3 x 1/3) is nobody's

    def burst_of(self, share: Share) -> int:
        """What an elastic slice uses here above its reservation, up to its limit: its burst (its
        use beyond the limit, or any slice's beyond a fixed reservation, is over-use)."""
        if share.slice.memory_burst_limit is None:
            return 0
        limit = share.slice.request.limit_on(self.gpu.memory_total) or share.reserved
        return max(0, min(share.used, limit) - share.reserved)

    @property
    def overbooked(self) -> int:
        """Bytes the bursts here hold beyond what no request holds: requests booked and not used
        when the bursts grew, used now (0: none). The burst reclaim asks the youngest back at once."""
        if self.in_mig_mode:
            return 0
        return max(0, sum(self.burst_of(s) for s in self.shares) - max(0, self.total - self.reserved))

    @property
    def in_use(self) -> int | None:
        """What is in use here, as it is: NVML's figure, or what the processes hold where that is
        more (a simulated GPU over-full, which a driver would not report)."""
        if self.gpu.memory_used is None:
            return None
        return max(self.gpu.memory_used, self.used_by_slices + self.foreign)

    def kernel_bursts(self) -> int:
        """What kernels' elastic slices use here above their requests: what their servers give
        back to a request that waits (a command keeps its burst until it ends)."""
        return sum(self.burst_of(s) for s in self.shares if s.slice.holder_kind == "kernel")

    def explain(self) -> str:
        """One line for a refusal: what is free, who holds the rest."""
        if self.in_mig_mode:
            return self._explain_mig()
        text = f"GPU {self.index} ({self.gpu.name}): {format_bytes(self.free)} free of {format_bytes(self.gpu.memory_total)}"
        parts = []
        if self.gpu.memory_reserved_by_driver:
            parts.append(f"{format_bytes(self.gpu.memory_reserved_by_driver)} kept by the driver")
        if self.shares:
            shown = ", ".join(f"{s.holder_text()} {format_bytes(s.reserved)}" for s in self.shares[:NAMED_HOLDERS])
            more = f" and {len(self.shares) - NAMED_HOLDERS} more" if len(self.shares) > NAMED_HOLDERS else ""
            parts.append(f"reserved by {shown}{more}")
        bursts = [(s, b) for s in self.shares if (b := self.burst_of(s))]
        for kind, then in (("kernel", "given back when a request waits for it"), ("command", "theirs until they end")):
            if mine := [(s, b) for s, b in bursts if (s.slice.holder_kind == "kernel") == (kind == "kernel")]:
                held = sum(b for _, b in mine)
                who = ", ".join(s.holder_text() for s, _ in mine[:NAMED_HOLDERS])
                parts.append(f"{format_bytes(held)} held above their requests by bursting {kind}s ({who}), {then}")
        if beyond := self.over_use - sum(b for _, b in bursts):
            parts.append(f"{format_bytes(beyond)} used beyond reservations")
        if self.foreign:
            parts.append(f"{format_bytes(self.foreign)} used by processes without a slice")
        return text + (f"; {'; '.join(parts)}" if parts else "")

    def _explain_mig(self) -> str:
        text = f"GPU {self.index} ({self.gpu.name}) is in MIG mode"
        if not self.mig:
            return text + " with no MIG devices"
        free = [m.describe() for m in self.mig if m.free]
        held = [
            f"{m.device.profile} by {m.holder if m.slice_id else 'processes without a slice'}"
            for m in self.mig
            if not m.free
        ]
        parts = [f"free MIG devices: {', '.join(free) if free else 'none'}"]
        if held:
            more = f" and {len(held) - NAMED_HOLDERS} more" if len(held) > NAMED_HOLDERS else ""
            parts.append(f"held: {', '.join(held[:NAMED_HOLDERS])}{more}")
        return f"{text}; {'; '.join(parts)}"

    @property
    def tier(self) -> str:
        """The strongest enforcement this GPU offers a new slice."""
        return offered_by(self.gpu)

    def to_dict(self) -> dict[str, Any]:
        """The GPU fields every JSON view shares (docs/rest.md, "GPU")."""
        gpu = self.gpu
        return {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "name": gpu.name,
            "memory_total": gpu.memory_total,
            "memory_reserved_by_driver": gpu.memory_reserved_by_driver,
            "memory_used": self.in_use,
            "memory_reserved": self.reserved,
            "memory_overbooked": self.overbooked,
            "memory_used_by_slices": self.used_by_slices,
            "memory_over_use": self.over_use,
            "memory_foreign": self.foreign,
            "memory_free": self.free,
            "utilization": gpu.utilization,
            "mig_mode": gpu.mig_mode,
            "mig_devices": [
                {
                    "uuid": m.device.uuid,
                    "profile": m.device.profile,
                    "memory_total": m.device.memory_total,
                    "memory_used": m.device.memory_used,
                    "gpu_instance_id": m.device.gpu_instance_id,
                    "compute_instance_id": m.device.compute_instance_id,
                    "slice": m.slice_id,
                    "in_use_without_slice": m.in_use_without_slice,
                }
                for m in self.mig
            ],
            "mps": gpu.mps,
            "memory_partitioning": gpu.memory_partitioning,
            "compute_capability": ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else None,
            "tier": self.tier,
            "slices": [s.slice.id for s in self.shares],
            # telemetry (null unless the monitor read it, or where NVML has no answer)
            "power_draw": gpu.power_draw,
            "power_limit": gpu.power_limit,
            "temperature": gpu.temperature,
            "pcie_tx": gpu.pcie_tx,
            "pcie_rx": gpu.pcie_rx,
            # a scheduler's share of the card in a pod (gpus.podshare), else null
            "pod_share": gpu.pod_share,
            "card_memory": gpu.card_memory,
            "sm_limit": gpu.sm_limit,
            # a scheduler's share in words, a pod's or a Slurm job's (gpus.slurmshare), else null
            "share": gpu.share,
            "slurm_job": gpu.slurm_job,
        }


@dataclass(frozen=True)
class Occupancy:
    """Every GPU of one snapshot."""

    snapshot: Snapshot
    gpus: tuple[GPUOccupancy, ...]

    def gpu(self, uuid: str) -> GPUOccupancy | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def explain(self, uuids: Iterable[str] | None = None) -> str:
        wanted = None if uuids is None else set(uuids)
        return "; ".join(g.explain() for g in self.gpus if wanted is None or g.uuid in wanted)


def within_requests(gpus: Iterable[GPUOccupancy], slice_ids: Collection[str] | None = None) -> tuple[GPUOccupancy, ...]:
    """The GPUs as they would be with the slices ``slice_ids`` (None: every kernel's) using no
    more than their reservations: bursts given back, everything else unchanged."""

    def back(share: Share) -> bool:
        return share.slice.holder_kind == "kernel" if slice_ids is None else share.slice.id in slice_ids

    return tuple(replace(g, shares=tuple(replace(s, used=min(s.used, s.reserved)) if back(s) else s for s in g.shares)) for g in gpus)


def occupancy_of(snapshot: Snapshot, slices: Iterable[Slice], attribution: Attribution) -> Occupancy:
    """Per GPU: reservations, use by slices, over-use, use outside slices and what is free."""
    slices = list(slices)
    result = []
    for gpu in snapshot.gpus:
        shares = tuple(
            Share(s, reserved, attribution.used.get(s.id, {}).get(gpu.uuid, 0))
            for s in slices
            for uuid, reserved in zip(s.gpus, s.memory)
            if uuid == gpu.uuid
        )
        unaccounted = _unaccounted(gpu)
        # Compute instances of one GPU instance share its memory: a slice holds the whole GPU
        # instance, whichever of its MIG devices it names, and a process outside slices in any of
        # them takes it too. So shared memory is never handed out twice.
        instance = {m.uuid: instance_key(m) for m in gpu.mig_devices}
        held = {
            instance[device]: (s.id, f"{s.describe_holder()} [{s.owner}]")
            for s in slices
            if s.tier is Tier.MIG
            for device in s.mig_devices
            if device in instance
        }
        foreign_instances = {instance[m.uuid] for m in gpu.mig_devices if attribution.foreign.get(m.uuid)}
        mig = tuple(
            MIGState(
                device=m,
                slice_id=held.get(instance[m.uuid], (None, None))[0],
                holder=held.get(instance[m.uuid], (None, None))[1],
                in_use_without_slice=instance[m.uuid] not in held and instance[m.uuid] in foreign_instances,
            )
            for m in gpu.mig_devices
        )
        result.append(
            GPUOccupancy(
                gpu=gpu,
                shares=shares,
                foreign=attribution.foreign.get(gpu.uuid, 0) + unaccounted,
                foreign_processes=attribution.foreign_pids.get(gpu.uuid, 0),
                unaccounted=unaccounted,
                mig=mig,
            )
        )
    return Occupancy(snapshot, tuple(result))


def _unaccounted(gpu: GPU) -> int:
    """Memory in use that no visible process accounts for (other containers, other pid
    namespaces). Unknown when some process's own use is unknown: it may be that process's."""
    if gpu.memory_used is None or gpu.mig_mode or any(p.used is None for p in gpu.processes):
        return 0
    return max(0, gpu.memory_used - sum(p.used or 0 for p in gpu.processes))
