"""What this kernel uses on the GPUs: NVML per-process memory of the kernel's process tree.

The tree counts ``!python train.py`` started from the notebook against the notebook. NVML
pids are host pids, so inside a container nothing may match; the figures then read 0 and the
server's view (or the frameworks' own figures) is the better source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import VGPUError
from ..slices.holders import Attribution, tree_pids
from .state import KernelState

if TYPE_CHECKING:
    from ..gpus import GPU, Snapshot
    from ..slices import Occupancy


@dataclass(frozen=True)
class Usage:
    """One reading. ``gpus`` are all GPUs NVML shows; ``mine`` are the slice's (or all, without a slice)."""

    gpus: tuple[GPU, ...] = ()
    mine: tuple[GPU, ...] = ()
    used: dict[str, int] = field(default_factory=dict)  # uuid -> bytes used by this kernel's processes
    utilization: dict[str, int | None] = field(default_factory=dict)  # uuid -> percent by this kernel
    available: bool = False
    simulated: bool = False
    message: str | None = None
    occupancy: Occupancy | None = None  # who holds what on each GPU, when asked for (``%vgpu devices``)
    #: For a slice: ``measured``, ``reported`` or ``none``, with the figure, by the rule every view
    #: applies (:func:`jupyter_vgpu.slices.usage.usage_of`); None without a slice.
    source: str | None = None
    slice_used: int | None = None
    slice_utilization: int | None = None  # by the same rule, so %vgpu and the sidebar agree

    @property
    def total_used(self) -> int | None:
        """Bytes this kernel uses on its GPUs, or None when it cannot be told."""
        if not self.available:
            return None
        if self.source is not None:
            return self.slice_used
        return sum(self.used.get(gpu.uuid, 0) for gpu in self.mine)

    @property
    def top_utilization(self) -> int | None:
        """The slice's utilisation as every view computes it; without a slice, the busiest GPU's
        figure for this kernel's processes."""
        if self.source is not None:
            return self.slice_utilization
        values = [u for gpu in self.mine if (u := self.utilization.get(gpu.uuid)) is not None]
        return max(values) if values else None


def measure(state: KernelState, *, with_occupancy: bool = False) -> Usage:
    """Read NVML once; remember the peak. Never raises: a failure becomes ``message``.

    ``with_occupancy`` also reads the ledger, for each GPU's reservations and what is free (the
    figures every other view shows); a kernel pays for that only when the user asks."""
    try:
        snapshot = state.inventory.snapshot()
    except VGPUError as error:
        return Usage(message=str(error))
    except Exception as error:  # a broken driver must not break %vgpu
        return Usage(message=f"NVML could not be read: {error}")
    if not snapshot.available:
        return Usage(simulated=snapshot.simulated, message=snapshot.message)
    mine = slice_gpus(state, snapshot.gpus)
    pids = tree_pids(os.getpid())
    used: dict[str, int] = {}
    utilization: dict[str, int | None] = {}
    tree = Attribution()  # the kernel's process tree as the server attributes it, from this one walk
    for gpu in snapshot.gpus:
        processes = [p for p in gpu.processes if p.pid in pids]
        used[gpu.uuid] = sum(p.used or 0 for p in processes)
        busy = [p.utilization for p in processes if p.utilization is not None]
        utilization[gpu.uuid] = max(busy) if busy else None
        if processes:
            tree.used.setdefault("", {})[gpu.uuid] = used[gpu.uuid]
            if busy:  # summed per GPU, as ProcessOwners.attribute does for the server
                tree.utilization.setdefault("", {})[gpu.uuid] = min(100, sum(busy))
        if others := sum(1 for p in gpu.processes if p.pid not in pids and not p.mps_server):
            tree.foreign_pids[gpu.uuid] = others
    source = slice_used = slice_util = None
    if state.facts.sliced:
        source, slice_used, slice_util = _slice_figure(state, snapshot, mine, tree)
    usage = Usage(
        gpus=snapshot.gpus,
        mine=mine,
        used=used,
        utilization=utilization,
        available=True,
        simulated=snapshot.simulated,
        message=snapshot.message,
        occupancy=_occupancy(snapshot) if with_occupancy else None,
        source=source,
        slice_used=slice_used,
        slice_utilization=slice_util,
    )
    if state.facts.sliced:
        state.observe(usage.total_used)
    return usage


def _slice_figure(
    state: KernelState, snapshot: Snapshot, mine: tuple[GPU, ...], tree: Attribution
) -> tuple[str, int | None, int | None]:
    """What this kernel's slice uses, by the rule the server and ``status`` apply
    (:func:`jupyter_vgpu.slices.usage.usage_of`): NVML's figure for the kernel's process tree
    (``tree``, under the key ""), else what its frameworks say they hold (a container)."""
    from ..frameworks import framework_memory
    from ..slices.usage import usage_of

    reported = None if tree.used else framework_memory(state)[0]  # asked only when NVML matched nothing
    gpus = tuple(gpu.uuid for gpu in mine)
    _, total, util, source = usage_of("", gpus, sum(g.memory_total for g in mine), tree, snapshot, reported)
    return source, total, util


def _occupancy(snapshot: Snapshot) -> Occupancy | None:
    from ..ledger import open_ledger
    from ..slices import occupancy_of
    from ..slices.holders import attribute

    try:
        ledger = open_ledger()
        try:
            slices = ledger.slices()
        finally:
            ledger.close()
    except VGPUError:
        return None  # the ledger cannot be read: the GPUs' own figures still show
    return occupancy_of(snapshot, slices, attribute(snapshot, {s.id: s.pid for s in slices}))


def hub_info() -> dict[str, Any] | None:
    """What the node broker says to this kernel's user (the hub policy's limits for them among
    it), or None without a broker or when it cannot be asked (the sheet then leaves them out)."""
    from ..ledger.broker_client import ENV_BROKER

    if not os.environ.get(ENV_BROKER, "").strip():
        return None
    from ..ledger import open_ledger

    try:
        ledger = open_ledger()
    except VGPUError:
        return None
    try:
        info = getattr(ledger, "info", None)
        return info if isinstance(info, dict) else None
    finally:
        ledger.close()


def slice_gpus(state: KernelState, gpus: tuple[GPU, ...]) -> tuple[GPU, ...]:
    """The slice's GPUs among ``gpus`` (by UUID or index); all of them without a slice."""
    wanted = state.facts.gpus
    if not state.facts.sliced or not wanted:
        return gpus
    found = []
    for ident in wanted:
        for gpu in gpus:
            if ident in (gpu.uuid, str(gpu.index)):
                found.append(gpu)
                break
    return tuple(found)
