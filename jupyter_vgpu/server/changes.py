"""What changed in ``GET /api/vgpu/slices`` since a poller's previous reply (docs/rest.md).

JupyterLab polls the slices every few seconds (the ``slices`` of ``GET /api/vgpu/sample``, made
the same way) with ``?since=`` the ``taken_at`` of its previous reply. Most of a slice's fields
never change (its request, GPUs, labels, notes) and its use only when a sample differs, so such a
reply lists every slice by ``id`` and ``kernel_id`` (a server in front of a GPU node names the
notebook by it) with only the fields whose value changed after ``since``, and the history points
taken after it; the poller keeps the rest from its earlier replies. The top-level ``watchdog`` is left out while it is unchanged.

Every reply this server makes is noted here, whoever asked and with whatever ``since``: each
field with a stamp for when its current value was first seen, on the clock of ``since``, the
samples' ``taken_at``. A value first seen in the first reply from a sample newer than any before
is stamped with that sample's time; one first seen later (a notebook renamed while the sample
stays the newest, or a reply from an older sample finished late) just after the newest sample's
time. A field is sent when its stamp is after ``since``. That is exact for every poller: a
value stamped at or before ``since`` was first seen no later than the poller's previous reply
(from the sample taken at ``since``) was noted, and has not changed since, or its stamp would be
later; so that reply, or one before it, gave the poller this value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Fields a slice carries in every reply, changed or not: which slice, and which kernel holds it.
ALWAYS = ("id", "kernel_id")

#: Fields that are never noted: new points come by ``since`` on their own.
HISTORY = "history"

_REPLY = ("reply",)  # the key of the reply's own fields (slices are keyed by their id)


class Changes:
    """Each field of each view as last sent, and when that value was first seen."""

    def __init__(self) -> None:
        # key -> (the view as last noted, when each of its fields took its value)
        self._seen: dict[tuple[str, ...], tuple[dict[str, Any], dict[str, float]]] = {}
        self._newest = -math.inf  # the newest sample a reply was made from

    def stamp(self, taken_at: float) -> float:
        """The stamp of what a reply from the sample taken at ``taken_at`` shows first: that
        time, for the first reply from a sample newer than all before; else just after the
        newest sample's time, after every ``since`` a poller can hold (also when the wall clock
        stepped back and samples are stamped earlier)."""
        if taken_at > self._newest:
            self._newest = taken_at
            return taken_at
        return math.nextafter(self._newest, math.inf)

    def note(self, key: tuple[str, ...], view: dict[str, Any], now: float) -> dict[str, float]:
        """Remember ``view`` as the latest of ``key``; returns when each of its fields took its
        value (``now`` for a value not seen before)."""
        before, stamps = self._seen.get(key, ({}, {}))
        if not _same_fields(before, view):
            stamps = {field: stamps[field] if _same(before.get(field, _NONE), value) else now for field, value in view.items()}
        self._seen[key] = (view, stamps)
        return stamps

    def keep(self, keys: set[tuple[str, ...]]) -> None:
        """Forget the views not in ``keys`` (slices that have ended)."""
        for key in [k for k in self._seen if k not in keys]:
            del self._seen[key]

    def slices_reply(self, reply: dict[str, Any], since: float) -> dict[str, Any]:
        """Note a whole ``GET /api/vgpu/slices`` reply (its slices' history after ``since``);
        with ``since`` (> 0), return only what changed after it."""
        now = self.stamp(reply["taken_at"])
        incremental = since > 0
        slices = []
        for view in reply["slices"]:
            fields = {k: v for k, v in view.items() if k != HISTORY}
            changed_at = self.note(("slice", view["id"]), fields, now)
            if incremental:
                changed = {k: v for k, v in fields.items() if k in ALWAYS or changed_at[k] > since}
                slices.append({**changed, HISTORY: view[HISTORY]})
        own = self.note(_REPLY, {"watchdog": reply["watchdog"]}, now)
        self.keep({_REPLY, *(("slice", view["id"]) for view in reply["slices"])})
        if not incremental:
            return reply
        changes = {**reply, "slices": slices}
        if own["watchdog"] <= since:
            del changes["watchdog"]
        return changes


_NONE = object()  # no value: a field a view did not have


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type: ``1`` after ``True`` is a change for a JSON reader."""
    return type(a) is type(b) and a == b


def _same_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Every field :func:`_same` (the usual case, compared at C speed: a poll in which nothing
    about a slice changed)."""
    return a == b and list(a) == list(b) and all(type(x) is type(y) for x, y in zip(a.values(), b.values()))
