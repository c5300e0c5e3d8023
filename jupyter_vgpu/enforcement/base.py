"""The contract every enforcement tier implements: detect itself on the GPUs a slice was placed on,
give the slice's process its variables, and say what it does in the one vocabulary every view
(``jupyter vgpu status``, the REST API, the sidebar, ``%vgpu``) uses."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from enum import Enum
from typing import Protocol


class Tier(str, Enum):
    """The enforcement a slice got where it was placed (README.md, "Enforcement tiers"); stored
    with each slice in the ledger."""

    COOPERATIVE = "cooperative"  # framework limits set at import; user code can undo them
    MPS = "mps"  # the MPS server's pinned memory limit and thread share
    MIG = "mig"  # a MIG device of its own
    HAMI_CORE = "hami-core"  # HAMi-core's preloaded limit on every CUDA allocation
    MPS_PARTITION = "mps-partition"  # the driver's memory limit for the slice's cgroup (r615)

    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        """``hard (MIG 1g.10gb)``, ``hard (MPS)`` or ``cooperative``: how every view names it."""
        from . import by_tier

        return by_tier(self).describe(mig_profiles)


class PlacedGPU(Protocol):
    """What a tier reads of a GPU a slice was placed on (``gpus.inventory.GPU`` has it)."""

    @property
    def mps(self) -> bool: ...
    @property
    def mig_mode(self) -> bool | None: ...

    # and, where known, ``pod_share`` / ``sm_limit`` (a scheduler's share of the GPU in a pod)


def thread_percentage(fraction: float) -> int:
    """The share of the SMs an MPS client gets for a slice: its fraction, rounded up, 1 to 100."""
    return max(1, min(100, math.ceil(round(fraction * 100, 6))))


class Enforcement(ABC):
    """One tier. Subclasses set ``tier`` and ``hard``, and answer what they can."""

    tier: Tier
    #: True when the hardware keeps the process inside its slice (not only the frameworks' limits).
    hard = False
    #: The environment variables :meth:`environment` may set: a process that gets a slice starts
    #: without any inherited one (``slices.environment.without_slice``).
    variables: tuple[str, ...] = ()

    @abstractmethod
    def applies(self, gpus: list[PlacedGPU], mig_devices: int) -> bool:
        """Whether a slice placed on ``gpus`` (``mig_devices`` of them as MIG devices) gets this
        tier. The registry asks the tiers strongest first."""

    def environment(
        self, memory: tuple[int, ...], fraction: float, *, slice_id: str = "", folder: str = "", setup: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The variables of a process holding a slice of this tier (``memory``: bytes reserved on
        each GPU, in the order the process sees them; ``slice_id`` and ``folder``, the slice
        owner's private folder, for a tier that keeps a file per slice; ``setup``, what the
        placing process decided: :meth:`setup` there, this process's when not given)."""
        return {}

    def setup(self) -> dict[str, str]:
        """What the process that places a slice of this tier decides for it beyond its GPUs
        (HAMi-core: the library to preload), carried with the slice (``Slice.tier_setup``) to the
        process that builds its environment: a broker's client may not have the broker's settings."""
        return {}

    def set_here(self, env: Mapping[str, str]) -> set[str]:
        """Variables of ``env`` this tier set beyond :attr:`variables`: names others use too
        (``LD_PRELOAD``, HAMi's limits in a pod), so a slice's process drops them only when a
        mark says this tier set them."""
        return set()

    @abstractmethod
    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        """The tier in the words every view uses."""

    @abstractmethod
    def share_note(self, fraction: float | None = None, percentage: int | None = None) -> str:
        """What a slice of this tier reserves, in words (``percentage`` of the SMs, if known)."""

    def inside(self, devices: tuple[str, ...], memory_reserved: int | None, env: Mapping[str, str]) -> str | None:
        """How the hardware keeps a process of this tier inside its slice, for ``%vgpu`` (None: nothing does)."""
        return None

    def cuda_total(self, reserved: int, total: int) -> int:
        """The device memory CUDA reports (``cuDeviceTotalMem``, ``cuMemGetInfo``) to a process of
        this tier holding ``reserved`` of a GPU of ``total``: what the frameworks' fractions are of."""
        return total

    def not_held(self, env: Mapping[str, str]) -> str | None:
        """Why this tier does not hold the process it runs in (a preload that did not load, a cgroup
        not joined), in words; None when it does, or when that cannot be told here."""
        return None

    def not_given(self, env: Mapping[str, str]) -> str | None:
        """Why a process started with ``env`` (its slice's environment) will not be held by this
        tier, as the process that starts it can tell beforehand (a preload that cannot be given);
        None when nothing says so. ``jupyter vgpu run`` asks; the process itself asks :meth:`not_held`."""
        return None

    def not_held_text(self, problem: str, mig_profiles: tuple[str, ...] = ()) -> str:
        """The tier of a process that this tier does not hold (``problem``: why), as every view
        names it in place of :meth:`describe`."""
        return f"{self.fallback} here: {problem} (the slice was placed as {self.describe(mig_profiles)})"

    #: What holds a process of this tier where :meth:`not_held` says the tier did not take, as
    #: every view names it (``%vgpu``'s tier line: "cooperative here: ...").
    fallback = "cooperative"

    def held_instead(self) -> str:
        """What keeps such a process inside its slice, in a sentence's words."""
        return "framework limits" if self.fallback == "cooperative" else f"{self.fallback} and framework limits"

    def offered(self) -> str:
        """How a GPU that gives new slices this tier is described (``status``, ``/api/vgpu/devices``)."""
        return self.describe()
