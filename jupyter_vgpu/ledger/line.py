"""The waiting line's order (README.md, "Waiting in line"): whom a request waits behind, and when
a request that fits now may pass earlier places that cannot be placed now."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence

from ..errors import InvalidRequest, NotPermitted
from ..slices.occupancy import GPUOccupancy
from ..slices.placement import Placement, needs, place, same_gpu
from ..slices.request import SliceRequest

#: A place in line whose requester has not asked for it for this many seconds is dropped: a
#: waiting request asks every poll interval (a fraction of a second), one that stopped (its
#: process hangs or ignores the line) must not hold everyone else back.
STALE_WAITER = 30.0

#: At most this many requests wait in line at once (a bound on what anyone can queue).
MAX_WAITING = 256

#: A place in line that waited this long is no longer passed on the GPUs it is likeliest to get
#: (see :func:`backfill`); younger ones are passed by requests that fit now.
BACKFILL_SECONDS = 120.0


def ahead(
    db: sqlite3.Connection, request: SliceRequest, uid: int, ticket: int | None, gpus: Sequence[GPUOccupancy]
) -> list[sqlite3.Row]:
    """The earlier places in line this request waits behind: first come, first served, with
    two bounds on what others can hold back (README.md, "Waiting in line"): another user
    blocks it with their earliest place only, and a place pinned to another GPU of ``gpus`` not
    at all (``0`` and GPU 0's UUID are one GPU)."""
    rows = db.execute(
        "SELECT ticket, uid, owner, request, created FROM queue" + (" WHERE ticket < ?" if ticket is not None else "")
        + " ORDER BY ticket",
        () if ticket is None else (ticket,),
    ).fetchall()
    seen: set[int] = set()
    ahead = []
    for row in rows:
        first_of_user = row["uid"] not in seen
        seen.add(row["uid"])
        if row["uid"] != uid and not first_of_user:
            continue
        pinned = json.loads(row["request"]).get("gpu")
        if pinned is not None and request.gpu is not None and not same_gpu(str(pinned), str(request.gpu), gpus):
            continue
        ahead.append(row)
    return ahead


def backfill(
    request: SliceRequest,
    earlier: list[sqlite3.Row],
    gpus: tuple[GPUOccupancy, ...],
    placement: Placement,
    *,
    allowance: Callable[[GPUOccupancy], int],
    allowed_gpus: frozenset[str] | None,
    allowed_for_row: Callable[[sqlite3.Row], frozenset[str] | None],
) -> tuple[Placement, int]:
    """A request that fits now may pass earlier places in line that cannot be placed now (one
    ``--wait`` for a whole GPU must not stop everyone's quarter): the placement it gets, and how
    many earlier places it still waits behind (0: it goes first). It never passes one that fits
    now (that one takes it at its next try). A place that has waited :data:`BACKFILL_SECONDS`
    keeps the GPUs it is likeliest to get first (the freest that can hold it): requests that
    pass it go elsewhere or wait, so it is not passed for ever."""
    drained: set[str] = set()
    now = time.time()
    for row in earlier:
        waiting = SliceRequest.from_dict(json.loads(row["request"]))
        try:
            if place(waiting, gpus, allowance=allowance, allowed=allowed_for_row(row)):
                return placement, len(earlier)  # it fits now: first come, first served
        except (InvalidRequest, NotPermitted):
            continue  # pinned to a GPU that is gone or not its own: it waits for nothing here
        if now - row["created"] >= BACKFILL_SECONDS:
            need = needs(waiting, gpus)
            big_enough = [g for g in gpus if not g.in_mig_mode and need[g.uuid] <= g.total]
            big_enough.sort(key=lambda g: (-g.free, g.index))
            drained.update(g.uuid for g in big_enough[: waiting.gpus])
    if not drained:
        return placement, 0
    allowed = {g.uuid for g in gpus if allowed_gpus is None or g.uuid in allowed_gpus} - drained
    if not allowed:
        return Placement(candidates=placement.candidates), len(earlier)
    elsewhere = place(request, gpus, allowance=allowance, allowed=allowed)
    return (elsewhere, 0) if elsewhere else (placement, len(earlier))
