"""The reclaim engine: room goes back to whoever needs it, with notice (docs/rest.md, "Giving
bursts back" and "Idle reclaim").

One loop for every reason to take room back. After every sample (:meth:`Reclaim.check`):

1. each source follows the sample (:meth:`.Source.observe`: which kernels burst, which are idle);
2. the wants are read once (:func:`.wants.wants_of`: requests in line, first first, then kernel
   starts refused in the last ``demand_seconds``);
3. the sources are asked in a fixed order, bursts first (:mod:`.burst`: a burst goes back before
   an idle kernel is shut down), then idle kernels (:mod:`.idle`); each chooses with the one plan
   (:func:`.plan.plan`: the fewest holders whose giving back lets a want in), and a want one
   source serves is not offered to the next;
4. the notice board (:class:`.board.NoticeBoard`) tells each chosen holder's kernel first and
   then publishes the notice, withdraws the notices nobody needs any more, and once all the
   notices of a group ran out, takes them down and the source acts (a restart, a shutdown).

The views and ``/metrics`` read the board (:attr:`Reclaim.board`); nothing else is handed around.
A new reason to take room back (a suspend, say) is one more module: a :class:`.Source`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..monitor import Sample
from .board import Due, Notice, NoticeBoard
from .burst import BurstSource
from .idle import IdleSource
from .plan import Allowance, burst_of, lets_in, placed, plan, spoken_for, trimmed, without
from .source import Choice, Group, Source
from .wants import Overbooked, ServedUsers, Want, wants_of

__all__ = [
    "BurstSource", "Choice", "Due", "Group", "IdleSource", "Notice", "NoticeBoard", "Overbooked", "Reclaim",
    "ServedUsers", "Source", "Want", "burst_of", "lets_in", "placed", "plan", "spoken_for", "trimmed", "without",
]  # fmt: skip


class Reclaim:
    """The engine: call :meth:`check` with every sample; :attr:`board` for the views; :meth:`keep`
    for the owner's "Keep it"."""

    def __init__(
        self,
        sources: Sequence[Source],
        *,
        allowance: Allowance = lambda gpu: 0,
        demand_seconds: float = 600.0,
        refused_since: Callable[[float], list[dict[str, Any]]] = lambda t: [],
        on_action: Callable[[], None] | None = None,
        ledger_path: str | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.sources = tuple(sources)  # asked in this order
        self.allowance = allowance
        self.demand_seconds = demand_seconds
        self.refused_since = refused_since
        self.on_action = on_action
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.board = NoticeBoard(ledger_path, self.log)
        self.uid = os.getuid()  # this server's user: whose refused starts these are
        self._tasks: set[asyncio.Task[None]] = set()

    def keep(self, slice_id: str) -> bool:
        """The owner's "Keep it" (it counts as activity); True when a notice was cancelled."""
        return any([source.keep(slice_id, self.board) for source in self.sources])

    async def check(self, sample: Sample) -> None:
        if sample.message is not None:
            return  # a failed tick says nothing about activity or use
        needed = [source.observe(sample, self.board) for source in self.sources]
        wants: list[Any] = []
        if any(needed):
            wants = wants_of(sample, self.refused_since(sample.taken_at - self.demand_seconds), self.demand_seconds, self.uid)
        for source in self.sources:
            choice = source.choose(sample, wants, self.board, self.allowance)
            if choice is None:
                continue
            await self._follow(source, choice, sample)
            self.board.set_due(source.kind, source.due_of(choice, self.board, sample.taken_at))
            wants = [w for i, w in enumerate(wants) if i not in choice.served]

    async def _follow(self, source: Source, choice: Choice, sample: Sample) -> None:
        """Withdraw what nobody needs any more; give notice; act on each group whose notices ran out."""
        kind, now = source.kind, sample.taken_at
        chosen = {sid for group in choice.groups for sid in group.slices}
        for sid in [s for s in self.board.of(kind) if s not in chosen]:
            gone = self.board.withdraw(kind, sid)
            assert gone is not None
            self.log.info("jupyter-vgpu: slice %s %s; its %s notice is withdrawn.", sid, source.withdrawn(sid, gone), kind)
        for group in choice.groups:
            ready = True
            for sid in group.slices:
                usage = sample.find(sid)
                notice = self.board.of(kind).get(sid)
                if usage is None:
                    ready = False
                elif notice is None:
                    notice, message = source.announcement(usage, group, sample, self.board)
                    self.log.info("jupyter-vgpu: %s", message)
                    published = await self.board.announce(notice, usage, message, source.kept_at)
                    ready = ready and published and source.acts_on_a_new_notice and now >= notice.deadline
                elif now < notice.deadline:
                    ready = False
            if ready:
                self._begin(source, group, sample)

    def _begin(self, source: Source, group: Group, sample: Sample) -> None:
        notices = [self.board.withdraw(source.kind, sid) for sid in group.slices]
        taken = [n for n in notices if n is not None]
        source.acting.update(group.slices)
        source.begin(group, taken, sample.taken_at)
        for notice in taken:
            usage = sample.find(notice.slice_id)
            assert usage is not None
            task = asyncio.get_running_loop().create_task(self._act(source, usage, notice, group, sample))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _act(self, source: Source, usage: Any, notice: Notice, group: Group, sample: Sample) -> None:
        try:
            if await source.act(usage, notice, group, sample, self.board) and self.on_action is not None:
                self.on_action()
        finally:
            source.acting.discard(usage.slice.id)

    async def stop(self) -> None:
        """The server stops: no more watching, and the actions under way are done."""
        for source in self.sources:
            source.close()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

