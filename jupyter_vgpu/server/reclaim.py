"""Idle slices go back to people who wait: GPU-aware reclaim, with notice (docs/rest.md).

jupyter_server's ``cull_idle_timeout`` shuts kernels down by the clock alone, for everybody; this
frees a GPU slice when, and only when, it helps someone. After every sample, for each slice held
by a kernel of this server:

* **idle** means the kernel has run no cell (:mod:`.activity`: no execute request a person sent;
  a browser reconnecting, kernel_info, comm_info, the debugger's requests and status traffic are
  not activity) and its GPU utilisation stayed 0, since :attr:`IdleReclaimer.idle_since` (never
  before the slice was made, the server started, or the owner said "Keep it"). ``jupyter vgpu
  run`` commands count as busy while they live, kernels of other servers are not this server's
  to judge, and a slice of no GPU is never touched;
* a slice idle ``after`` seconds is reclaimed only for someone it **lets in** (``mode``
  "waiting"): a request waiting in line, or a kernel start refused in the last
  ``demand_seconds``, that does not fit now and would fit with the slice gone (together with
  those already under notice): on its pinned GPU, the GPUs its policy allows, its size, its
  number of GPUs (:func:`plan`). A waiter that freeing idle slices cannot help (pinned to a GPU
  its own command fills, say) shuts nobody down. One user's places in line and refused starts
  cause at most one reclaim (the slices one request needs) every ``per_user_seconds``. With
  ``mode`` "always", an idle slice nobody's request needs is reclaimed too;
* the owner of each slice to be reclaimed gets a notice: the kernel prints it at its next cell,
  the REST slice carries ``idle_notice`` (the sidebar's notification with "Keep it", the status
  bar's countdown), and the server logs it;
* any activity during the notice (a cell, a message from the kernel, GPU use, "Keep it":
  ``POST /api/vgpu/slices/<id>/keep``) cancels it; otherwise, ``notice`` seconds later, the kernel
  is shut down through the kernel manager (its notebook stays), the slice is freed at once and
  the waiter gets it (the slices one request needs go together, once all their notices ran out). Each reclaim is a watchdog event of action ``idle`` and a log line
  naming who waited.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jupyter_core.utils import ensure_async

from ..errors import InvalidRequest
from ..slices import SliceRequest
from ..slices.occupancy import GPUOccupancy
from ..slices.placement import place
from ..slices.records import HIDDEN_HOLDER, Waiter
from ..slices.reports import write_idle
from ..slices.usage import SliceUsage
from ..units import format_duration, shorten
from .activity import ExecutionWatch
from .bursts import BurstReclaimer, ServedUsers
from .monitor import Sample
from .watchdog import Watchdog, WatchdogEvent, leave_notice

MODES = ("waiting", "always")
#: jupyter_server's execution states of a kernel that is doing something without a cell.
RESTARTING = frozenset({"restarting", "autorestarting"})
#: How often an unchanged idle time is confirmed in its file (readers take one older than
#: slices.reports.IDLE_STALE_SECONDS as a server that has gone).
REWRITE_SECONDS = 30.0


@dataclass(frozen=True)
class Want:
    """Someone who needs room: a request waiting in line, or a kernel start refused lately."""

    request: SliceRequest
    uid: int  # whose: one user's wants together cause a bounded number of reclaims
    words: str  # how a notice names it
    allowed: frozenset[str] | None = None  # the GPUs its policy allows (UUIDs; None: any)
    ticket: int | None = None  # its place in line (None: a refused start)


def without(gpus: Sequence[GPUOccupancy], freed: Collection[str]) -> tuple[GPUOccupancy, ...]:
    """The GPUs as they would be with the slices ``freed`` gone: their reservations, their use
    (over-use included) and their MIG devices."""
    if not freed:
        return tuple(gpus)
    return tuple(
        replace(
            g,
            shares=tuple(s for s in g.shares if s.slice.id not in freed),
            mig=tuple(replace(m, slice_id=None, holder=None) if m.slice_id in freed else m for m in g.mig),
        )
        for g in gpus
    )


def lets_in(want: Want, gpus: Sequence[GPUOccupancy], allowance: Callable[[GPUOccupancy], int]) -> bool:
    """Whether ``want`` would be placed on ``gpus`` (placement's own rules: pinned GPU, allowed
    GPUs, size, number of GPUs, MIG)."""
    return bool(placed(want, gpus, allowance))


def placed(want: Want, gpus: Sequence[GPUOccupancy], allowance: Callable[[GPUOccupancy], int]) -> dict[str, int]:
    """Where ``want`` would be placed on ``gpus`` and how much it would take there (GPU UUID ->
    bytes); empty when it would not be."""
    try:
        return {g.uuid: amount for g, amount in place(want.request, gpus, allowance=allowance, allowed=want.allowed).chosen}
    except InvalidRequest:
        return {}  # a GPU that is gone, a share below the context: no reclaim helps it


def plan(
    want: Want, gpus: Sequence[GPUOccupancy], idle: Sequence[str], allowance: Callable[[GPUOccupancy], int]
) -> tuple[str, ...] | None:
    """The fewest of the ``idle`` slices (the most deserving first: those under notice, then the
    longest idle) whose reclaim lets ``want`` in; None when it fits already (nothing to free for
    it) or freeing every one of them would not let it in."""
    if lets_in(want, gpus, allowance):
        return None
    chosen: list[str] = []
    for slice_id in idle:
        chosen.append(slice_id)
        if lets_in(want, without(gpus, chosen), allowance):
            break
    else:
        return None
    for slice_id in reversed(chosen[:-1]):  # taken on the way but not needed (another GPU, say)
        fewer = [c for c in chosen if c != slice_id]
        if lets_in(want, without(gpus, fewer), allowance):
            chosen = fewer
    return tuple(chosen)


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
        allowance: Callable[[GPUOccupancy], int] = lambda gpu: 0,
        per_user_seconds: float = 600.0,
        on_reclaim: Callable[[], None] | None = None,
        ledger_path: str | None = None,
        log: logging.Logger | None = None,
        bursts: BurstReclaimer | None = None,
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
        self.allowance = allowance
        self.per_user_seconds = per_user_seconds
        self.on_reclaim = on_reclaim
        self.ledger_path = ledger_path
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.bursts = bursts  # asked first: a burst goes back before an idle kernel is shut down
        self.uid = os.getuid()  # this server's user: whose refused starts these are
        self.started = time.time()
        self.executions = ExecutionWatch(kernel_manager, self.log)
        self.idle_since: dict[str, float] = {}  # slice id -> when it last did anything
        self.notices: dict[str, IdleNotice] = {}
        self._kept: dict[str, float] = {}  # slice id -> when its owner last said "Keep it"
        self._written: dict[str, tuple[float, float]] = {}  # slice -> (idle since, written at) in its idle file
        self._reclaiming: set[str] = set()
        self._served = ServedUsers(per_user_seconds)  # who had a reclaim lately
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
        self.executions.watch(u.slice.holder for u in sample.slices if u.slice.holder_kind == "kernel" and u.slice.holder in self.kernel_manager)
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
        bursting = self.bursts.bursting(sample) if self.bursts is not None else []
        wants = self._wants(sample, now) if self.after > 0 or bursting else []
        if self.bursts is not None:
            served = await self.bursts.check(sample, wants, bursting)
            wants = [w for i, w in enumerate(wants) if i not in served]
        if self.after > 0:
            await self._reclaim_one(judged, now, sample, wants)

    async def _reclaim_one(self, judged: list[SliceUsage], now: float, sample: Sample, wants: list[Want]) -> None:
        """The slices one request needs (or, with mode "always", the longest idle one): a notice
        to each, then, once every notice has run out with nothing done, their reclaim together."""
        if self._reclaiming:
            return
        due = [u for u in judged if u.slice.id in self.notices or now - self.idle_since[u.slice.id] >= self.after]
        due.sort(key=lambda u: (u.slice.id not in self.notices, self.idle_since[u.slice.id]))
        chosen, need, uid = self._choose(due, sample, now, wants)
        for sid in [s for s in self.notices if s not in chosen]:
            del self.notices[sid]  # nobody it would let in needs it now
            self.log.info("jupyter-vgpu: slice %s is no longer needed by anyone waiting; its idle notice is withdrawn.", sid)
        if not chosen:
            return
        by_id = {u.slice.id: u for u in due}
        ready = [await self._announce(by_id[sid], now - self.idle_since[sid], now, need) for sid in chosen]
        if not all(ready):
            return
        for sid in chosen:
            self.notices.pop(sid, None)
            self._reclaiming.add(sid)
        self._served.served(uid, now)
        usages = [by_id[sid] for sid in chosen]
        task = asyncio.get_running_loop().create_task(self._reclaim_all(usages, now, need))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _choose(
        self, due: list[SliceUsage], sample: Sample, now: float, wants: list[Want]
    ) -> tuple[tuple[str, ...], str, int | None]:
        """Which idle slices to reclaim, for whom (in words) and whose uid that counts against."""
        if not due:
            return (), "", None
        idle = [u.slice.id for u in due]
        gpus = sample.occupancy.gpus
        for want in wants:
            if self._served.lately(want.uid, now):
                continue  # this user's requests had their reclaim lately
            found = plan(want, gpus, idle, self.allowance)
            if found:
                return found, want.words, want.uid
        if self.mode == "always":
            return (idle[0],), "the admin's policy (reclaim always)", None
        return (), "", None

    def _activity(self, usage: SliceUsage, now: float) -> float | None:
        """When the slice's kernel last ran a cell; None when it is not this reclaimer's to
        judge (a command, another server's kernel, no GPU memory) or it is busy now."""
        s = usage.slice
        if s.holder_kind != "kernel" or not sum(s.memory) or s.holder not in self.kernel_manager:
            return None
        try:
            kernel = self.kernel_manager.get_kernel(s.holder)
        except KeyError:
            return None
        latest = max(s.created, self.started, self._kept.get(s.id, 0.0))
        if getattr(kernel, "execution_state", None) in RESTARTING or self.executions.running(s.holder, kernel) or (usage.utilization or 0) > 0:
            return now  # running a cell, restarting, or using the GPU: active now
        latest = max(latest, self.executions.last_cell(s.holder) or 0.0)
        previous = self.idle_since.get(s.id)
        return max(latest, previous or latest)

    def _wants(self, sample: Sample, now: float) -> list[Want]:
        """Who needs room, first in line first, then kernel starts refused lately (newest first)."""
        wants = [
            Want(
                w.request,
                w.uid,
                self._waiter_words(w, len(sample.waiting)),
                None if w.allowed_gpus is None else frozenset(w.allowed_gpus),
                w.ticket,
            )
            for w in sample.waiting
        ]
        refused = self.refused_since(now - self.demand_seconds)
        count = f"{len(refused)} kernel start{'s' if len(refused) > 1 else ''} refused in the last {self.demand_seconds / 60:.0f} min"
        for entry in refused:
            try:
                request = SliceRequest.from_dict(entry["request"])
            except (KeyError, TypeError, InvalidRequest):
                continue  # refused for something no room would mend (or an old record)
            allowed = frozenset(str(u) for u in entry.get("allowed_gpus") or ()) or None
            wants.append(Want(request, self.uid, count, allowed))
        return wants

    def _waiter_words(self, waiter: Waiter, count: int) -> str:
        if waiter.uid != self.uid:
            holder = HIDDEN_HOLDER[waiter.holder_kind]  # never another user's command line, even hidden
        else:
            holder = waiter.labels.get("path") or (_program(waiter.holder) if waiter.holder_kind == "command" else "a kernel")
        where = "first: " if waiter.position == 1 else f"#{waiter.position}: "
        return f"{count} waiting in line ({where}{holder}, {waiter.request.describe()})"

    async def _announce(self, usage: SliceUsage, idle_for: float, now: float, need: str) -> bool:
        """Give the slice's owner a notice (once); True when its time has run out."""
        sid = usage.slice.id
        found = self.notices.get(sid)
        if found is None:
            found = IdleNotice(sid, now, now + self.notice_seconds, need)
            holder = usage.slice.describe_holder()
            message = (
                f"{holder} has been idle for {format_duration(idle_for)} while {need}: the server shuts it down at "
                f"{time.strftime('%H:%M:%S', time.localtime(found.deadline))} to free its GPU slice, unless it runs "
                "something or its owner keeps it."
            )
            self.log.info("jupyter-vgpu: %s", message)
            kept = self._kept.get(sid)
            # the kernel has it (and prints it at its next cell) before any view shows the notice
            await self._tell(usage, "ahead", message)
            if self._kept.get(sid) != kept:
                return False  # its owner kept it meanwhile
            self.notices[sid] = found
        return now >= found.deadline

    async def _reclaim_all(self, usages: list[SliceUsage], now: float, waiting: str) -> None:
        await asyncio.gather(*(self._reclaim(u, now - self.idle_since.get(u.slice.id, now), waiting) for u in usages))

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
        self.executions.close()
        if self.bursts is not None:
            await self.bursts.stop()
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
