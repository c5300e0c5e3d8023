"""Idle slices go back to people who wait: GPU-aware reclaim, with notice (docs/rest.md). The
engine's second source, asked after the bursts.

jupyter_server's ``cull_idle_timeout`` shuts kernels down by the clock alone, for everybody; this
frees a GPU slice when, and only when, it helps someone. After every sample, for each slice held
by a kernel of this server:

* **idle** means the kernel has run no cell (:mod:`..activity`: no execute request a person sent;
  a browser reconnecting, kernel_info, comm_info, the debugger's requests and status traffic are
  not activity) and its GPU utilisation stayed 0, since its ``idle_since`` on the notice board
  (never before the slice was made, the server started, or the owner said "Keep it"). ``jupyter
  vgpu run`` commands count as busy while they live, kernels of other servers are not this
  server's to judge, and a slice of no GPU is never touched;
* a slice idle ``after`` seconds is reclaimed only for someone it **lets in** (``mode``
  "waiting"): a want the bursts did not serve (a request waiting in line, or a kernel start
  refused in the last ``demand_seconds``) that does not fit now and would fit with the slice gone
  (together with those already under notice): on its pinned GPU, the GPUs its policy allows, its
  size, its number of GPUs (:func:`.plan.plan` with :func:`.plan.without`). A waiter that freeing
  idle slices cannot help (pinned to a GPU its own command fills, say) shuts nobody down. One
  user's places in line and refused starts cause at most one reclaim (the slices one request
  needs) every ``per_user_seconds``. With ``mode`` "always", an idle slice nobody's request needs
  is reclaimed too;
* the owner of each slice to be reclaimed gets a notice: the kernel prints it at its next cell,
  the REST slice carries ``idle_notice`` (the sidebar's notification with "Keep it", the status
  bar's countdown), and the server logs it;
* any activity during the notice (a cell, a message from the kernel, GPU use, "Keep it":
  ``POST /api/vgpu/slices/<id>/keep``) cancels it; otherwise, ``notice`` seconds later, the kernel
  is shut down through the kernel manager (its notebook stays), the slice is freed at once and
  the waiter gets it (the slices one request needs go together, once all their notices ran out).
  Each reclaim is a watchdog event of action ``idle`` and a log line naming who waited.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from jupyter_core.utils import ensure_async

from ...slices.reports import write_idle
from ...slices.usage import SliceUsage
from ...units import format_duration, shorten
from ..activity import ExecutionWatch
from ..monitor import Sample
from ..watchdog import Watchdog
from .board import Notice, NoticeBoard
from .plan import Allowance, plan, without
from .source import Choice, Group, Source
from .wants import ServedUsers

MODES = ("waiting", "always")
#: jupyter_server's execution states of a kernel that is doing something without a cell.
RESTARTING = frozenset({"restarting", "autorestarting"})
#: How often an unchanged idle time is confirmed in its file (readers take one older than
#: slices.reports.IDLE_STALE_SECONDS as a server that has gone).
REWRITE_SECONDS = 30.0


class IdleSource(Source):
    """This server's idle kernels, shut down for the wants they let in."""

    kind = "idle"

    def __init__(
        self,
        kernel_manager: Any,
        watchdog: Watchdog,
        *,
        after: float = 0.0,
        notice: float = 300.0,
        mode: str = "waiting",
        per_user_seconds: float = 600.0,
        ledger_path: str | None = None,
        tell: Callable[[str, float | None], None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        """``tell(slice_id, since)``: also say each kernel's idleness elsewhere (the node broker,
        for the node's Prometheus page): idle since ``since``, or busy now (None); said when it
        changes and again every :data:`REWRITE_SECONDS`; it must not block (nor raise)."""
        if mode not in MODES:
            raise ValueError(f"idle_reclaim_mode {shorten(mode)} is not one of {', '.join(MODES)}.")
        super().__init__(kernel_manager, watchdog, notice, log)
        self.after = after
        self.mode = mode
        self.ledger_path = ledger_path
        self.started = time.time()
        self.executions = ExecutionWatch(kernel_manager, self.log)
        self.judged: list[SliceUsage] = []  # this sample's slices that are this source's to judge
        self._kept: dict[str, float] = {}  # slice id -> when its owner last said "Keep it"
        self._written: dict[str, tuple[float, float]] = {}  # slice -> (idle since, written at) in its idle file
        self.tell = tell
        self._told: dict[str, tuple[float | None, float]] = {}  # slice -> (idle since or None: busy, told at)
        self._served = ServedUsers(per_user_seconds)  # who had a reclaim lately
        self._pids: dict[str, int | None] = {}  # slice id -> its kernel's process, last sample

    def keep(self, slice_id: str, board: NoticeBoard) -> bool:
        """The owner's "Keep it": counts as activity. True when a notice was cancelled."""
        now = time.time()
        self._kept[slice_id] = now
        if slice_id in board.idle_since:
            board.idle_since[slice_id] = now
        cancelled = board.withdraw(self.kind, slice_id) is not None
        if cancelled:
            self.log.info("jupyter-vgpu: slice %s kept by its owner; it is not reclaimed.", slice_id)
        return cancelled

    def kept_at(self, slice_id: str) -> float | None:
        return self._kept.get(slice_id)

    def observe(self, sample: Sample, board: NoticeBoard) -> bool:
        """When each of this server's kernels last did anything; a notice ends with any activity."""
        now = sample.taken_at
        idle_since = board.idle_since
        self.executions.watch(u.slice.holder for u in sample.slices if u.slice.holder_kind == "kernel" and u.slice.holder in self.kernel_manager)
        self.judged = []
        for usage in sample.slices:
            sid = usage.slice.id
            since = self._activity(usage, now, idle_since)
            if since is None:
                idle_since.pop(sid, None)
                board.withdraw(self.kind, sid)
                continue
            self.judged.append(usage)
            previous = idle_since.get(sid)
            idle_since[sid] = since
            if sid in board.of(self.kind) and previous is not None and since > previous:
                board.withdraw(self.kind, sid)  # a cell, a message, GPU use: kept
                self.log.info("jupyter-vgpu: %s did something during its idle notice; it is not reclaimed.", usage.slice.describe_holder())
            self._write_idle(sid, since)
            self._tell(sid, None if since >= now else since)
        live = {u.slice.id for u in self.judged}
        for gone in [s for s in list(idle_since) if s not in live]:
            idle_since.pop(gone, None)
            board.withdraw(self.kind, gone)
            self._kept.pop(gone, None)
            self._written.pop(gone, None)
            self._told.pop(gone, None)
            self._pids.pop(gone, None)
        return self.after > 0

    def choose(self, sample: Sample, wants: Sequence[Any], board: NoticeBoard, allowance: Allowance) -> Choice | None:
        """The slices one request needs (or, with mode "always", the longest idle one): a notice
        to each, then, once every notice has run out with nothing done, their reclaim together.
        None (the notices stay as they are) while a reclaim is under way."""
        if self.after <= 0 or self.acting:
            return None
        now, idle_since, notices = sample.taken_at, board.idle_since, board.of(self.kind)
        due = [u for u in self.judged if u.slice.id in notices or now - idle_since[u.slice.id] >= self.after]
        due.sort(key=lambda u: (u.slice.id not in notices, idle_since[u.slice.id]))
        if not due:
            return Choice()
        idle = [u.slice.id for u in due]
        gpus = sample.occupancy.gpus
        for index, want in enumerate(wants):
            if self._served.lately(want.uid, now):
                continue  # this user's requests had their reclaim lately
            found = plan(want, gpus, idle, allowance, without)
            if found:
                return Choice((Group(found, want.words, want.uid),), frozenset({index}))
        if self.mode == "always":
            return Choice((Group((idle[0],), "the admin's policy (reclaim always)"),))
        return Choice()

    def withdrawn(self, slice_id: str, notice: Notice) -> str:
        return "is no longer needed by anyone waiting"

    def announcement(self, usage: SliceUsage, group: Group, sample: Sample, board: NoticeBoard) -> tuple[Notice, str]:
        now = sample.taken_at
        idle_for = now - board.idle_since[usage.slice.id]
        notice = Notice(self.kind, usage.slice.id, now, now + self.notice_seconds, group.waiting)
        message = (
            f"{usage.slice.describe_holder()} has been idle for {format_duration(idle_for)} while {group.waiting}: the server "
            f"shuts it down at {time.strftime('%H:%M:%S', time.localtime(notice.deadline))} to free its GPU slice, unless it "
            "runs something or its owner keeps it."
        )
        return notice, message

    def begin(self, group: Group, notices: Sequence[Notice], now: float) -> None:
        self._served.served(group.uid, now)

    async def act(self, usage: SliceUsage, notice: Notice, group: Group, sample: Sample, board: NoticeBoard) -> bool:
        s = usage.slice
        idle_for = sample.taken_at - board.idle_since.get(s.id, sample.taken_at)
        words = f"{s.describe_holder()} was idle for {format_duration(idle_for)} while {group.waiting}"
        ok = True
        try:
            await ensure_async(self.kernel_manager.shutdown_kernel(s.holder))
            message = f"{words}: shut down to free its GPU slice {s.id} (the admin's idle reclaim; the notebook is kept)."
        except Exception as error:
            ok = False
            message = f"{words}: could not be shut down ({shorten(error)})."
        self.record(usage, ok, message, "shutdown")
        return ok

    def close(self) -> None:
        self.executions.close()

    def _activity(self, usage: SliceUsage, now: float, idle_since: dict[str, float]) -> float | None:
        """When the slice's kernel last ran a cell; None when it is not this source's to judge (a
        command, another server's kernel, no GPU memory) or it is busy now."""
        s = usage.slice
        if s.holder_kind != "kernel" or not sum(s.memory) or s.holder not in self.kernel_manager:
            return None
        try:
            kernel = self.kernel_manager.get_kernel(s.holder)
        except KeyError:
            return None
        latest = max(s.created, self.started, self._kept.get(s.id, 0.0))
        # A kernel whose process changed was restarted (by its user, or to give its burst back),
        # between two samples as often as not: its idle time starts again (issue 49: the row read
        # "idle 2 min" right after a restart).
        pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
        restarted = self._pids.get(s.id, pid) != pid
        self._pids[s.id] = pid
        if (
            restarted
            or getattr(kernel, "execution_state", None) in RESTARTING
            or self.executions.running(s.holder, kernel)
            or (usage.utilization or 0) > 0
        ):
            return now  # restarted, running a cell, or using the GPU: active now
        latest = max(latest, self.executions.last_cell(s.holder) or 0.0)
        previous = idle_since.get(s.id)
        return max(latest, previous or latest)

    def _tell(self, slice_id: str, since: float | None) -> None:
        """Say the kernel's idleness (since when, or None: busy now) where :attr:`tell` says it:
        when it changed, else every :data:`REWRITE_SECONDS` so that it stays fresh there."""
        if self.tell is None:
            return
        now = time.time()
        told = self._told.get(slice_id)
        if told is not None and now - told[1] < REWRITE_SECONDS:
            before = told[0]
            if (before is None and since is None) or (before is not None and since is not None and abs(before - since) < 1.0):
                return
        self._told[slice_id] = (since, now)
        self.tell(slice_id, since)

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
