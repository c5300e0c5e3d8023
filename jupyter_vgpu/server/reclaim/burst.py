"""Bursts go back to requests: what elastic slices use above their requests is given back when
someone needs it (issue 42; docs/rest.md, "burst_notice"). The engine's first source.

An elastic slice books its request and may use up to its limit of what no request holds. When
a request waiting in line (or a kernel start refused lately) does not fit now and would fit with
the bursting kernels of this server back within their requests, those bursts are reclaimed:

* every request in line is planned with what those before it take (:func:`.plan.spoken_for`),
  so two requests that each need a burst get both asked back in one sample; for each, the fewest
  bursts that let it in (:func:`.plan.plan` with :func:`.plan.trimmed`), the youngest burst first
  (the kernel that began bursting last gives back first), before any idle kernel is shut down
  (the engine asks this source first, and a request served here is not offered to the next);
* each one's owner gets a notice (``burst_notice`` on the REST slice: the sidebar's notification
  and row, the status bar's countdown; a line under the running cell), and the kernel is asked
  at once to release what its frameworks cache (PyTorch's and CuPy's caching allocators;
  TensorFlow cannot give memory back before a restart, which the kernel says);
* a burst given back in time (the kernel's use within its request again), or a request that no
  longer needs it, ends the notice; otherwise, ``notice`` seconds later (at a later sample than
  the one that gave it, however short the notice), the admin's ``action`` applies: ``restart``
  (the default: the kernel keeps its slice, now within its request), ``interrupt``, ``shutdown``
  or ``warn``. Each is a watchdog event of action ``burst``.

A GPU whose bursts hold more than what no request holds (its size less every request on it: the
requests were booked and not yet used when the bursts grew) needs no one waiting
(:class:`.wants.Overbooked`): the youngest bursts that cover the excess get the notice at once,
whether or not the kernels below their requests use them yet (hardening round five, M2). On tiers
where the driver does not guarantee a request (cooperative, HAMi-core) this is what guarantees it,
within a notice; on a real GPU the first sign of an over-full GPU would be an out-of-memory error
of the last to allocate.

A kernel within its request is never chosen; nor are commands (``jupyter vgpu run``: nothing
could restart them) or kernels of other servers (their own server gives their bursts back).
Another user's requests, like the idle reclaim's, cause at most one reclaim every
``per_user_seconds`` (:class:`.wants.ServedUsers`): whoever keeps asking moves this user's kernels
once, not once per notice (hardening round five, H1). This user's own requests are not bounded:
the kernels are theirs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from jupyter_core.utils import ensure_async

from ...slices.terms import BURST_ACTIONS
from ...slices.usage import SliceUsage
from ...units import format_bytes, format_duration, shorten
from ..monitor import Sample
from ..watchdog import Watchdog
from .board import Notice, NoticeBoard
from .plan import Allowance, burst_of, placed, plan, spoken_for, take, trimmed
from .source import Choice, Group, Source
from .wants import Overbooked, ServedUsers

ACTIONS = BURST_ACTIONS
#: A notice withdrawn as no longer needed whose burst is gone this soon after was given back.
GIVEN_BACK_SECONDS = 10.0
_PAST = {"restart": "restarted", "interrupt": "interrupted", "shutdown": "shut down", "warn": "warned"}
_FUTURE = {
    "restart": "restarts it (it keeps its slice, back at its request)",
    "interrupt": "interrupts its running cell",
    "shutdown": "shuts it down (the notebook is kept)",
    "warn": "says so in its log (the admin's policy only warns)",
}


class BurstSource(Source):
    """This server's bursting kernels, given back for the requests that need them."""

    kind = "burst"
    acts_on_a_new_notice = False  # the kernel has a sample's time at least to give it back

    def __init__(
        self,
        kernel_manager: Any,
        watchdog: Watchdog,
        *,
        notice: float = 60.0,
        action: str = "restart",
        per_user_seconds: float = 600.0,
        log: logging.Logger | None = None,
    ) -> None:
        if action not in ACTIONS:
            raise ValueError(f"burst_reclaim_action {shorten(action)} is not one of {', '.join(ACTIONS)}.")
        super().__init__(kernel_manager, watchdog, notice, log)
        self.action = action
        self.bursting_since: dict[str, float] = {}  # slice id -> when its burst began
        self.bursting: list[str] = []  # this sample's, the youngest burst first
        self.uid = os.getuid()  # this server's user, whose kernels these are
        self.served_users = ServedUsers(per_user_seconds)  # other users' requests a reclaim let in lately
        self.given_back = 0  # notices that ended because the kernel gave its burst back in time
        self._ended_bursting: dict[str, float] = {}  # slice -> when its notice ended while it still burst

    def observe(self, sample: Sample, board: NoticeBoard) -> bool:
        """This server's kernels that burst now, those under notice first, then the youngest burst first."""
        gpus = sample.occupancy.gpus
        live: dict[str, float] = {}
        for usage in sample.slices:
            s = usage.slice
            if s.memory_burst_limit is None or s.holder_kind != "kernel" or s.holder not in self.kernel_manager:
                continue
            if burst_of(s.id, gpus) > 0:
                live[s.id] = self.bursting_since.get(s.id, sample.taken_at)
        self.bursting_since = live
        for sid, ended in list(self._ended_bursting.items()):
            if sid not in live:
                self.given_back += 1
            if sid not in live or time.time() - ended > GIVEN_BACK_SECONDS:
                del self._ended_bursting[sid]
        notices = board.of(self.kind)
        self.bursting = sorted(live, key=lambda sid: (sid not in notices, -live[sid]))
        return bool(self.bursting)

    def choose(self, sample: Sample, wants: Sequence[Any], board: NoticeBoard, allowance: Allowance) -> Choice:
        now = sample.taken_at
        gpus = trimmed(sample.occupancy.gpus, self.acting)  # being given back now (a restart takes seconds)
        candidates = [sid for sid in self.bursting if sid not in self.acting]
        served: set[int] = set()
        chosen: dict[str, Any] = {}  # slice id -> the want it is for
        due: dict[int, list[str]] = {}  # place in line -> the bursts it waits for
        taken: dict[str, int] = {}  # GPU -> what the wants before this one take there, in line order
        for index, want in enumerate(wants):
            view = spoken_for(trimmed(gpus, chosen), taken)
            if where := placed(want, view, allowance):  # it fits (with the bursts chosen for those before it)
                take(taken, where)
                continue
            if want.uid != self.uid and self.served_users.lately(want.uid, now):
                continue  # another user's request had its reclaim lately
            found = plan(want, view, candidates, allowance, trimmed) if candidates else None
            if found is None:
                continue
            take(taken, placed(want, trimmed(view, found), allowance))
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
        groups = tuple(Group((sid,), want.words, want.uid) for sid, want in chosen.items())
        return Choice(groups, frozenset(served), due)

    def withdrawn(self, slice_id: str, notice: Notice) -> str:
        if slice_id not in self.bursting_since:
            self.given_back += 1  # /metrics: jupyter_vgpu_bursts_given_back_total
            return "gave its burst back"
        # The waiter may have got in on the burst given back before a sample saw it go (run 30):
        # a burst gone within GIVEN_BACK_SECONDS of its notice's end counts as given back too.
        self._ended_bursting[slice_id] = time.time()
        return f"is no longer needed by {notice.waiting}"

    def announcement(self, usage: SliceUsage, group: Group, sample: Sample, board: NoticeBoard) -> tuple[Notice, str]:
        s, now = usage.slice, sample.taken_at
        burst = burst_of(s.id, sample.occupancy.gpus)
        details = {"action": self.action, "burst": burst}
        notice = Notice(self.kind, s.id, now, now + self.notice_seconds, group.waiting, group.uid, details)
        message = (
            f"{s.describe_holder()} uses {format_bytes(burst)} above its {format_bytes(usage.memory_reserved_total)} request "
            f"while {group.waiting}: give it back by {time.strftime('%H:%M:%S', time.localtime(notice.deadline))} "
            f"(free what you hold), or the server {_FUTURE[self.action]}."
        )
        return notice, message

    def begin(self, group: Group, notices: Sequence[Notice], now: float) -> None:
        for notice in notices:
            if notice.uid != self.uid:
                self.served_users.served(notice.uid, now)

    async def act(self, usage: SliceUsage, notice: Notice, group: Group, sample: Sample, board: NoticeBoard) -> bool:
        s = usage.slice
        burst = burst_of(s.id, sample.occupancy.gpus)
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
        self.record(usage, ok, message, self.action)
        if self.action in ("interrupt", "warn"):
            await board.tell(usage, "burst", "done", message)
        return True
