"""Enforcement tiers as plug-ins: one module per tier, one registry (:data:`TIERS`, strongest
first). Placement, a slice's environment, the words of every view and the REST fields ask it;
nothing else names a tier.

Adding a tier (as HAMi-core's in-process limit and MPS memory partitioning were added):

1. ``enforcement/<name>.py``: an :class:`~.base.Enforcement` subclass with its :class:`~.base.Tier`
   value (add it to the enum: the ledger stores it), ``hard``, :meth:`~.base.Enforcement.applies`
   (detect it on the GPUs a slice was placed on), ``variables`` and
   :meth:`~.base.Enforcement.environment`, :meth:`~.base.Enforcement.describe` and
   :meth:`~.base.Enforcement.share_note`.
   A tier that keeps state per slice (a cgroup, a file, a device made on demand) implements the
   life-cycle hooks, which the ledger calls and which name no tier elsewhere:
   :meth:`~.base.Enforcement.granted`, :meth:`~.base.Enforcement.resized` (raise to refuse),
   :meth:`~.base.Enforcement.ended`, :meth:`~.base.Enforcement.sweep` (what no live slice owns),
   :meth:`~.base.Enforcement.join` (the book side: put a process into the slice's hold) and, with
   ``enters = True``, :meth:`~.base.Enforcement.enter` (the process side, at its start). Its hardware
   mechanism goes in ``gpus/`` (MPS memory partitioning's cgroups: ``gpus/memory_cgroups.py``).
2. Add an instance to :data:`TIERS` where its strength puts it.
3. ``tests/test_enforcement_tiers.py`` checks every registered tier against the contract; add its
   placement and environment tests in ``tests/test_tiers.py`` and a GPU test in ``tests/gpu/``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import InvalidConfig
from ..units import shorten
from .base import Enforcement, PlacedGPU, Tier, thread_percentage
from .cooperative import Cooperative
from .hamicore import HAMiCore
from .mig import MIG
from .mps import MPS
from .mpspartition import MPSPartition

#: Every tier, strongest first: a slice gets the first that applies to where it was placed.
TIERS: tuple[Enforcement, ...] = (MIG(), MPSPartition(), HAMiCore(), MPS(), Cooperative())


def by_tier(tier: Tier) -> Enforcement:
    """The plug-in of a tier recorded with a slice."""
    for enforcement in TIERS:
        if enforcement.tier is tier:
            return enforcement
    raise KeyError(tier)


#: The admin's choice of tiers (``c.VGPU.tiers``): a comma-separated list of tier values; the
#: strongest of them that applies is used, cooperative where none does. Unset: every tier.
ENV_TIERS = "JUPYTER_VGPU_TIERS"


def setting_problems() -> list[str]:
    """What is wrong with the admin's tier settings, a sentence each (the tiers' own checks)."""
    return [problem for t in TIERS if (problem := t.setting_problem())]


def allowed_tiers(env: Mapping[str, str] | None = None) -> tuple[Enforcement, ...]:
    """:data:`TIERS` the admin allows, strongest first (cooperative always)."""
    text = (os.environ if env is None else env).get(ENV_TIERS, "").strip()
    if not text:
        return TIERS
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    known = {t.tier.value for t in TIERS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidConfig(
            f"{ENV_TIERS} / c.VGPU.tiers names {shorten(unknown[0])}, which is no tier; use some of: {', '.join(t.tier.value for t in TIERS)}."
        )
    return tuple(t for t in TIERS if t.tier.value in names or t.tier is Tier.COOPERATIVE)


def tier_of(gpus: list[PlacedGPU], mig_devices: int) -> Tier:
    """The tier a slice placed on ``gpus`` (``mig_devices`` of them as MIG devices) gets: the
    strongest the admin allows that applies there (MIG > MPS memory partitioning > HAMi-core > MPS >
    cooperative)."""
    if mig_devices:  # a MIG device is what the slice is: no other tier can place it
        return Tier.MIG
    return next(t.tier for t in allowed_tiers() if t.applies(gpus, mig_devices))


def offered_by(gpu: PlacedGPU) -> str:
    """The strongest tier ``gpu`` offers a new slice, in words."""
    mig = 1 if gpu.mig_mode else 0
    try:
        tiers = allowed_tiers()
    except InvalidConfig:
        tiers = TIERS  # the views still show the GPU; reserving says what is wrong
    return next(t.offered() for t in (TIERS if mig else tiers) if t.applies([gpu], mig))


__all__ = ["ENV_TIERS", "TIERS", "Enforcement", "PlacedGPU", "Tier", "allowed_tiers", "by_tier", "offered_by", "setting_problems", "thread_percentage", "tier_of"]
