"""Where a slice goes: ``binpack`` (fullest GPU that still fits) or ``spread`` (emptiest).

A GPU in MIG mode is reserved only by whole MIG devices: a request takes the smallest free one
whose memory fits, one slice per MIG device; the memory outside its MIG devices is never handed
out as a plain fraction. CUDA enumerates a single MIG device per process, so a request for
several GPUs uses only GPUs that are not in MIG mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidRequest
from ..units import format_bytes
from .request import SliceRequest

#: MIG devices hold a little less than the share of the card their profile is named for (a
#: 1g.10gb on an 80 GB card holds 9.75 GiB, not 1/8 of 79.6 GiB): a *fraction* fits a MIG device
#: that falls short of it by at most this share of the whole GPU.
MIG_FRACTION_SLACK = 0.02

#: Where a slice's tier is recorded: the strongest enforcement its GPUs give (DESIGN.md).
TIER_MIG = "mig"
TIER_MPS = "mps"
TIER_COOPERATIVE = "cooperative"


@dataclass
class InstanceState:
    """A MIG device of a GPU in MIG mode, and who (if anyone) holds it."""

    uuid: str
    profile: str
    memory: int
    index: int
    holder: str | None = None  # a slice's holder, or "processes without a slice"

    @property
    def free(self) -> bool:
        return self.holder is None

    def describe(self) -> str:
        return f"{self.profile} ({format_bytes(self.memory)})"


@dataclass
class GPUState:
    """A GPU as the ledger sees it at reservation time."""

    uuid: str
    index: int
    name: str
    total: int
    reserved: int = 0
    foreign: int = 0
    holders: list[tuple[str, int]] = field(default_factory=list)  # (who, bytes)
    mig: bool = False  # in MIG mode: only ``instances`` can be reserved
    instances: list[InstanceState] = field(default_factory=list)
    mps: bool = False  # an MPS daemon serves it

    @property
    def free(self) -> int:
        if self.mig:
            return max((i.memory for i in self.instances if i.free), default=0)
        return max(0, self.total - self.reserved - self.foreign)

    def fitting(self, request: SliceRequest) -> list[InstanceState]:
        """MIG devices (free or not) big enough for ``request``, smallest first."""
        need = request.amount_on(self.total)
        slack = int(MIG_FRACTION_SLACK * self.total) if request.memory is None else 0
        return sorted((i for i in self.instances if i.memory >= need - slack), key=lambda i: (i.memory, i.index))

    def explain(self) -> str:
        if self.mig:
            return self._explain_mig()
        text = f"GPU {self.index} ({self.name}): {format_bytes(self.free)} free of {format_bytes(self.total)}"
        parts = []
        if self.holders:
            shown = ", ".join(f"{who} {format_bytes(amount)}" for who, amount in self.holders[:4])
            more = f" and {len(self.holders) - 4} more" if len(self.holders) > 4 else ""
            parts.append(f"reserved by {shown}{more}")
        if self.foreign:
            parts.append(f"{format_bytes(self.foreign)} used by processes without a slice")
        return text + (f"; {'; '.join(parts)}" if parts else "")

    def _explain_mig(self) -> str:
        text = f"GPU {self.index} ({self.name}) is in MIG mode"
        if not self.instances:
            return text + " with no MIG devices"
        free = [i.describe() for i in self.instances if i.free]
        held = [f"{i.profile} by {i.holder}" for i in self.instances if not i.free]
        parts = [f"free MIG devices: {', '.join(free) if free else 'none'}"]
        if held:
            parts.append(f"held: {', '.join(held[:4])}" + (f" and {len(held) - 4} more" if len(held) > 4 else ""))
        return f"{text}; {'; '.join(parts)}"


@dataclass(frozen=True)
class Placement:
    """The chosen GPUs and bytes on each (with the MIG device, on a GPU in MIG mode), or why
    nothing was chosen."""

    chosen: tuple[tuple[GPUState, int], ...] = ()
    reason: str = ""
    permanent: bool = False  # True when waiting can never help
    instances: tuple[InstanceState | None, ...] = ()  # same order as chosen

    def __bool__(self) -> bool:
        return bool(self.chosen)

    @property
    def tier(self) -> str:
        """The enforcement the chosen GPUs give the slice: MIG, MPS (on every GPU), or cooperative."""
        if self.instances and all(i is not None for i in self.instances):
            return TIER_MIG
        if self.chosen and all(g.mps for g, _ in self.chosen):
            return TIER_MPS
        return TIER_COOPERATIVE


def place(request: SliceRequest, gpus: list[GPUState], *, context_allowance: int) -> Placement:
    """Pick GPUs for ``request``; deterministic (ties broken by GPU index)."""
    if not gpus:
        return Placement(reason="There is no GPU to reserve on.", permanent=True)
    candidates = gpus
    if request.gpu is not None:
        pinned = [g for g in gpus if request.gpu in (str(g.index), g.uuid) or (len(request.gpu) >= 8 and g.uuid.startswith(request.gpu))]
        if not pinned:
            known = ", ".join(f"{g.index} ({g.uuid})" for g in gpus)
            raise InvalidRequest(f"GPU {request.gpu!r} does not exist; use an index or UUID of: {known}.")
        candidates = pinned
    if request.gpus > 1 and any(g.mig for g in candidates):
        plain = [g for g in candidates if not g.mig]
        if request.gpus > len(plain):
            mig = ", ".join(str(g.index) for g in candidates if g.mig)
            return Placement(
                reason=f"{request.describe()} needs {request.gpus} GPUs not in MIG mode (CUDA shows a process one MIG "
                f"device only), and this machine has {len(plain)}; GPU {mig} in MIG mode take one-GPU requests.",
                permanent=True,
            )
        candidates = plain
    if request.gpus > len(candidates):
        return Placement(reason=f"{request.describe()} needs {request.gpus} GPUs but this machine has {len(candidates)}.", permanent=True)
    for gpu in candidates:
        need = request.amount_on(gpu.total)
        if need <= context_allowance:
            raise InvalidRequest(
                f"{request.describe()} is {format_bytes(need)} on GPU {gpu.index}, not more than the "
                f"CUDA-context allowance ({format_bytes(context_allowance)}); ask for more memory."
            )
    possible = [g for g in candidates if (g.fitting(request) if g.mig else request.amount_on(g.total) <= g.total)]
    if len(possible) < request.gpus:
        return Placement(reason=_never_fits(request, candidates), permanent=True)
    fits = [g for g in candidates if (any(i.free for i in g.fitting(request)) if g.mig else request.amount_on(g.total) <= g.free)]
    if len(fits) < request.gpus:
        where = "; ".join(g.explain() for g in candidates)
        wanted = f"{request.gpus} GPUs" if request.gpus > 1 else "one GPU"
        what = "GPU memory" if not all(g.mig for g in candidates) else "MIG devices"
        return Placement(reason=f"Not enough free {what} for {request.describe()} on {wanted}. {where}.")

    def instance(g: GPUState) -> InstanceState | None:
        return next((i for i in g.fitting(request) if i.free), None) if g.mig else None

    def amount(g: GPUState) -> int:
        chosen = instance(g)
        return chosen.memory if chosen is not None else request.amount_on(g.total)

    def leftover(g: GPUState) -> int:
        # On a MIG GPU: what the MIG device holds beyond the request (the smaller, the better the fit).
        chosen = instance(g)
        if chosen is not None:
            return chosen.memory - request.amount_on(g.total)
        return g.free - request.amount_on(g.total)

    if request.placement == "spread":
        ordered = sorted(fits, key=lambda g: (-leftover(g), g.index))
    else:
        ordered = sorted(fits, key=lambda g: (leftover(g), g.index))
    picked = ordered[: request.gpus]
    return Placement(
        chosen=tuple((g, amount(g)) for g in picked),
        instances=tuple(instance(g) for g in picked),
    )


def _never_fits(request: SliceRequest, candidates: list[GPUState]) -> str:
    """Why no amount of waiting can place ``request``, naming MIG limits where they are the cause."""
    mig = [g for g in candidates if g.mig]
    if not mig:
        largest = max(g.total for g in candidates)
        return f"{request.describe()} is more than the largest GPU here ({format_bytes(largest)})."
    parts = []
    for g in mig:
        if not g.instances:
            parts.append(
                f"GPU {g.index} is in MIG mode with no MIG devices (an admin creates them with "
                "`nvidia-smi mig -cgi PROFILE -C`)"
            )
        else:
            biggest = max(g.instances, key=lambda i: i.memory)
            parts.append(f"GPU {g.index} is in MIG mode and its largest MIG device is {biggest.describe()}")
    plain = [g for g in candidates if not g.mig]
    if plain:
        parts.append(f"the largest GPU not in MIG mode has {format_bytes(max(g.total for g in plain))}")
    return (
        f"{request.describe()} fits nowhere: {'; '.join(parts)}. A GPU in MIG mode is reserved only as whole "
        "MIG devices, never as a plain fraction of its memory; ask for at most the size of a MIG device."
    )
