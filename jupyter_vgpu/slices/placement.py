"""Where a slice goes: ``binpack`` (fullest GPU that still fits) or ``spread`` (emptiest).

A GPU in MIG mode is reserved only by whole MIG devices: a request takes the smallest free one
whose memory fits, one slice per MIG device; the memory outside its MIG devices is never handed
out as a plain fraction. CUDA enumerates a single MIG device per process, so a request for
several GPUs uses only GPUs that are not in MIG mode.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ..enforcement import Tier, tier_of
from ..errors import InvalidRequest
from ..units import format_bytes, shorten
from .occupancy import GPUOccupancy, MIGState
from .request import SliceRequest

#: MIG devices hold a little less than the share of the card their profile is named for (a
#: 1g.10gb on an 80 GB card holds 9.75 GiB, not 1/8 of 79.6 GiB): a *fraction* fits a MIG device
#: that falls short of it by at most this share of the whole GPU.
MIG_FRACTION_SLACK = 0.02


def needs(request: SliceRequest, gpus: Collection[GPUOccupancy]) -> dict[str, int]:
    """Bytes ``request`` reserves on each of ``gpus``, by UUID: its memory, or its fraction of
    what slices share there (:attr:`GPUOccupancy.total`). What every check of a placement reads."""
    return {g.uuid: request.amount_on(g.total) for g in gpus}


def fitting(gpu: GPUOccupancy, request: SliceRequest, need: int) -> list[MIGState]:
    """MIG devices of ``gpu`` (free or not) big enough for ``request``, ``need`` bytes there, smallest first."""
    slack = int(MIG_FRACTION_SLACK * gpu.total) if request.memory is None else 0
    return sorted(
        (m for m in gpu.mig if m.device.memory_total >= need - slack),
        key=lambda m: (m.device.memory_total, m.device.index),
    )


@dataclass(frozen=True)
class Placement:
    """The chosen GPUs and bytes on each (with the MIG device, on a GPU in MIG mode), or nothing
    chosen: with the reason when waiting can never help (a refusal for now is the ledger's to
    word, as it knows who waits in line)."""

    chosen: tuple[tuple[GPUOccupancy, int], ...] = ()
    reason: str = ""
    permanent: bool = False  # True when waiting can never help
    instances: tuple[MIGState | None, ...] = ()  # same order as chosen
    candidates: tuple[GPUOccupancy, ...] = ()  # the GPUs the request could use

    def __bool__(self) -> bool:
        return bool(self.chosen)

    @property
    def tier(self) -> Tier:
        """The enforcement the chosen GPUs give the slice: MIG, MPS (on every GPU), or cooperative."""
        return tier_of([g.gpu for g, _ in self.chosen], sum(1 for i in self.instances if i is not None))


def names_gpu(pin: str, gpu: GPUOccupancy) -> bool:
    """Whether a request's ``gpu`` (an index, a UUID, or a UUID's first 8 characters or more)
    names ``gpu``."""
    return pin in (str(gpu.index), gpu.uuid) or (len(pin) >= 8 and gpu.uuid.startswith(pin))


def same_gpu(pin: str, other: str, gpus: Sequence[GPUOccupancy]) -> bool:
    """Whether two requests' pins name one GPU (``0`` and its UUID do); pins naming no GPU here
    are the same when written the same."""
    mine = {g.uuid for g in gpus if names_gpu(pin, g)}
    theirs = {g.uuid for g in gpus if names_gpu(other, g)}
    return bool(mine & theirs) if mine or theirs else pin == other


def place(
    request: SliceRequest,
    gpus: Collection[GPUOccupancy],
    *,
    allowance: Callable[[GPUOccupancy], int],
    allowed: Collection[str] | None = None,
) -> Placement:
    """Pick GPUs for ``request``; deterministic (ties broken by GPU index).

    ``allowance`` is the CUDA-context allowance on a GPU (a slice must hold more than it);
    ``allowed`` (GPU UUIDs) keeps the choice to the GPUs a policy lets this user have.
    """
    candidates = [g for g in gpus if allowed is None or g.uuid in allowed]
    if not candidates:
        return Placement(reason="There is no GPU to reserve on.", permanent=True)
    gpus = candidates
    if request.gpu is not None:
        pinned = [g for g in gpus if names_gpu(request.gpu, g)]
        if not pinned:
            known = ", ".join(f"{g.index} ({g.uuid})" for g in gpus)
            raise InvalidRequest(f"GPU {shorten(request.gpu)} does not exist; use an index or UUID of: {known}.")
        candidates = pinned
    if request.gpus > 1 and any(g.in_mig_mode for g in candidates):
        plain = [g for g in candidates if not g.in_mig_mode]
        if request.gpus > len(plain):
            mig = ", ".join(str(g.index) for g in candidates if g.in_mig_mode)
            return Placement(
                reason=f"{request.describe()} needs {request.gpus} GPUs not in MIG mode (CUDA shows a process one MIG "
                f"device only), and this machine has {len(plain)}; GPU {mig} in MIG mode take one-GPU requests.",
                permanent=True,
            )
        candidates = plain
    if request.gpus > len(candidates):
        return Placement(reason=f"{request.describe()} needs {request.gpus} GPUs but this machine has {len(candidates)}.", permanent=True)
    need = needs(request, candidates)
    if request.limit_memory is not None and request.limit_memory > (largest := max(g.total for g in candidates)):
        raise InvalidRequest(
            f"{request.describe()} has a limit above the largest GPU here ({format_bytes(largest)}); "
            f"ask for a limit of at most {format_bytes(largest)}."
        )
    for gpu in candidates:
        if need[gpu.uuid] <= (context := allowance(gpu)):
            raise InvalidRequest(
                f"{request.describe()} is {format_bytes(need[gpu.uuid])} on GPU {gpu.index}, not more than the "
                f"CUDA-context allowance ({format_bytes(context)}); ask for more memory."
            )
    # A GPU in MIG mode holds the request in its smallest MIG device that is big enough.
    big_enough = {g.uuid: fitting(g, request, need[g.uuid]) for g in candidates if g.in_mig_mode}
    possible = [g for g in candidates if (big_enough[g.uuid] if g.in_mig_mode else need[g.uuid] <= g.total)]
    if len(possible) < request.gpus:
        return Placement(reason=_never_fits(request, candidates), permanent=True)
    # Where it fits now: on a MIG GPU the MIG device it would get, else None.
    fits = [
        (g, next((m for m in big_enough[g.uuid] if m.free), None) if g.in_mig_mode else None)
        for g in candidates
        if (any(m.free for m in big_enough[g.uuid]) if g.in_mig_mode else need[g.uuid] <= g.free)
    ]
    if len(fits) < request.gpus:
        return Placement(candidates=tuple(candidates))

    def leftover(g: GPUOccupancy, chosen: MIGState | None) -> int:
        # On a MIG GPU: what the MIG device holds beyond the request (the smaller, the better the fit).
        return (chosen.device.memory_total if chosen is not None else g.free) - need[g.uuid]

    def burst_room(g: GPUOccupancy, chosen: MIGState | None) -> int:
        # An elastic request's room to grow here, up to its limit: what no request holds (the ledger
        # books requests only), counting kernels' bursts of the moment as room (they are given back:
        # a GPU chosen because another was bursting just then would leave nobody room to burst).
        # Every GPU with room for the whole limit ties, and the policy decides.
        limit = request.limit_on(g.total)
        if limit is None or chosen is not None:
            return 0  # no limit, or a MIG device: its size is the slice
        return min(g.free + g.kernel_bursts() - need[g.uuid], limit - need[g.uuid])

    sign = -1 if request.placement == "spread" else 1
    ordered = sorted(fits, key=lambda fit: (-burst_room(*fit), sign * leftover(*fit), fit[0].index))
    picked = ordered[: request.gpus]
    return Placement(
        chosen=tuple((g, chosen.device.memory_total if chosen is not None else need[g.uuid]) for g, chosen in picked),
        instances=tuple(chosen for _, chosen in picked),
        candidates=tuple(candidates),
    )


def _never_fits(request: SliceRequest, candidates: list[GPUOccupancy]) -> str:
    """Why no amount of waiting can place ``request``, naming MIG limits where they are the cause."""
    mig = [g for g in candidates if g.in_mig_mode]
    if not mig:
        largest = max(g.total for g in candidates)
        which = "its GPU" if request.gpu is not None else "the largest GPU here"  # a pinned request names it
        return f"{request.describe()} is more than {which} ({format_bytes(largest)})."
    parts = []
    for g in mig:
        if not g.mig:
            parts.append(
                f"GPU {g.index} is in MIG mode with no MIG devices (an admin creates them with "
                "`nvidia-smi mig -cgi PROFILE -C`)"
            )
        else:
            biggest = max(g.mig, key=lambda m: m.device.memory_total)
            parts.append(f"GPU {g.index} is in MIG mode and its largest MIG device is {biggest.describe()}")
    plain = [g for g in candidates if not g.in_mig_mode]
    if plain:
        parts.append(f"the largest GPU not in MIG mode has {format_bytes(max(g.total for g in plain))}")
    return (
        f"{request.describe()} fits nowhere: {'; '.join(parts)}. A GPU in MIG mode is reserved only as whole "
        "MIG devices, never as a plain fraction of its memory; ask for at most the size of a MIG device."
    )
