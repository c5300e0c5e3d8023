"""Idle slices go back to people who wait: GPU-aware reclaim, with notice (docs/rest.md).

jupyter_server's ``cull_idle_timeout`` shuts kernels down by the clock alone, for everybody; this
frees a GPU slice when, and only when, it helps someone. After every sample, for each slice held
by a kernel of this server:

* **idle** means the kernel has run nothing (its execution state is ``idle`` and no message came
  from it: jupyter_server's ``last_activity``) and its GPU utilisation stayed 0, since
  :attr:`IdleReclaimer.idle_since` (never before the slice was made, the server started, or the
  owner said "Keep it"). ``jupyter vgpu run`` commands count as busy while they live, kernels of
  other servers are not this server's to judge, and a slice of no GPU is never touched;
* once a slice has been idle ``after`` seconds and someone needs the room (``mode`` "waiting": a
  request waits in line, or a kernel start was refused in the last ``demand_seconds``; "always":
  regardless), the owner gets a notice: the kernel prints it at its next cell, the REST slice
  carries ``idle_notice`` (the sidebar's notification with "Keep it", the status bar's
  countdown), and the server logs it;
* any activity during the notice (a cell, a message from the kernel, GPU use, "Keep it":
  ``POST /api/vgpu/slices/<id>/keep``) cancels it; otherwise, ``notice`` seconds later, the kernel
  is shut down through the kernel manager (its notebook stays), the slice is freed at once and
  the first waiter gets it. Each reclaim is a watchdog event of action ``idle`` and a log line
  naming who waited.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jupyter_core.utils import ensure_async

from ..slices.reports import write_idle
from ..slices.usage import SliceUsage
from ..units import format_duration, shorten
from .monitor import Sample
from .watchdog import Watchdog, WatchdogEvent, leave_notice

MODES = ("waiting", "always")
#: jupyter_server's execution states of a kernel that is doing something.
ACTIVE_STATES = frozenset({"busy", "restarting", "autorestarting"})
#: How often an unchanged idle time is confirmed in its file (readers take one older than
#: slices.reports.IDLE_STALE_SECONDS as a server that has gone).
REWRITE_SECONDS = 30.0


@dataclass(frozen=True)
class IdleNotice:
    """A reclaim announced to the slice's owner: when it happens unless they act."""

    slice_id: str
    given: float
    deadline: float
    waiting: str  # who needs the room, in words

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"given": self.given, "deadline": self.deadline, "seconds_left": max(0.0, self.deadline - now), "for": self.waiting}


class IdleReclaimer:
    """Call :meth:`check` with every sample; :meth:`idle_seconds` and :meth:`notice` for the views."""

    def __init__(
        self,
        kernel_manager: Any,
        watchdog: Watchdog,
        *,
        after: float = 0.0,
        notice: float = 300.0,
        mode: str = "waiting",
        demand_seconds: float = 600.0,
        refused_since: Callable[[float], list[dict[str, Any]]] = lambda t: [],
        on_reclaim: Callable[[], None] | None = None,
        ledger_path: str | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"idle_reclaim_mode {shorten(mode)} is not one of {', '.join(MODES)}.")
        self.kernel_manager = kernel_manager
        self.watchdog = watchdog
        self.after = after
        self.notice_seconds = notice
        self.mode = mode
        self.demand_seconds = demand_seconds
        self.refused_since = refused_since
        self.on_reclaim = on_reclaim
        self.ledger_path = ledger_path
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.started = time.time()
        self.idle_since: dict[str, float] = {}  # slice id -> when it last did anything
        self.notices: dict[str, IdleNotice] = {}
        self._kept: dict[str, float] = {}  # slice id -> when its owner last said "Keep it"
        self._written: dict[str, tuple[float, float]] = {}  # slice -> (idle since, written at) in its idle file
        self._reclaiming: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- what the views show ----------------------------------------------------------------
    def idle_seconds(self, slice_id: str, now: float | None = None) -> float | None:
        since = self.idle_since.get(slice_id)
        return None if since is None else max(0.0, (now or time.time()) - since)

    def notice(self, slice_id: str, now: float | None = None) -> dict[str, Any] | None:
        found = self.notices.get(slice_id)
        return found.to_dict(now or time.time()) if found else None

    def keep(self, slice_id: str) -> bool:
        """The owner's "Keep it": counts as activity. True when a notice was cancelled."""
        now = time.time()
        self._kept[slice_id] = now
        if slice_id in self.idle_since:
            self.idle_since[slice_id] = now
        cancelled = self.notices.pop(slice_id, None) is not None
        if cancelled:
            self.log.info("jupyter-vgpu: slice %s kept by its owner; it is not reclaimed.", slice_id)
        return cancelled

    # -- every sample ------------------------------------------------------------------------
    async def check(self, sample: Sample) -> None:
        if sample.message is not None:
            return  # a failed tick says nothing about activity
        now = sample.taken_at
        judged: list[SliceUsage] = []
        for usage in sample.slices:
            sid = usage.slice.id
            since = self._activity(usage, now)
            if since is None:
                self.idle_since.pop(sid, None)
                self.notices.pop(sid, None)
                continue
            judged.append(usage)
            previous = self.idle_since.get(sid)
            self.idle_since[sid] = since
            if sid in self.notices and previous is not None and since > previous:
                self.notices.pop(sid)  # a cell, a message, GPU use: kept
                self.log.info("jupyter-vgpu: %s did something during its idle notice; it is not reclaimed.", usage.slice.describe_holder())
            self._write_idle(sid, since)
        live = {u.slice.id for u in judged}
        for gone in [s for s in list(self.idle_since) if s not in live]:
            self.idle_since.pop(gone, None)
            self.notices.pop(gone, None)
            self._kept.pop(gone, None)
            self._written.pop(gone, None)
        if self.after > 0:
            await self._reclaim_one(judged, now, sample)

    async def _reclaim_one(self, judged: list[SliceUsage], now: float, sample: Sample) -> None:
        """One slice at a time, the longest idle first: a notice, then (if nothing changed) its
        reclaim; the next only when someone still needs the room."""
        need = self._demand(sample, now)
        if need is None:
            if self.notices:
                self.notices.clear()  # nobody needs the room any more
            return
        if self._reclaiming:
            return
        noticed = [u for u in judged if u.slice.id in self.notices]
        if noticed:
            await self._consider(noticed[0], now - self.idle_since[noticed[0].slice.id], now, need)
            return
        due = [u for u in judged if now - self.idle_since[u.slice.id] >= self.after]
        if due:
            longest = min(due, key=lambda u: self.idle_since[u.slice.id])
            await self._consider(longest, now - self.idle_since[longest.slice.id], now, need)

    def _activity(self, usage: SliceUsage, now: float) -> float | None:
        """When the slice's kernel last did anything; None when it is not this reclaimer's to
        judge (a command, another server's kernel, no GPU memory) or it is busy now."""
        s = usage.slice
        if s.holder_kind != "kernel" or not sum(s.memory) or s.holder not in self.kernel_manager:
            return None
        try:
            kernel = self.kernel_manager.get_kernel(s.holder)
        except KeyError:
            return None
        latest = max(s.created, self.started, self._kept.get(s.id, 0.0))
        state = getattr(kernel, "execution_state", None)
        # "starting" stays until a client first asks the kernel something: a kernel nobody has
        # talked to since it started is as idle as one that finished its last cell.
        if state in ACTIVE_STATES or (usage.utilization or 0) > 0:
            return now  # running a cell, restarting, or using the GPU: active now
        activity = getattr(kernel, "last_activity", None)
        if isinstance(activity, datetime):
            latest = max(latest, activity.timestamp())
        previous = self.idle_since.get(s.id)
        return max(latest, previous or latest)

    def _demand(self, sample: Sample, now: float) -> str | None:
        """Who needs the room, in words; None when nobody does (mode "waiting")."""
        if sample.waiting:
            first = sample.waiting[0]
            holder = first.labels.get("path") or (_program(first.holder) if first.holder_kind == "command" else "a kernel")
            return f"{len(sample.waiting)} waiting in line (first: {holder}, {first.request.describe()})"
        refused = self.refused_since(now - self.demand_seconds)
        if refused:
            return f"{len(refused)} kernel start{'s' if len(refused) > 1 else ''} refused in the last {self.demand_seconds / 60:.0f} min"
        return "the admin's policy (reclaim always)" if self.mode == "always" else None

    async def _consider(self, usage: SliceUsage, idle_for: float, now: float, need: str) -> None:
        sid = usage.slice.id
        found = self.notices.get(sid)
        if found is None:
            notice = IdleNotice(sid, now, now + self.notice_seconds, need)
            self.notices[sid] = notice
            holder = usage.slice.describe_holder()
            message = (
                f"{holder} has been idle for {format_duration(idle_for)} while {need}: the server shuts it down at "
                f"{time.strftime('%H:%M:%S', time.localtime(notice.deadline))} to free its GPU slice, unless it runs "
                "something or its owner keeps it."
            )
            self.log.info("jupyter-vgpu: %s", message)
            await self._tell(usage, "ahead", message)
            if self.notice_seconds > 0:
                return
            found = notice
        if now < found.deadline:
            return
        self.notices.pop(sid, None)
        self._reclaiming.add(sid)
        task = asyncio.get_running_loop().create_task(self._reclaim(usage, idle_for, found.waiting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reclaim(self, usage: SliceUsage, idle_for: float, waiting: str) -> None:
        s = usage.slice
        words = f"{s.describe_holder()} was idle for {format_duration(idle_for)} while {waiting}"
        ok = True
        try:
            await ensure_async(self.kernel_manager.shutdown_kernel(s.holder))
            message = f"{words}: shut down to free its GPU slice {s.id} (the admin's idle reclaim; the notebook is kept)."
        except Exception as error:
            ok = False
            message = f"{words}: could not be shut down ({shorten(error)})."
        event = WatchdogEvent(
            time.time(), s.id, s.holder, "idle", ok, message, path=s.labels.get("path"),
            memory_used=usage.memory_used, memory_reserved=usage.memory_reserved_total,
        )  # fmt: skip
        self.watchdog.record(event)
        (self.log.warning if ok else self.log.error)("jupyter-vgpu: %s", message)
        if ok and self.on_reclaim is not None:
            self.on_reclaim()
        self._reclaiming.discard(s.id)

    async def _tell(self, usage: SliceUsage, stage: str, message: str) -> None:
        """The kernel prints the notice at its next cell (which also keeps it)."""
        await leave_notice(self.ledger_path, usage, "idle", stage, message, self.log)

    def _write_idle(self, slice_id: str, since: float) -> None:
        """Where `jupyter vgpu status` and %vgpu read how long the slice has been idle."""
        written = self._written.get(slice_id)
        now = time.time()
        if self.ledger_path is None or (written and abs(written[0] - since) < 1.0 and now - written[1] < REWRITE_SECONDS):
            return
        self._written[slice_id] = (since, now)
        try:
            write_idle(self.ledger_path, slice_id, since)
        except OSError:
            pass  # the views then show no idle time; nothing else depends on it

    async def stop(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _program(command: str) -> str:
    """A waiting command by its program's name (``python train.py`` for a long command line)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if not words:
        return "a command"
    shown = " ".join([os.path.basename(words[0]), *words[1:2]])
    return f"`{shown}{' ...' if len(words) > 2 else ''}`"
