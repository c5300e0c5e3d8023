"""Who needs room, as the reclaim engine reads it from one sample: the wants.

A want is a request waiting in line (first in line first) or a kernel start refused lately
(newest first); an over-full GPU (:class:`Overbooked`) is a want of its own, with nobody waiting.
:class:`ServedUsers` bounds how often one user's wants may take room back.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidRequest
from ...slices import SliceRequest
from ...slices.records import HIDDEN_HOLDER, Waiter
from ...units import format_bytes
from ..monitor import Sample


@dataclass(frozen=True)
class Want:
    """Someone who needs room: a request waiting in line, or a kernel start refused lately."""

    request: SliceRequest
    uid: int  # whose: one user's wants together cause a bounded number of reclaims
    words: str  # how a notice names it
    allowed: frozenset[str] | None = None  # the GPUs its policy allows (UUIDs; None: any)
    ticket: int | None = None  # its place in line (None: a refused start)


@dataclass(frozen=True)
class Overbooked:
    """The requests on one GPU, booked and not yet used, whose memory bursts hold: a want of its own."""

    gpu: int
    excess: int
    uid: None = None  # nobody's request in line: it counts against no user's bound

    @property
    def words(self) -> str:
        return f"the requests booked on GPU {self.gpu} need {format_bytes(self.excess)} that bursts hold"


class ServedUsers:
    """When a reclaim last let each user's request in (a uid's wants then wait ``seconds`` for
    the next): the bound each source keeps."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._when: dict[int, float] = {}

    def lately(self, uid: int | None, now: float) -> bool:
        when = self._when.get(uid) if uid is not None else None
        return when is not None and now - when < self.seconds

    def served(self, uid: int | None, now: float) -> None:
        if uid is not None:
            self._when[uid] = now
        for gone in [u for u, t in self._when.items() if now - t >= self.seconds]:
            del self._when[gone]


def wants_of(sample: Sample, refused: Sequence[Mapping[str, Any]], demand_seconds: float, uid: int) -> list[Want]:
    """Who needs room: first in line first, then the kernel starts ``refused`` lately (newest
    first, as the refusal store lists them) by this server's user ``uid``."""
    wants = [
        Want(
            w.request,
            w.uid,
            _waiter_words(w, len(sample.waiting), uid),
            None if w.allowed_gpus is None else frozenset(w.allowed_gpus),
            w.ticket,
        )
        for w in sample.waiting
    ]
    count = f"{len(refused)} kernel start{'s' if len(refused) > 1 else ''} refused in the last {demand_seconds / 60:.0f} min"
    for entry in refused:
        try:
            request = SliceRequest.from_dict(entry["request"])
        except (KeyError, TypeError, InvalidRequest):
            continue  # refused for something no room would mend (or an old record)
        allowed = frozenset(str(u) for u in entry.get("allowed_gpus") or ()) or None
        wants.append(Want(request, uid, count, allowed))
    return wants


def _waiter_words(waiter: Waiter, count: int, uid: int) -> str:
    if waiter.uid != uid:
        holder = HIDDEN_HOLDER[waiter.holder_kind]  # never another user's command line, even hidden
    else:
        holder = waiter.labels.get("path") or (_program(waiter.holder) if waiter.holder_kind == "command" else "a kernel")
    where = "first: " if waiter.position == 1 else f"#{waiter.position}: "
    return f"{count} waiting in line ({where}{holder}, {waiter.request.describe()})"


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
