"""The one plan of the reclaim engine: the fewest holders whose giving back lets a want in.

Every source asks the same question with its own idea of what giving back frees: an idle kernel
shut down frees its whole slice (:func:`without`), a burst given back frees what the kernel uses
above its request (:func:`trimmed`). Placement's own rules (:func:`placed`) judge whether the want
would then fit: its pinned GPU, the GPUs its policy allows, its size, its number of GPUs, MIG.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import InvalidRequest
from ...slices.occupancy import GPUOccupancy, within_requests
from ...slices.placement import place

#: What giving back the holders ``given_back`` frees: the GPUs as they would then be.
Frees = Callable[[Sequence[GPUOccupancy], Collection[str]], tuple[GPUOccupancy, ...]]
#: The CUDA-context allowance a slice must exceed on a GPU, as the ledger counts it.
Allowance = Callable[[GPUOccupancy], int]


def without(gpus: Sequence[GPUOccupancy], freed: Collection[str]) -> tuple[GPUOccupancy, ...]:
    """The GPUs as they would be with the slices ``freed`` gone: their reservations, their use
    (over-use included) and their MIG devices."""
    if not freed:
        return tuple(gpus)
    return tuple(
        replace(
            g,
            shares=tuple(s for s in g.shares if s.slice.id not in freed),
            mig=tuple(replace(m, slice_id=None, holder=None) if m.slice_id in freed else m for m in g.mig),
        )
        for g in gpus
    )


def trimmed(gpus: Sequence[GPUOccupancy], given_back: Collection[str]) -> tuple[GPUOccupancy, ...]:
    """The GPUs as they would be with the slices ``given_back`` using no more than their requests
    (their reservations and everyone else's use unchanged): :func:`without`'s partner."""
    return within_requests(gpus, given_back) if given_back else tuple(gpus)


def spoken_for(gpus: Sequence[GPUOccupancy], taken: Mapping[str, int]) -> tuple[GPUOccupancy, ...]:
    """The GPUs with ``taken`` (GPU UUID -> bytes) held as if by processes outside slices: the
    room earlier requests in line will take, so each later one is planned with what is left."""
    return tuple(replace(g, foreign=g.foreign + taken[g.uuid]) if taken.get(g.uuid) else g for g in gpus)


def take(taken: dict[str, int], where: Mapping[str, int]) -> None:
    """Count what one more want takes (GPU UUID -> bytes) into ``taken``."""
    for gpu, amount in where.items():
        taken[gpu] = taken.get(gpu, 0) + amount


def burst_of(slice_id: str, gpus: Sequence[GPUOccupancy]) -> int:
    """Bytes the slice uses above its request, within its limit, over all its GPUs."""
    return sum(g.burst_of(s) for g in gpus for s in g.shares if s.slice.id == slice_id)


def placed(want: Any, gpus: Sequence[GPUOccupancy], allowance: Allowance) -> dict[str, int]:
    """Where ``want`` (a :class:`.wants.Want`) would be placed on ``gpus`` and how much it would
    take there (GPU UUID -> bytes); empty when it would not be."""
    try:
        return {g.uuid: amount for g, amount in place(want.request, gpus, allowance=allowance, allowed=want.allowed).chosen}
    except InvalidRequest:
        return {}  # a GPU that is gone, a share below the context: no reclaim helps it


def lets_in(want: Any, gpus: Sequence[GPUOccupancy], allowance: Allowance) -> bool:
    """Whether ``want`` would be placed on ``gpus``."""
    return bool(placed(want, gpus, allowance))


def plan(
    want: Any, gpus: Sequence[GPUOccupancy], candidates: Sequence[str], allowance: Allowance, frees: Frees = without
) -> tuple[str, ...] | None:
    """The fewest of ``candidates`` (taken in their order: the most deserving first) whose giving
    back, as ``frees`` says what that frees, lets ``want`` in; None when it fits already (nothing
    to give back for it) or all of them giving back would not let it in."""
    if lets_in(want, gpus, allowance):
        return None
    chosen: list[str] = []
    for slice_id in candidates:
        chosen.append(slice_id)
        if lets_in(want, frees(gpus, chosen), allowance):
            break
    else:
        return None
    for slice_id in reversed(chosen[:-1]):  # taken on the way but not needed (another GPU, say)
        fewer = [c for c in chosen if c != slice_id]
        if lets_in(want, frees(gpus, fewer), allowance):
            chosen = fewer
    return tuple(chosen)
