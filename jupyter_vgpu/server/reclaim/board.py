"""The reclaim engine's notice board: what each slice's owner has been told, and what the views read.

A notice is announced by telling the kernel first (it prints the notice at its next cell) and only
then publishing it here, so no view ever shows a notice the kernel does not have yet. The board
also holds, for the views, each judged slice's idle time and, per place in line, by when the room
it waits for is due back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...slices.usage import SliceUsage
from ..watchdog import leave_notice


@dataclass(frozen=True)
class Notice:
    """A reclaim announced to a slice's owner: by a source (``kind``), when it happens unless they
    act, for whom."""

    kind: str  # the source's: "idle", "burst"
    slice_id: str
    given: float
    deadline: float
    waiting: str  # who needs the room, in words
    uid: int | None = None  # whose want it is for
    details: Mapping[str, Any] = field(default_factory=dict)  # the source's own fields in the views

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "given": self.given,
            "deadline": self.deadline,
            "seconds_left": max(0.0, self.deadline - now),
            "for": self.waiting,
            **self.details,
        }


@dataclass(frozen=True)
class Due:
    """When the room a place in line waits for is due back, and what then happens."""

    deadline: float
    action: str


class NoticeBoard:
    """The notices in force, by kind and slice; read by the REST views and ``/metrics``."""

    def __init__(self, ledger_path: str | Path | None = None, log: logging.Logger | None = None) -> None:
        self.ledger_path = ledger_path
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.idle_since: dict[str, float] = {}  # slice id -> when it last did anything (the idle source's judgement)
        self._notices: dict[str, dict[str, Notice]] = {}  # kind -> slice id -> notice
        self._due: dict[str, dict[int, Due]] = {}  # kind -> place in line -> when its room is due back

    # -- what the views read -----------------------------------------------------------------
    def notice(self, kind: str, slice_id: str, now: float | None = None) -> dict[str, Any] | None:
        """The notice of ``kind`` to the slice's owner, as REST shows it; None if there is none."""
        found = self._notices.get(kind, {}).get(slice_id)
        return found.to_dict(now or time.time()) if found else None

    def due(self, kind: str, ticket: int | None, now: float | None = None) -> dict[str, Any] | None:
        """For a place in line that holders of ``kind`` give room back for: by when (the last of
        their notices; then the action), as REST's waiting row says it."""
        found = self._due.get(kind, {}).get(ticket) if ticket is not None else None
        if found is None:
            return None
        return {"deadline": found.deadline, "seconds_left": max(0.0, found.deadline - (now or time.time())), "action": found.action}

    def idle_seconds(self, slice_id: str, now: float | None = None) -> float | None:
        """How long the slice has been idle (None: not judged idle)."""
        since = self.idle_since.get(slice_id)
        return None if since is None else max(0.0, (now or time.time()) - since)

    # -- what the engine and its sources do --------------------------------------------------
    def of(self, kind: str) -> Mapping[str, Notice]:
        """The notices of ``kind`` in force, by slice id."""
        return self._notices.setdefault(kind, {})

    async def announce(
        self, notice: Notice, usage: SliceUsage, message: str, kept_at: Callable[[str], float | None] | None = None
    ) -> bool:
        """Tell the slice's kernel ``message`` (it prints it at its next cell), then publish the
        notice, unless its owner said "Keep it" meanwhile (``kept_at``: when they last did, where
        that ends the notice). True when it was published."""
        before = kept_at(notice.slice_id) if kept_at is not None else None
        await self.tell(usage, notice.kind, "ahead", message)
        if kept_at is not None and kept_at(notice.slice_id) != before:
            return False
        self._notices.setdefault(notice.kind, {})[notice.slice_id] = notice
        return True

    def withdraw(self, kind: str, slice_id: str) -> Notice | None:
        """Take a notice down (a reclaim that will not happen, or one under way); the notice, if any."""
        return self._notices.get(kind, {}).pop(slice_id, None)

    def set_due(self, kind: str, due: Mapping[int, Due]) -> None:
        self._due[kind] = dict(due)

    async def tell(self, usage: SliceUsage, kind: str, stage: str, message: str) -> None:
        """Leave the slice's kernel a notice (the watchdog's :func:`.watchdog.leave_notice`)."""
        await leave_notice(self.ledger_path, usage, kind, stage, message, self.log)
