"""What a source of the reclaim engine answers: a reason to take room back (an idle kernel, a
burst), as one module. The engine keeps the loop (the wants, the notices, acting when due); a
source answers only its own questions: which of its holders could give room back (its
candidates, chosen with :func:`.plan.plan` and what giving back frees), what its notice says,
and what its action is.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...slices.usage import SliceUsage
from ..monitor import Sample
from ..watchdog import Watchdog, WatchdogEvent
from .board import Due, Notice, NoticeBoard
from .plan import Allowance


@dataclass(frozen=True)
class Group:
    """Holders that give room back for one want, acted on together once all their notices ran out."""

    slices: tuple[str, ...]
    waiting: str  # who needs the room, in words
    uid: int | None = None  # whose want: what the user's bound counts


@dataclass(frozen=True)
class Choice:
    """A source's answer for one sample: the groups to give notice to (any notice of its kind
    outside them is withdrawn), the indices of the wants it serves (not offered to the next
    source) and, per place in line it serves, the holders whose room it waits for."""

    groups: tuple[Group, ...] = ()
    served: frozenset[int] = frozenset()
    due: Mapping[int, Sequence[str]] = field(default_factory=dict)


class Source(ABC):
    """The base of a source: overridden where the source has something to say; a source must say
    what its notice is (:meth:`announcement`) and do its action (:meth:`act`)."""

    #: Its notices' kind, its watchdog events' action and what REST's notice field is named after.
    kind = ""
    #: What happens when a notice runs out, in REST's ``burst_due`` words (``action``).
    action = ""
    #: Whether a notice may be acted on in the very sample it was given (a notice of 0 seconds).
    acts_on_a_new_notice = True

    def __init__(self, kernel_manager: Any, watchdog: Watchdog, notice: float, log: logging.Logger | None = None) -> None:
        self.kernel_manager = kernel_manager  # the server's: what the actions go through
        self.watchdog = watchdog  # where each action is recorded, with the over-limit events
        self.notice_seconds = notice
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.acting: set[str] = set()  # its holders whose action is under way (the engine keeps it)

    def observe(self, sample: Sample, board: NoticeBoard) -> bool:
        """Follow one sample (called for every sample that succeeded, before any want is read);
        True when the source has something to give back and needs the wants."""
        return False

    def choose(self, sample: Sample, wants: Sequence[Any], board: NoticeBoard, allowance: Allowance) -> Choice | None:
        """Which of its holders give room back to whom; None leaves its notices as they are."""
        return None

    @abstractmethod
    def announcement(self, usage: SliceUsage, group: Group, sample: Sample, board: NoticeBoard) -> tuple[Notice, str]:
        """The notice to the holder's owner and the words the kernel prints (and the log says)."""

    def withdrawn(self, slice_id: str, notice: Notice) -> str:
        """Why a notice is withdrawn, for the log: "slice X <these words>; its notice is withdrawn"
        (the engine asks once per notice withdrawn: a source counts what it must here)."""
        return f"is no longer needed by {notice.waiting}"

    def begin(self, group: Group, notices: Sequence[Notice], now: float) -> None:
        """The group's notices ran out and its action begins (count it against the user's bound)."""
        return None  # a hook: nothing to count by default

    @abstractmethod
    async def act(self, usage: SliceUsage, notice: Notice, group: Group, sample: Sample, board: NoticeBoard) -> bool:
        """The action on one holder whose notice ran out; True when the monitor should reap soon."""

    def keep(self, slice_id: str, board: NoticeBoard) -> bool:
        """The owner's "Keep it"; True when it cancelled a notice of this source."""
        return False

    def kept_at(self, slice_id: str) -> float | None:
        """When the owner last said "Keep it", where that ends this source's notices (None: never)."""
        return None

    def due_of(self, choice: Choice, board: NoticeBoard, now: float) -> dict[int, Due]:
        """By when each place in line ``choice`` serves gets its room (the last of its notices)."""
        notices = board.of(self.kind)
        return {
            ticket: Due(max(notices[s].deadline if s in notices else now for s in sids), self.action)
            for ticket, sids in choice.due.items()
        }

    def close(self) -> None:
        """The server stops."""
        return None  # a hook: nothing to close by default

    def record(self, usage: SliceUsage, ok: bool, message: str, action: str) -> None:
        """An action taken (or failed): a watchdog event of this source's kind, counted with
        ``action`` (restart, shutdown, ...), and a log line."""
        s = usage.slice
        event = WatchdogEvent(
            time.time(), s.id, s.holder, self.kind, ok, message, path=s.labels.get("path"),
            memory_used=usage.memory_used, memory_reserved=usage.memory_reserved_total,
        )  # fmt: skip
        self.watchdog.record(event, kind=self.kind, action=action)
        (self.log.warning if ok else self.log.error)("jupyter-vgpu: %s", message)

