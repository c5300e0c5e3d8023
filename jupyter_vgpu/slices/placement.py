"""Where a slice goes: ``binpack`` (fullest GPU that still fits) or ``spread`` (emptiest)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidRequest
from ..units import format_bytes
from .request import SliceRequest


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

    @property
    def free(self) -> int:
        return max(0, self.total - self.reserved - self.foreign)

    def explain(self) -> str:
        text = f"GPU {self.index} ({self.name}): {format_bytes(self.free)} free of {format_bytes(self.total)}"
        parts = []
        if self.holders:
            shown = ", ".join(f"{who} {format_bytes(amount)}" for who, amount in self.holders[:4])
            more = f" and {len(self.holders) - 4} more" if len(self.holders) > 4 else ""
            parts.append(f"reserved by {shown}{more}")
        if self.foreign:
            parts.append(f"{format_bytes(self.foreign)} used by processes without a slice")
        return text + (f"; {'; '.join(parts)}" if parts else "")


@dataclass(frozen=True)
class Placement:
    """The chosen GPUs and bytes on each, or why nothing was chosen."""

    chosen: tuple[tuple[GPUState, int], ...] = ()
    reason: str = ""
    permanent: bool = False  # True when waiting can never help

    def __bool__(self) -> bool:
        return bool(self.chosen)


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
    if request.gpus > len(candidates):
        return Placement(reason=f"{request.describe()} needs {request.gpus} GPUs but this machine has {len(candidates)}.", permanent=True)
    for gpu in candidates:
        need = request.amount_on(gpu.total)
        if need <= context_allowance:
            raise InvalidRequest(
                f"{request.describe()} is {format_bytes(need)} on GPU {gpu.index}, not more than the "
                f"CUDA-context allowance ({format_bytes(context_allowance)}); ask for more memory."
            )
    possible = [g for g in candidates if request.amount_on(g.total) <= g.total]
    if len(possible) < request.gpus:
        largest = max(g.total for g in candidates)
        return Placement(
            reason=f"{request.describe()} is more than the largest GPU here ({format_bytes(largest)}).",
            permanent=True,
        )
    fits = [g for g in candidates if request.amount_on(g.total) <= g.free]
    if len(fits) < request.gpus:
        where = "; ".join(g.explain() for g in candidates)
        wanted = f"{request.gpus} GPUs" if request.gpus > 1 else "one GPU"
        return Placement(reason=f"Not enough free GPU memory for {request.describe()} on {wanted}. {where}.")

    def leftover(g: GPUState) -> int:
        return g.free - request.amount_on(g.total)

    if request.placement == "spread":
        ordered = sorted(fits, key=lambda g: (-leftover(g), g.index))
    else:
        ordered = sorted(fits, key=lambda g: (leftover(g), g.index))
    return Placement(chosen=tuple((g, request.amount_on(g.total)) for g in ordered[: request.gpus]))
