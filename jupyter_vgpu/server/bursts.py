"""Bursts go back to requests: what elastic slices use above their requests is given back when
someone needs it (issue 42; docs/rest.md, "burst_notice").

An elastic slice books its request and may use up to its limit of what no request holds. When
a request waiting in line (or a kernel start refused lately) does not fit now and would fit with
the bursting kernels of this server back within their requests, those bursts are reclaimed:

* the fewest bursts that let the request in, the youngest burst first (the kernel that began
  bursting last gives back first), before any idle kernel is shut down (:mod:`.reclaim` asks
  here first);
* each one's owner gets a notice (``burst_notice`` on the REST slice: the sidebar's notification
  and row, the status bar's countdown; a line under the running cell), and the kernel is asked
  at once to release what its frameworks cache (PyTorch's and CuPy's caching allocators;
  TensorFlow cannot give memory back before a restart, which the kernel says);
* a burst given back in time (the kernel's use within its request again), or a request that no
  longer needs it, ends the notice; otherwise, ``notice`` seconds later, the admin's ``action``
  applies: ``restart`` (the default: the kernel keeps its slice, now within its request),
  ``interrupt``, ``shutdown`` or ``warn``. Each is a watchdog event of action ``burst``.

A GPU whose bursts hold more than what no request holds (its size less every request on it: the
requests were booked and not yet used when the bursts grew) needs no one waiting: the youngest
bursts that cover the excess get the notice at once, whether or not the kernels below their
requests use them yet (hardening round five, M2). On tiers where the driver does not guarantee a
request (cooperative, HAMi-core) this is what guarantees it, within a notice; on a real GPU the
first sign of an over-full GPU would be an out-of-memory error of the last to allocate.

A kernel within its request is never chosen; nor are commands (``jupyter vgpu run``: nothing
could restart them) or kernels of other servers (their own server gives their bursts back).
Another user's requests, like the idle reclaim's, cause at most one reclaim every
``per_user_seconds`` (:class:`ServedUsers`): whoever keeps asking moves this user's kernels once,
not once per notice (hardening round five, H1). This user's own requests are not bounded: the
kernels are theirs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jupyter_core.utils import ensure_async

from ..slices.occupancy import GPUOccupancy, within_requests
from ..units import format_bytes, format_duration, shorten
from .monitor import Sample
from .watchdog import Watchdog, WatchdogEvent, leave_notice

ACTIONS = ("restart", "interrupt", "shutdown", "warn")
_PAST = {"restart": "restarted", "interrupt": "interrupted", "shutdown": "shut down", "warn": "warned"}
_FUTURE = {
    "restart": "restarts it (it keeps its slice, back at its request)",
    "interrupt": "interrupts its running cell",
    "shutdown": "shuts it down (the notebook is kept)",
    "warn": "says so in its log (the admin's policy only warns)",
}


def burst_of(slice_id: str, gpus: Sequence[GPUOccupancy]) -> int:
    """Bytes the slice uses above its request, within its limit, over all its GPUs."""
    return sum(g.burst_of(s) for g in gpus for s in g.shares if s.slice.id == slice_id)


def trimmed(gpus: Sequence[GPUOccupancy], given_back: Collection[str]) -> tuple[GPUOccupancy, ...]:
    """The GPUs as they would be with the slices ``given_back`` using no more than their requests
    (their reservations and everyone else's use unchanged): :func:`.reclaim.without`'s partner."""
    return within_requests(gpus, given_back) if given_back else tuple(gpus)


def spoken_for(gpus: Sequence[GPUOccupancy], taken: Mapping[str, int]) -> tuple[GPUOccupancy, ...]:
    """The GPUs with ``taken`` (GPU UUID -> bytes) held as if by processes outside slices: the
    room earlier requests in line will take, so each later one is planned with what is left."""
    return tuple(replace(g, foreign=g.foreign + taken[g.uuid]) if taken.get(g.uuid) else g for g in gpus)


def _add(taken: dict[str, int], where: Mapping[str, int]) -> None:
    for gpu, amount in where.items():
        taken[gpu] = taken.get(gpu, 0) + amount


class ServedUsers:
    """When a reclaim last let each user's request in (a uid's wants then wait ``seconds`` for
    the next): the bound the idle and burst reclaims share."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._when: dict[int, float] = {}

    def lately(self, uid: int, now: float) -> bool:
        when = self._when.get(uid)
        return when is not None and now - when < self.seconds

    def served(self, uid: int | None, now: float) -> None:
        if uid is not None:
            self._when[uid] = now
        for gone in [u for u, t in self._when.items() if now - t >= self.seconds]:
            del self._when[gone]


@dataclass(frozen=True)
class Overbooked:
    """The requests on one GPU, booked and not yet used, whose memory bursts hold: a want of its own."""

    gpu: int
    excess: int
    uid: None = None  # nobody's request in line: it counts against no user's bound

    @property
    def words(self) -> str:
        return f"the requests booked on GPU {self.gpu} need {format_bytes(self.excess)} that bursts hold"


@dataclass(frozen=True)
class BurstNotice:
    """A burst about to be reclaimed: by when, for whom, what then happens."""

    slice_id: str
    given: float
    deadline: float
    waiting: str  # who needs the room, in words
    action: str
    burst: int  # bytes above the request when the notice was given
    uid: int | None = None  # whose request it is for

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "given": self.given,
            "deadline": self.deadline,
            "seconds_left": max(0.0, self.deadline - now),
            "for": self.waiting,
            "action": self.action,
            "burst": self.burst,
        }


class BurstReclaimer:
    """Gives bursts back for the requests that need them; :meth:`check` with every sample and
    the wants (:class:`.reclaim.Want`) of that sample, first in line first."""

    def __init__(
        self,
        kernel_manager: Any,
        watchdog: Watchdog,
        *,
        notice: float = 60.0,
        action: str = "restart",
        placed: Callable[[Any, Sequence[GPUOccupancy]], Mapping[str, int]],  # where a want would go: GPU -> bytes
        on_action: Callable[[], None] | None = None,
        ledger_path: str | None = None,
        log: logging.Logger | None = None,
        per_user_seconds: float = 600.0,
    ) -> None:
        if action not in ACTIONS:
            raise ValueError(f"burst_reclaim_action {shorten(action)} is not one of {', '.join(ACTIONS)}.")
        self.kernel_manager = kernel_manager
        self.watchdog = watchdog
        self.notice_seconds = notice
        self.action = action
        self.placed = placed
        self.on_action = on_action
        self.ledger_path = ledger_path
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.bursting_since: dict[str, float] = {}  # slice id -> when its burst began
        self.notices: dict[str, BurstNotice] = {}
        self.due: dict[int, float] = {}  # place in line -> when the bursts it waits for are due back
        self.uid = os.getuid()  # this server's user, whose kernels these are
        self.served_users = ServedUsers(per_user_seconds)  # other users' requests a reclaim let in lately
        self._acting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def notice(self, slice_id: str, now: float | None = None) -> dict[str, Any] | None:
        found = self.notices.get(slice_id)
        return found.to_dict(now or time.time()) if found else None

    def waited_for(self, ticket: int, now: float | None = None) -> dict[str, Any] | None:
        """For a place in line that bursts are being given back for: by when (the last of their
        notices; then the admin's action), as REST's waiting row says it."""
        deadline = self.due.get(ticket)
        if deadline is None:
            return None
        return {"deadline": deadline, "seconds_left": max(0.0, deadline - (now or time.time())), "action": self.action}

    def bursting(self, sample: Sample) -> list[str]:
        """This server's kernels that burst now, the youngest burst first."""
        gpus = sample.occupancy.gpus
        now = sample.taken_at
        live: dict[str, float] = {}
        for usage in sample.slices:
            s = usage.slice
            if s.memory_burst_limit is None or s.holder_kind != "kernel" or s.holder not in self.kernel_manager:
                continue
            if burst_of(s.id, gpus) > 0:
                live[s.id] = self.bursting_since.get(s.id, now)
        self.bursting_since = live
        return sorted(live, key=lambda sid: (sid not in self.notices, -live[sid]))

    async def check(self, sample: Sample, wants: Sequence[Any], bursting: Sequence[str] | None = None) -> set[int]:
        """Notices and actions for this sample; the indices of the ``wants`` that bursts given
        back would let in (the idle reclaim leaves those alone). ``bursting``: :meth:`bursting` of
        this sample, where the caller has it already."""
        if sample.message is not None:
            return set()
        now = sample.taken_at
        gpus = trimmed(sample.occupancy.gpus, self._acting)  # being given back now (a restart takes seconds)
        bursting = self.bursting(sample) if bursting is None else bursting
        candidates = [sid for sid in bursting if sid not in self._acting]
        served: set[int] = set()
        chosen: dict[str, Any] = {}  # slice id -> the want it is for
        due: dict[int, list[str]] = {}  # place in line -> the bursts it waits for
        taken: dict[str, int] = {}  # GPU -> what the wants before this one take there, in line order
        for index, want in enumerate(wants):
            view = spoken_for(trimmed(gpus, chosen), taken)
            if where := self.placed(want, view):  # it fits (with the bursts chosen for those before it)
                _add(taken, where)
                continue
            if want.uid != self.uid and self.served_users.lately(want.uid, now):
                continue  # another user's request had its reclaim lately
            found = self._plan(want, view, candidates) if candidates else None
            if found is None:
                continue
            _add(taken, self.placed(want, trimmed(view, found)))
            served.add(index)
            if getattr(want, "ticket", None) is not None:
                due[want.ticket] = list(found)
            for sid in found:
                chosen.setdefault(sid, want)
                candidates.remove(sid)
        for gpu in gpus:  # bursts beyond what no request holds: the youngest go back, nobody need wait
            excess = trimmed([gpu], chosen)[0].overbooked
            for sid in [c for c in candidates if any(s.slice.id == c for s in gpu.shares)]:
                if excess <= 0:
                    break
                share = next(s for s in gpu.shares if s.slice.id == sid)
                if burst := gpu.burst_of(share):
                    chosen.setdefault(sid, Overbooked(gpu.index, excess))
                    candidates.remove(sid)
                    excess -= burst
        for sid in [s for s in self.notices if s not in chosen]:
            gone = self.notices.pop(sid)
            given_back = sid not in self.bursting_since
            self.log.info(
                "jupyter-vgpu: slice %s %s; its burst notice is withdrawn.",
                sid,
                "gave its burst back" if given_back else f"is no longer needed by {gone.waiting}",
            )
        for sid, want in chosen.items():
            usage = sample.find(sid)
            if usage is None:
                continue
            if sid not in self.notices:
                await self._announce(usage, want, burst_of(sid, gpus), now)
            elif now >= self.notices[sid].deadline:
                notice = self.notices.pop(sid)
                if notice.uid != self.uid:
                    self.served_users.served(notice.uid, now)
                self._acting.add(sid)
                task = asyncio.get_running_loop().create_task(self._act(usage, notice, burst_of(sid, gpus)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self.due = {
            ticket: max(self.notices[s].deadline if s in self.notices else now for s in sids) for ticket, sids in due.items()
        }
        return served

    def _plan(self, want: Any, gpus: Sequence[GPUOccupancy], candidates: Sequence[str]) -> tuple[str, ...] | None:
        """The fewest of ``candidates`` (in their order) whose bursts given back let ``want`` in."""
        chosen: list[str] = []
        for sid in candidates:
            chosen.append(sid)
            if self.placed(want, trimmed(gpus, chosen)):
                break
        else:
            return None
        for sid in reversed(chosen[:-1]):  # taken on the way but not needed (another GPU, say)
            fewer = [c for c in chosen if c != sid]
            if self.placed(want, trimmed(gpus, fewer)):
                chosen = fewer
        return tuple(chosen)

    async def _announce(self, usage: Any, want: Any, burst: int, now: float) -> None:
        s = usage.slice
        waiting = want.words
        notice = BurstNotice(s.id, now, now + self.notice_seconds, waiting, self.action, burst, want.uid)
        self.notices[s.id] = notice
        message = (
            f"{s.describe_holder()} uses {format_bytes(burst)} above its {format_bytes(usage.memory_reserved_total)} request "
            f"while {waiting}: give it back by {time.strftime('%H:%M:%S', time.localtime(notice.deadline))} "
            f"(free what you hold), or the server {_FUTURE[self.action]}."
        )
        self.log.info("jupyter-vgpu: %s", message)
        await leave_notice(self.ledger_path, usage, "burst", "ahead", message, self.log)

    async def _act(self, usage: Any, notice: BurstNotice, burst: int) -> None:
        s = usage.slice
        words = (
            f"{s.describe_holder()} still used {format_bytes(burst)} above its {format_bytes(usage.memory_reserved_total)} "
            f"request {format_duration(self.notice_seconds)} after its notice, while {notice.waiting}"
        )
        ok = True
        try:
            if self.action == "restart":
                await ensure_async(self.kernel_manager.restart_kernel(s.holder))
            elif self.action == "interrupt":
                await ensure_async(self.kernel_manager.interrupt_kernel(s.holder))
            elif self.action == "shutdown":
                await ensure_async(self.kernel_manager.shutdown_kernel(s.holder))
            message = f"{words}: {_PAST[self.action]} to give its burst back (the admin's burst reclaim)."
        except Exception as error:
            ok = False
            message = f"{words}: could not be {_PAST[self.action]} ({shorten(error)})."
        event = WatchdogEvent(
            time.time(), s.id, s.holder, "burst", ok, message, path=s.labels.get("path"),
            memory_used=usage.memory_used, memory_reserved=usage.memory_reserved_total,
        )  # fmt: skip
        self.watchdog.record(event)
        (self.log.warning if ok else self.log.error)("jupyter-vgpu: %s", message)
        if self.action in ("interrupt", "warn"):
            await leave_notice(self.ledger_path, usage, "burst", "done", message, self.log)
        if self.on_action is not None:
            self.on_action()
        self._acting.discard(s.id)

    async def stop(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
