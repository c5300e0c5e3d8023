"""The GPU dashboard's history: an hour (``dashboard_seconds``) of every GPU's and every live
slice's figures, one point per ``dashboard_step`` seconds, and the slices that ended in that hour
(a ``jupyter vgpu run`` that lived 3 s is an event on the dashboard's timeline, not a chart).

The sidebar's few minutes of sparkline are single samples; a dashboard point sums up the ticks
of its step instead, so a spike between two points is not lost: memory is the most seen (what
could not have been handed out), the rest the mean. Kept in memory only (a server restart starts
afresh), a few hundred tuples per GPU and per slice.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ..slices.records import Slice
from .monitor import Sample

#: What one GPU point holds, in the REST API's names (docs/rest.md, "GET /api/vgpu/history").
GPU_FIELDS = ("used", "reserved", "util", "power", "temp", "pcie_tx", "pcie_rx")
#: What the largest value of the step stands for (memory that was held); the rest: the mean.
_MOST = {"used", "reserved"}
SLICE_FIELDS = ("used", "util")


@dataclass
class _Step:
    """The ticks of one step so far: per field, the values seen (None: not known)."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, figures: dict[str, float | int | None]) -> None:
        for name, value in figures.items():
            if value is not None:
                self.values.setdefault(name, []).append(float(value))

    def point(self, t: float, names: tuple[str, ...]) -> tuple[float | None, ...]:
        out: list[float | None] = [t]
        for name in names:
            seen = self.values.get(name)
            if not seen:
                out.append(None)
            elif name in _MOST:
                out.append(max(seen))
            else:
                out.append(round(sum(seen) / len(seen), 1))
        return tuple(out)


#: At most this many ended slices are remembered (the oldest go first).
MAX_ENDED = 200


@dataclass(frozen=True)
class EndedSlice:
    """A slice the monitor saw and then saw no more: from ``slice.created`` until ``end`` (the
    first sample without it), its most memory seen ``peak`` (None: never known)."""

    slice: Slice
    last_seen: float
    end: float
    peak: int | None


@dataclass
class _Seen:
    slice: Slice
    last_seen: float
    peak: int | None = None


class DashboardHistory:
    """Points of ``(t, *GPU_FIELDS)`` per GPU uuid and ``(t, *SLICE_FIELDS)`` per slice id; the
    slices that ended within ``seconds``, oldest first."""

    def __init__(self, seconds: float = 3600.0, step: float = 10.0) -> None:
        self.seconds = seconds
        self.step = step
        self.length = max(1, math.ceil(seconds / step))
        self.gpus: dict[str, deque[tuple[float | None, ...]]] = {}
        self.slices: dict[str, deque[tuple[float | None, ...]]] = {}
        self._gpu_steps: dict[str, _Step] = {}
        self._slice_steps: dict[str, _Step] = {}
        self._step_started: float | None = None
        self.ended: deque[EndedSlice] = deque(maxlen=MAX_ENDED)
        self._seen: dict[str, _Seen] = {}

    def add(self, sample: Sample) -> None:
        """Count one tick; close the step (one point per GPU and slice) when it is over."""
        if self.seconds <= 0:
            return
        if sample.message is not None and not sample.occupancy.gpus:
            return  # a failed tick knows nothing: a gap, not zeros
        if self._step_started is None:
            self._step_started = sample.taken_at
        for entry in sample.occupancy.gpus:
            gpu = entry.gpu
            self._gpu_steps.setdefault(entry.uuid, _Step()).add(
                {
                    "used": gpu.memory_used,
                    "reserved": entry.reserved,
                    "util": gpu.utilization,
                    "power": gpu.power_draw,
                    "temp": gpu.temperature,
                    "pcie_tx": gpu.pcie_tx,
                    "pcie_rx": gpu.pcie_rx,
                }
            )
        for usage in sample.slices:
            self._slice_steps.setdefault(usage.slice.id, _Step()).add({"used": usage.memory_used, "util": usage.utilization})
        self._note_ends(sample)
        if sample.taken_at - self._step_started >= self.step - 1e-6 or not self.gpus:
            self._close(sample)

    def _note_ends(self, sample: Sample) -> None:
        """Remember each live slice, and as ended each one a good sample no longer lists."""
        t = sample.taken_at
        for usage in sample.slices:
            seen = self._seen.get(usage.slice.id)
            if seen is None:
                seen = self._seen[usage.slice.id] = _Seen(usage.slice, max(t, usage.slice.created))
            # A sample is stamped before it reads the ledger: a slice made in between was seen
            # no earlier than it was made (an ended event never reads last_seen < created).
            seen.slice, seen.last_seen = usage.slice, max(t, usage.slice.created)  # a resize changes the record
            if usage.memory_used is not None:
                seen.peak = max(usage.memory_used, seen.peak or 0)
        if sample.message is not None:
            return  # a failed tick says nothing about what has gone
        live = {u.slice.id for u in sample.slices}
        for sid in [sid for sid in self._seen if sid not in live]:
            gone = self._seen.pop(sid)
            self.ended.append(EndedSlice(gone.slice, gone.last_seen, max(t, gone.last_seen), gone.peak))
        while self.ended and self.ended[0].end < t - self.seconds:
            self.ended.popleft()

    def _close(self, sample: Sample) -> None:
        t = sample.taken_at
        for uuid, step in self._gpu_steps.items():
            self.gpus.setdefault(uuid, deque(maxlen=self.length)).append(step.point(t, GPU_FIELDS))
        for sid, step in self._slice_steps.items():
            self.slices.setdefault(sid, deque(maxlen=self.length)).append(step.point(t, SLICE_FIELDS))
        self._gpu_steps.clear()
        self._slice_steps.clear()
        self._step_started = t
        if sample.message is None:  # forget what has gone (a failed tick says nothing about it)
            live_slices = {u.slice.id for u in sample.slices}
            for sid in [s for s in self.slices if s not in live_slices]:
                del self.slices[sid]
            live_gpus = {e.uuid for e in sample.occupancy.gpus}
            for uuid in [g for g in self.gpus if g not in live_gpus]:
                del self.gpus[uuid]


def points(history: deque[tuple[float | None, ...]] | None, names: tuple[str, ...], since: float) -> list[dict[str, float | None]]:
    """The points after ``since`` as JSON objects (``{"t": ..., "used": ..., ...}``)."""
    out = []
    for point in history or ():
        t = point[0]
        if t is not None and t > since:
            out.append({"t": t, **{name: _number(value) for name, value in zip(names, point[1:])}})
    return out


def _number(value: float | None) -> float | int | None:
    """Whole figures as ints (bytes, per cent), the rest as they are."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value
