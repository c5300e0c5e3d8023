"""The usage monitor: one sampling loop for the whole server.

Each tick reads the inventory once (one NVML pass for every GPU and process), the ledger once,
and maps GPU processes to slices. All of that blocks (NVML, SQLite, psutil), so it runs on the
monitor's own single worker thread; the event loop only receives the finished :class:`Sample`,
appends it to a few minutes of history and hands it to listeners (the watchdog).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..errors import SliceNotFound, VGPUError
from ..gpus import Snapshot
from ..launch.elsewhere import Elsewhere, Unlisted
from ..launch.launchers import launcher_of, made, report_folder
from ..ledger import Ledger
from ..slices import Occupancy, Slice, Waiter, occupancy_of
from ..slices.holders import Attribution, ProcessOwners
from ..slices.reports import sweep_ended
from ..slices.usage import ReportCache, SliceUsage, slice_usage
from ..units import shorten
from .rebooking import Rebooking

T = TypeVar("T")

#: One point of history as the REST replies show it: ``{"t": time, "used": memory used in bytes or
#: None, "util": utilisation % or None}``, made once when it is recorded and shared by every reply
#: (nobody changes it): a reply with 64 slices' full history holds 3,840 of them.
Point = dict[str, Any]
#: Every this many reap intervals the reaper runs even if every holder pid still exists.
FULL_REAP = 6

Listener = Callable[["Sample"], Awaitable[None]]


@dataclass(frozen=True)
class Sample:
    """Everything one tick saw. ``message`` says why it is empty when something failed."""

    taken_at: float
    snapshot: Snapshot
    occupancy: Occupancy
    slices: tuple[SliceUsage, ...]
    waiting: tuple[Waiter, ...]
    message: str | None = None
    #: This server's kernels that run elsewhere (launch.elsewhere), by their launchers.
    elsewhere: tuple[Elsewhere, ...] = ()
    #: Kernels whose slice could not be booked again after the ledger was reset, with what to
    #: tell them (each in one sample only; the server extension leaves them the notice).
    unbooked: tuple[tuple[SliceUsage, str], ...] = ()

    def find(self, slice_id: str) -> SliceUsage | None:
        return next((u for u in self.slices if u.slice.id == slice_id), None)

    def for_kernel(self, kernel_id: str) -> SliceUsage | None:
        return next((u for u in self.slices if u.slice.holder_kind == "kernel" and u.slice.holder == kernel_id), None)


class UsageMonitor:
    """Samples GPU usage per slice every ``interval`` seconds.

    ``kernel_pids`` is called on the event loop before each tick and returns the current pid
    of each kernel this server runs (kernel id -> pid); a kernel slice is attributed through
    that pid, which is right even in the moment between a restart and the ledger learning
    the new pid. ``ledger`` may be None when it could not be opened; ``problem`` says why.
    """

    def __init__(
        self,
        ledger: Ledger | None,
        *,
        interval: float = 2.0,
        history_seconds: float = 300.0,
        history_points: int = 60,
        reap_interval: float = 10.0,
        kernel_pids: Callable[[], Mapping[str, int | None]] = dict,
        log: logging.Logger | None = None,
        problem: str | None = None,
        simulated: bool = False,
    ) -> None:
        self.ledger = ledger
        self.simulated = simulated if ledger is None else ledger.inventory.simulated
        self.uid = os.getuid()  # whose slices are "yours" in the views
        self.server_pid = os.getpid()  # the keeper of this server's kernels' slices
        self.interval = interval
        # A few minutes at most ``history_points`` points: a sparkline needs no more, and every
        # point is sent to every poll of every open sidebar.
        self.history_step = max(interval, history_seconds / max(1, history_points))
        self.history_length = max(1, math.ceil(history_seconds / self.history_step))
        self._last_point = -math.inf
        self.reap_every = max(1, round(reap_interval / interval))
        self.kernel_pids = kernel_pids
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.problem = problem
        self.latest: Sample | None = None
        self.slice_history: dict[str, deque[Point]] = {}
        self.gpu_history: dict[str, deque[Point]] = {}
        self.slice_peak: dict[str, int] = {}  # the most memory each live slice was seen using
        self.listeners: list[Listener] = []
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jupyter-vgpu-monitor")
        self._owners = ProcessOwners()
        self._reports = ReportCache(ledger.path, report_folder) if ledger is not None else None
        self._ticks = 0
        self._reap_soon = False
        self._known_pids: list[int] = []
        self._broken: set[str] = set()  # slices whose usage failed once (logged once)
        self._orphans: set[str] = set()  # kernel slices of kernels this server did not run, last tick
        #: Books this server's kernels' slices again after a reset (or a split), and keeps who was not.
        self._rebooking = Rebooking(ledger, uid=self.uid, server_pid=self.server_pid, log=self.log) if ledger is not None else None
        self._last_error: str | None = None
        self._elsewhere_problems: dict[str, str] = {}  # launcher -> why its kernels could not be listed
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None

    # -- one tick (worker thread) -----------------------------------------------------------
    def collect(self, kernel_pids: Mapping[str, int | None] | None = None) -> Sample:
        """Take one sample. Blocking: call it on :attr:`executor`, never on the event loop."""
        now = time.time()
        if self.ledger is None:
            return _empty(now, self.problem or "The jupyter-vgpu ledger is not available.", simulated=self.simulated)
        try:
            split = self.ledger.check_split()  # says so in the log and reopens if this process lost the one book
            snapshot = self.ledger.inventory.snapshot(telemetry=True)
            reaping = self._reap_due()
            if reaping:
                for dead in self.ledger.reap():
                    self.log.info(
                        "jupyter-vgpu: freed slice %s of %s, which has ended.", dead.id, dead.describe_holder()
                    )
            assert self._rebooking is not None
            slices = self._rebooking.step(self._free_given_up(self.ledger.slices(), kernel_pids), kernel_pids, split, snapshot)
            if reaping:  # what ended slices left in this user's reports folder (a SIGKILLed server's kernels)
                live = {s.id for s in slices} | self._rebooking.unbooked()  # a kernel told so reads its notice there
                for swept in sweep_ended(self.ledger.path, live, now):
                    self.log.info("jupyter-vgpu: removed the reports of slice %s, which has ended.", swept)
            waiting = tuple(self.ledger.waiting())
        except VGPUError as error:
            return _empty(now, str(error), simulated=self.simulated)
        except Exception as error:  # a bug: say so in the API rather than answer 500 forever
            self.log.exception("jupyter-vgpu: reading the GPUs and the ledger failed")
            return _empty(now, f"jupyter-vgpu could not read the GPUs and the ledger: {shorten(error)}.", simulated=self.simulated)
        finally:
            self._ticks += 1
        self._known_pids = [s.pid for s in slices if s.pid]
        pids = kernel_pids or {}
        holder_pids = {s.id: (pids.get(s.holder) or s.pid) if s.holder_kind == "kernel" else s.pid for s in slices}
        attribution = self._owners.attribute(snapshot, holder_pids)
        assert self._reports is not None
        self._reports.forget({s.id for s in slices})
        usages = tuple(self._usage(s, holder_pids[s.id], attribution, snapshot) for s in slices)
        occupancy = occupancy_of(snapshot, slices, attribution)
        return Sample(now, snapshot, occupancy, usages, waiting, snapshot.message, self._elsewhere())

    def _elsewhere(self) -> tuple[Elsewhere, ...]:
        """This server's kernels that run elsewhere, as the launchers this process made say them
        (a launcher no kernel of it used is never made: nothing is asked of its engine)."""
        rows: list[Elsewhere] = []
        for launcher in made():
            try:
                rows += launcher.rows(os.environ)
            except VGPUError as error:
                if self._elsewhere_problems.get(launcher.name) != str(error):
                    self.log.warning("jupyter-vgpu: cannot list the kernels of launcher %s: %s", launcher.name, error)
                self._elsewhere_problems[launcher.name] = str(error)
                if isinstance(error, Unlisted):  # this server's kernels as last seen
                    rows += error.rows
                elif self.latest is not None:
                    rows += [r for r in self.latest.elsewhere if r.launcher == launcher.name]
            else:
                self._elsewhere_problems.pop(launcher.name, None)
        return tuple(rows)

    def _usage(self, s: Slice, pid: int | None, attribution: Attribution, snapshot: Snapshot) -> SliceUsage:
        """One slice's usage; a slice whose figures cannot be read shows none, and never stops
        the tick for every other slice (the watchdog and the reaper run on it)."""
        assert self._reports is not None
        try:
            return slice_usage(s, pid, attribution, snapshot, self._reports.get(s))
        except Exception:
            if s.id not in self._broken:
                self._broken.add(s.id)
                self.log.exception("jupyter-vgpu: the usage of slice %s could not be read; it shows none", s.id)
            return slice_usage(s, pid, Attribution(), snapshot, None)

    def _free_given_up(self, slices: list[Slice], kernel_pids: Mapping[str, int | None] | None) -> list[Slice]:
        """Free the kernel slices this server holds or keeps for kernel ids it does not manage
        (running or starting): a kernel that died and that jupyter_server gave up restarting (it
        calls no provisioner cleanup then), and a start that failed while the ledger still
        granted it (a broker answer lost to a timeout). A slice must be found so on two ticks
        in a row, so a start is never caught between its reservation and its registration."""
        if kernel_pids is None:
            return slices
        kept = []
        suspects = set()
        for s in slices:
            ours = s.keeper_pid == self.server_pid or s.pid == self.server_pid
            orphan = (
                s.holder_kind == "kernel"
                and ours
                and s.holder not in kernel_pids
                and (s.pid == self.server_pid or not launcher_of(s.labels).alive(s.pid, s.pid_start, s.pid_stamp))
            )
            if not orphan:
                kept.append(s)
                continue
            suspects.add(s.id)
            if s.id not in self._orphans:
                kept.append(s)
                continue
            try:
                assert self.ledger is not None
                self.ledger.release(s.id)
                self.log.info(
                    "jupyter-vgpu: freed slice %s of %s: this server holds it for a kernel it does not run.",
                    s.id,
                    s.describe_holder(),
                )
            except SliceNotFound:
                pass  # freed meanwhile
        self._orphans = suspects
        return kept

    def _reap_due(self) -> bool:
        """Reap when asked to, or every ``reap_every`` ticks if a holder pid has gone; and
        every ``FULL_REAP`` such periods regardless, for what only a full check sees (a zombie,
        a reused pid). A full reap checks every holder's start time (a few ms for 64 slices)
        in a write transaction; the quick check costs microseconds."""
        tick = self._ticks
        if self._reap_soon or tick % (self.reap_every * FULL_REAP) == 0:
            self._reap_soon = False
            return True
        return tick % self.reap_every == 0 and not all(_exists(pid) for pid in self._known_pids)

    # -- on the event loop ------------------------------------------------------------------
    async def refresh(self) -> Sample:
        """Take a sample now (off the loop), record its history and tell the listeners."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            pids = dict(self.kernel_pids())
            sample = await self.call(self.collect, pids)
            if self._rebooking is not None and (untold := self._rebooking.take_untold()):
                sample = replace(sample, unbooked=tuple(untold))
            self._record(sample)
            self.latest = sample
        if sample.message != self._last_error:
            self._last_error = sample.message
            if sample.message:
                self.log.warning("jupyter-vgpu: %s", sample.message)
        for listener in list(self.listeners):
            try:
                await listener(sample)
            except Exception:
                self.log.exception("jupyter-vgpu: a usage listener failed")
        return sample

    async def current(self) -> Sample:
        """The latest sample, taking the first one if none exists yet."""
        return self.latest if self.latest is not None else await self.refresh()

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run blocking ``function`` on the monitor's worker thread (after any tick in progress)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    def reap_soon(self) -> None:
        """Free dead holders' slices on the next tick (e.g. after the watchdog shut a kernel down)."""
        self._reap_soon = True

    def _record(self, sample: Sample) -> None:
        for usage in sample.slices:  # the peak from every sample, and the frameworks' own peak
            seen = [v for v in (usage.memory_used, (usage.report or {}).get("peak_memory_used")) if isinstance(v, int)]
            if seen:
                self.slice_peak[usage.slice.id] = max([*seen, self.slice_peak.get(usage.slice.id, 0)])
        if sample.message is None:
            live = {u.slice.id for u in sample.slices}
            for sid in [s for s in self.slice_peak if s not in live]:
                del self.slice_peak[sid]
        if sample.taken_at - self._last_point < self.history_step - self.interval / 2:
            return
        self._last_point = sample.taken_at
        for usage in sample.slices:
            history = self.slice_history.setdefault(usage.slice.id, deque(maxlen=self.history_length))
            history.append({"t": sample.taken_at, "used": usage.memory_used, "util": usage.utilization})
        for entry in sample.occupancy.gpus:
            history = self.gpu_history.setdefault(entry.uuid, deque(maxlen=self.history_length))
            history.append({"t": sample.taken_at, "used": entry.gpu.memory_used, "util": entry.gpu.utilization})
        if sample.message is None:  # a failed tick says nothing about which slices ended
            live = {u.slice.id for u in sample.slices}
            for sid in [s for s in self.slice_history if s not in live]:
                del self.slice_history[sid]

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("jupyter-vgpu: the usage monitor's tick failed")
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        """Start sampling on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="jupyter-vgpu-monitor")

    async def stop(self) -> None:
        """Stop sampling, wait for a tick in progress, and close the ledger."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self.executor.shutdown(wait=True)
        if self.ledger is not None:
            self.ledger.close()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    return True


def _empty(now: float, message: str, *, simulated: bool = False) -> Sample:
    snapshot = Snapshot(gpus=(), simulated=simulated, available=False, message=message, taken_at=now)
    return Sample(now, snapshot, Occupancy(snapshot, ()), (), (), message)
