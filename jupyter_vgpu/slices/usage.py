"""What each slice uses right now, worked out from one inventory snapshot.

Which GPU process belongs to which slice is :class:`jupyter_vgpu.slices.holders.ProcessOwners`
(the monitor keeps one across ticks). Usage is ``measured`` when NVML shows the slice's processes, ``reported`` when it cannot (NVML
reports host pids, which a kernel in a container does not have) and the kernel's own report
says what its frameworks hold, and ``none`` when neither can say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..gpus import Snapshot
from ..slices import Slice
from ..slices.holders import Attribution
from ..slices.reports import read_report, report_bytes, report_path

#: A slice at or above this share of its reservation is "near" its limit.
NEAR = 0.9

MEASURED = "measured"
REPORTED = "reported"
NO_USAGE = "none"


class ReportCache:
    """The kernels' own reports (``slices.reports``), re-read only when a file changes."""

    def __init__(self, ledger_path: str | Path) -> None:
        self.ledger_path = Path(ledger_path)
        self._cache: dict[str, tuple[tuple[float, int], dict[str, Any] | None]] = {}
        self._paths: dict[str, str] = {}  # building paths costs more than the stat itself

    def get(self, slice_id: str) -> dict[str, Any] | None:
        path = self._paths.get(slice_id)
        if path is None:
            path = self._paths[slice_id] = str(report_path(self.ledger_path, slice_id))
        try:
            st = os.stat(path)
        except OSError:
            self._cache.pop(slice_id, None)
            return None
        stamp = (st.st_mtime, st.st_size)
        cached = self._cache.get(slice_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        report = read_report(self.ledger_path, slice_id)
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

    @property
    def memory_reserved_total(self) -> int:
        return sum(self.slice.memory)

    @property
    def state(self) -> str:
        """``ok``, ``near`` (>= 90% of the reservation), ``over`` or ``unknown``."""
        if self.memory_used is None:
            return "unknown"
        reserved = self.memory_reserved_total
        if self.memory_used > reserved:
            return "over"
        if reserved and self.memory_used >= NEAR * reserved:
            return "near"
        return "ok"

    def overshoot(self) -> float:
        """How far usage exceeds the reservation, as a share of it (0 when within).

        Measured usage is compared GPU by GPU (a slice holds the same share on each GPU);
        reported usage, which has no per-GPU split, against the whole reservation.
        """
        if self.memory_used is None:
            return 0.0
        if self.used_by_gpu:
            worst = 0.0
            for gpu, reserved in zip(self.slice.gpus, self.slice.memory):
                if reserved:
                    worst = max(worst, self.used_by_gpu.get(gpu, 0) / reserved - 1)
            return max(0.0, worst)
        total = self.memory_reserved_total
        return max(0.0, self.memory_used / total - 1) if total else 0.0


def slice_usage(
    slice_: Slice, pid: int | None, attribution: Attribution, snapshot: Snapshot, report: dict[str, Any] | None
) -> SliceUsage:
    """Combine NVML's attribution and the kernel's report into one figure for ``slice_``."""
    used = attribution.used.get(slice_.id)
    if used:
        utils = attribution.utilization.get(slice_.id, {})
        util = round(sum(utils.values()) / len(slice_.gpus)) if utils and slice_.gpus else None
        return SliceUsage(slice_, pid, dict(used), sum(used.values()), util, MEASURED, report)
    reported = report_bytes(report.get("memory_used")) if report else None
    if reported is not None and reported > sum(slice_.memory_total):
        reported = None  # more than the slice's GPUs hold: not a measurement
    if reported is not None and reported > 0:
        return SliceUsage(slice_, pid, {}, reported, None, REPORTED, report)
    # Nothing matched. If NVML sees no unclaimed process on the slice's GPUs, the slice truly
    # uses nothing; if it does, those may be this kernel's under pids we cannot map.
    gpus = snapshot.by_uuid()
    if snapshot.available and all(g in gpus and not attribution.foreign_pids.get(g) for g in slice_.gpus):
        return SliceUsage(slice_, pid, {}, 0, 0, MEASURED, report)
    if reported is not None:
        return SliceUsage(slice_, pid, {}, reported, None, REPORTED, report)
    return SliceUsage(slice_, pid, {}, None, None, NO_USAGE, report)
