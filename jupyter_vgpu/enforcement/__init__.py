"""Enforcement tiers as plug-ins: one module per tier, one registry (:data:`TIERS`, strongest
first). Placement, a slice's environment, the words of every view and the REST fields ask it;
nothing else names a tier.

Adding a tier (e.g. HAMi-core's in-process limit, or MPS memory partitioning):

1. ``enforcement/<name>.py``: an :class:`~.base.Enforcement` subclass with its :class:`~.base.Tier`
   value (add it to the enum: the ledger stores it), ``hard``, :meth:`~.base.Enforcement.applies`
   (detect it on the GPUs a slice was placed on), ``variables`` and
   :meth:`~.base.Enforcement.environment`, :meth:`~.base.Enforcement.describe` and
   :meth:`~.base.Enforcement.share_note`.
2. Add an instance to :data:`TIERS` where its strength puts it.
3. ``tests/test_enforcement_tiers.py`` checks every registered tier against the contract; add its
   placement and environment tests in ``tests/test_tiers.py`` and a GPU test in ``tests/gpu/``.
"""

from __future__ import annotations

from .base import Enforcement, PlacedGPU, Tier, thread_percentage
from .cooperative import Cooperative
from .hamicore import HAMiCore
from .mig import MIG
from .mps import MPS

#: Every tier, strongest first: a slice gets the first that applies to where it was placed.
TIERS: tuple[Enforcement, ...] = (MIG(), HAMiCore(), MPS(), Cooperative())


def by_tier(tier: Tier) -> Enforcement:
    """The plug-in of a tier recorded with a slice."""
    for enforcement in TIERS:
        if enforcement.tier is tier:
            return enforcement
    raise KeyError(tier)


def tier_of(gpus: list[PlacedGPU], mig_devices: int) -> Tier:
    """The tier a slice placed on ``gpus`` (``mig_devices`` of them as MIG devices) gets."""
    return next(t.tier for t in TIERS if t.applies(gpus, mig_devices))


def offered_by(gpu: PlacedGPU) -> str:
    """The strongest tier ``gpu`` offers a new slice, in words."""
    return next(t.offered() for t in TIERS if t.applies([gpu], 1 if gpu.mig_mode else 0))


__all__ = ["TIERS", "Enforcement", "PlacedGPU", "Tier", "by_tier", "offered_by", "thread_percentage", "tier_of"]
