"""What each slice uses right now, worked out from one inventory snapshot: the one computation
every view reads (the server's monitor, ``jupyter vgpu status``, the hub's admin page), so they
cannot disagree on a slice's figure.

Which GPU process belongs to which slice is :class:`jupyter_vgpu.slices.holders.ProcessOwners`
(the monitor keeps one across ticks). Usage is ``measured`` when NVML shows the slice's processes, ``reported`` when it cannot (NVML
reports host pids, which a kernel in a container does not have) and the kernel's own report
says what its frameworks hold, and ``none`` when neither can say.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..enforcement import by_tier
from ..gpus import Snapshot
from .holders import Attribution
from .records import Slice
from .reports import read_report_file, report_bytes, report_path

#: A slice at or above this share of its reservation is "near" its limit.
NEAR = 0.9

MEASURED = "measured"
REPORTED = "reported"
NO_USAGE = "none"


def use_state(used: int | None, reserved: int | None) -> str:
    """``ok``, ``near`` (>= 90% of ``reserved``), ``over`` or ``unknown`` (no use known; or, with a
    use known and no reservation known, ``ok``)."""
    if used is None:
        return "unknown"
    if reserved is None:
        return "ok"
    if used > reserved:
        return "over"
    if reserved and used >= NEAR * reserved:
        return "near"
    return "ok"


class ReportCache:
    """The kernels' own reports (``slices.reports``), re-read only when a file changes. Where a
    slice's report lies is ``folder_of(slice)`` (its launcher's answer: a kernel that runs elsewhere
    writes its reports where this host can read them); None, or none given: the ledger's reports folder."""

    def __init__(self, ledger_path: str | Path, folder_of: Callable[[Path, Slice], Path | None] | None = None) -> None:
        self.ledger_path = Path(ledger_path)
        self.folder_of = folder_of
        self._cache: dict[str, tuple[tuple[float, int], dict[str, Any] | None]] = {}
        self._paths: dict[str, str] = {}  # building paths costs more than the stat itself

    def get(self, slice_: Slice) -> dict[str, Any] | None:
        slice_id = slice_.id
        path = self._paths.get(slice_id)
        if path is None:
            folder = self.folder_of(self.ledger_path, slice_) if self.folder_of is not None else None
            where = report_path(self.ledger_path, slice_id) if folder is None else Path(folder) / f"{slice_id}.json"
            path = self._paths[slice_id] = str(where)
        try:
            st = os.stat(path)
        except OSError:
            self._cache.pop(slice_id, None)
            return None
        stamp = (st.st_mtime, st.st_size)
        cached = self._cache.get(slice_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        report = read_report_file(path)
        self._cache[slice_id] = (stamp, report)
        return report

    def forget(self, keep: set[str]) -> None:
        for sid in [s for s in self._paths if s not in keep]:
            self._paths.pop(sid, None)
            self._cache.pop(sid, None)


@dataclass(frozen=True)
class SliceUsage:
    """One slice and what it uses at the time of a sample."""

    slice: Slice
    pid: int | None  # the process whose tree is attributed to the slice
    used_by_gpu: dict[str, int]  # measured bytes per GPU uuid (empty unless measured)
    memory_used: int | None  # all GPUs of the slice; None when unknown
    utilization: int | None
    source: str  # MEASURED | REPORTED | NO_USAGE
    report: dict[str, Any] | None
    #: Where the figure comes from or, when it is unknown, why (one sentence for the views).
    note: str = ""
    #: The GPUs are simulated: the figure is what the slice's frameworks hold in host memory.
    simulated: bool = False
    #: Measured utilisation per GPU uuid, % of the whole GPU (empty unless measured and NVML has it).
    utilization_by_gpu: dict[str, int] = field(default_factory=dict)

    @property
    def source_text(self) -> str:
        """How the figure was found, in a word: ``measured``, ``reported`` or ``simulated``."""
        return "simulated" if self.simulated and self.source == MEASURED else self.source

    @property
    def tier_text(self) -> str:
        """The slice's tier in every view's words; where its holder reports that the tier does
        not hold it (a preload that did not take), what holds it instead and why."""
        problem = self.report.get("tier_problem") if self.report else None
        if isinstance(problem, str) and problem:
            return by_tier(self.slice.tier).not_held_text(problem[:300], self.slice.mig_profiles)
        return self.slice.tier_text

    @property
    def memory_reserved_total(self) -> int:
        return sum(self.slice.memory)

    @property
    def memory_burst(self) -> int | None:
        """What an elastic slice uses above its request, within its limit (None: a fixed slice, or
        no use known)."""
        if self.slice.memory_burst_limit is None or self.memory_used is None:
            return None
        return max(0, min(self.memory_used, sum(self.slice.memory_allowed)) - self.memory_reserved_total)

    @property
    def state(self) -> str:
        """``ok``, ``near`` (>= 90% of what it may use: the reservation, or an elastic slice's
        limit), ``over`` (beyond it) or ``unknown``. A burst within the limit is not over."""
        return use_state(self.memory_used, sum(self.slice.memory_allowed))

    def overshoot(self) -> float:
        """How far usage exceeds what the slice may use (the reservation, or an elastic slice's
        limit: the watchdog never acts on a burst within it), as a share of it (0 when within).

        Measured usage is compared GPU by GPU (a slice holds the same share on each GPU);
        reported usage, which has no per-GPU split, against the whole.
        """
        if self.memory_used is None:
            return 0.0
        allowed = self.slice.memory_allowed
        if self.used_by_gpu:
            worst = 0.0
            for gpu, most in zip(self.slice.gpus, allowed):
                if most:
                    worst = max(worst, self.used_by_gpu.get(gpu, 0) / most - 1)
            return max(0.0, worst)
        total = sum(allowed)
        return max(0.0, self.memory_used / total - 1) if total else 0.0


def slice_usage(
    slice_: Slice, pid: int | None, attribution: Attribution, snapshot: Snapshot, report: dict[str, Any] | None
) -> SliceUsage:
    """Combine NVML's attribution and the kernel's report into one figure for ``slice_``."""
    reported = report_bytes(report.get("memory_used")) if report else None
    used, total, util, source = usage_of(slice_.id, slice_.gpus, sum(slice_.memory_total), attribution, snapshot, reported)
    note = usage_note(slice_, source, attribution, snapshot)
    by_gpu = dict(attribution.utilization.get(slice_.id, {})) if used else {}
    return SliceUsage(slice_, pid, used, total, util, source, report, note, snapshot.simulated, by_gpu)


def usage_note(slice_: Slice, source: str, attribution: Attribution, snapshot: Snapshot) -> str:
    """One sentence: how the slice's figure was found, or why there is none (the state
    ``unknown`` is never shown without its reason)."""
    holder = "kernel" if slice_.holder_kind == "kernel" else "command"
    if source == MEASURED:
        # On simulated GPUs nothing is measured: the figure is the simulation's (say only that).
        how = "Simulated (JUPYTER_VGPU_SIMULATE)" if snapshot.simulated else "Measured by NVML"
        if attribution.used.get(slice_.id) and snapshot.simulated:
            return (
                f"{how}: the memory of this {holder}'s GPU processes, which is what their frameworks hold in the "
                "host's memory (or the simulation file's figure)."
            )
        if attribution.used.get(slice_.id):
            return f"{how}: the memory of this {holder}'s GPU processes."
        return f"{how}: no process on its GPUs is this {holder}'s, so it uses none."
    if source == REPORTED:
        return (
            f"Reported by this {holder}'s frameworks: NVML's process ids do not match it "
            "(a container has its own), so the figure is what the frameworks say they hold."
        )
    if not snapshot.available:
        return f"Not known: {snapshot.message or 'NVML cannot be read'}"
    on = snapshot.by_uuid()
    unclaimed = sum(attribution.foreign_pids.get(g, 0) for g in slice_.gpus)
    where = ", ".join(str(on[g].index) for g in slice_.gpus if g in on) or "?"
    if unclaimed:
        return (
            f"Not known yet: NVML shows {unclaimed} process{'es' if unclaimed > 1 else ''} on GPU {where} "
            f"that no slice claims, which may be this {holder}'s under process ids NVML cannot match "
            "(a container); its use shows once its frameworks report it."
        )
    return f"Not known: GPU {where} of this slice is not in NVML's list now."


def usage_of(
    slice_id: str, gpus: tuple[str, ...], capacity: int, attribution: Attribution, snapshot: Snapshot, reported: int | None
) -> tuple[dict[str, int], int | None, int | None, str]:
    """The rule every view applies to one slice: ``(bytes per GPU, bytes in all, utilisation,
    source)``. NVML's figure for the slice's processes when it has one (``measured``); else the
    frameworks' own figure (``reported``, when NVML's pids do not match, as in a container); 0
    when NVML sees no process on the slice's GPUs that could be the slice's; else unknown.
    ``capacity`` is what the slice's GPUs hold: a larger report is not a measurement."""
    used = attribution.used.get(slice_id)
    if used:
        utils = attribution.utilization.get(slice_id, {})
        util = round(sum(utils.values()) / len(gpus)) if utils and gpus else None
        return dict(used), sum(used.values()), util, MEASURED
    if reported is not None and reported > capacity:
        reported = None
    if reported is not None and reported > 0:
        return {}, reported, None, REPORTED
    # Nothing matched. If NVML sees no unclaimed process on the slice's GPUs, the slice truly
    # uses nothing; if it does, those may be this slice's under pids we cannot map.
    on = snapshot.by_uuid()
    if snapshot.available and all(g in on and not attribution.foreign_pids.get(g) for g in gpus):
        return {}, 0, 0, MEASURED
    if reported is not None:
        return {}, reported, None, REPORTED
    return {}, None, None, NO_USAGE
