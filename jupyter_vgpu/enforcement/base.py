"""The contract every enforcement tier implements: detect itself on the GPUs a slice was placed on,
give the slice's process its variables, say what it does in the one vocabulary every view
(``jupyter vgpu status``, the REST API, the sidebar, ``%vgpu``) uses, and keep what it holds for a
slice through the slice's life (granted, resized, ended, swept; a process entering it)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, MutableMapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from ..errors import InvalidRequest


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

    # and, where known, ``pod_share`` / ``sm_limit`` (a scheduler's share of the GPU in a pod),
    # ``share`` / ``slurm_job`` (a pod's or a Slurm job's share)


class HeldSlice(Protocol):
    """What a tier's life-cycle hooks read of a slice (``slices.records.Slice`` has it)."""

    @property
    def id(self) -> str: ...
    @property
    def gpus(self) -> tuple[str, ...]: ...
    @property
    def memory(self) -> tuple[int, ...]: ...
    @property
    def memory_allowed(self) -> tuple[int, ...]: ...  # an elastic slice's limit where its tier bursts


class Hardware(Protocol):
    """What the process keeping the book can ask of the GPUs (``gpus.inventory.Inventory`` has it)."""

    def partition_limits(self, amounts: Mapping[str, tuple[int, int]]) -> list[tuple[Any, Any, int, int]]: ...


@dataclass(frozen=True)
class Where:
    """Where a life-cycle hook runs. ``folder``: the slice owner's private reports folder, where
    this process reaches it ('' where not); ``hardware``: the GPUs, where this process keeps the
    book (the user's own ledger, or the node broker's), None in a broker's client. A tier keeps
    state that needs the hardware (a cgroup) only where there is hardware, and files of the owner's
    only in ``folder``."""

    folder: str = ""
    hardware: Hardware | None = None


#: Set in the environment of a slice whose tier has a hold its processes enter as they start
#: (:meth:`Enforcement.enter`), to the tier's value. The start-up hook and ``jupyter vgpu run`` read
#: it; a process that tried takes it out, so its children (in the hold already, or with the reason
#: it could not) do not try again.
ENV_ENTER = "JUPYTER_VGPU_ENTER"


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
    #: True when an elastic slice of this tier may use up to its limit (issue 42): the request is
    #: booked and guaranteed, and the tier's cap, if it has one, is set at the limit.
    bursts = False

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

    def setting_problem(self) -> str | None:
        """What is wrong with the admin's settings of this tier, in one sentence naming the setting
        (said at start by the server, ``run`` and the broker; the tier then does not apply); None
        when nothing is, or the tier is not configured."""
        return None

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

    # -- a slice's life: the ledger calls these (and names no tier); no-ops unless a tier keeps state --
    #: True when the processes of a slice of this tier enter a hold as they start (:meth:`enter`):
    #: its environment then carries :data:`ENV_ENTER`.
    enters = False

    def granted(self, slice_: HeldSlice, where: Where) -> None:
        """The slice was just booked (after the ledger's transaction). Raising refuses nothing: the
        slice stands, and :meth:`join` makes what is missing."""
        return None

    def resize_refused(self, slice_: HeldSlice) -> str | None:
        """Why a slice of this tier cannot change size, in a sentence (None: it can). Asked before
        anything is placed."""
        return None

    def resized(self, slice_: HeldSlice, where: Where) -> None:
        """The slice's memory changed (inside the ledger's transaction): a :class:`VGPUError` raised
        here undoes the resize and is the caller's answer."""
        return None

    def ended(self, slice_: HeldSlice, where: Where) -> None:
        """The slice was released or reaped: let go of what this tier holds for it. Never raises
        (the slice has ended either way); what cannot go now goes at a later :meth:`sweep`."""
        return None

    def sweep(self, live: Collection[str], where: Where) -> None:
        """Remove what this tier holds for slices not in ``live`` (ids): left by a crash, or busy
        when their slice ended. Run by the reaper; never raises."""
        return None

    def join(self, slice_: HeldSlice, pid: int, where: Where) -> str:
        """Put process ``pid`` into the slice's hold, making the hold where it is missing; returns
        where it is. The ledger has checked the asker: only the process itself, alive, the slice
        owner's (root: any), never pid 0."""
        # (the one hold a process joins so far is a memory partition: the words say what users know)
        raise InvalidRequest(f"Slice {slice_.id} is {self.describe()}, not a slice with a memory partition to join.")

    def enter(self, env: MutableMapping[str, str], join: Callable[[], str | None]) -> str | None:
        """In a process of the slice, as it starts (``env``: its environment): enter the slice's
        hold, asking the book to :meth:`join` (``join()``: None, or why it could not) where the
        process cannot itself. Returns why it is not in; None when it is, or nothing is to enter."""
        return None
