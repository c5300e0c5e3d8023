"""One node's GPU memory over time, from the site's Prometheus: its GPUs' total, booked and used
memory, and what one user's own slices book and use there (docs/rest.md, "The cluster").

Five range queries side by side on one grid of ``POINTS`` steps. Each GPU's figure is taken once
(``max by (UUID)``) however many jobs scrape it (a node's exporter and its users' servers serve
the same series), and a user's share is their own slices only, joined on ``slice_info{user=...}``:
another user's slices are in the node's booked and used memory, never apart.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import InvalidRequest, SliceNotFound
from ..units import shorten
from .cluster import FORGET_AFTER
from .prometheus import Prometheus, string
from .series import GPU_RESERVED, GPU_TOTAL, GPU_USED, NODE_READ_AT, SLICE_INFO, SLICE_REQUEST, SLICE_USED

#: Points in a history (a step is the span over this many, at least a second).
POINTS = 240
MIN_SECONDS, MAX_SECONDS = 60, 7 * 86400


class NodeUnknown(SliceNotFound):
    """No node of that name ever reported to Prometheus (in the last 7 days): REST 404."""


def history_seconds(text: str | None) -> int:
    """``?seconds=``: how far back, 60 s to 7 days (default an hour); one sentence otherwise."""
    if text is None or text == "":
        return 3600
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not MIN_SECONDS <= value <= MAX_SECONDS:
        raise InvalidRequest(f"seconds={shorten(text)} is not allowed: give {MIN_SECONDS} to {MAX_SECONDS} (7 days).")
    return int(value)


def read_node_history(prometheus: Prometheus, hostname: str, *, user: str, seconds: int = 3600, now: float | None = None) -> dict[str, Any]:
    """The node's history over the last ``seconds``; raises :class:`NodeUnknown` for a name
    Prometheus never saw, :class:`~.prometheus.PrometheusUnavailable` when it cannot answer."""
    now = time.time() if now is None else now
    step = float(max(1, math.ceil(seconds / POINTS)))
    end = math.floor(now / step) * step  # on a grid of whole steps, so every query's times are the same
    start = end - math.floor(seconds / step) * step
    host, who = string(hostname), string(user)
    mine = f"and on(slice, hostname) {SLICE_INFO.name}{{hostname={host}, user={who}}}"
    queries = {
        "total": f"sum(max by (UUID) ({GPU_TOTAL.name}{{hostname={host}}}))",
        "booked": f"sum(max by (UUID) ({GPU_RESERVED.name}{{hostname={host}}}))",
        "used": f"sum(max by (UUID) ({GPU_USED.name}{{hostname={host}}}))",
        "yours_booked": f"sum(max by (slice, UUID) ({SLICE_REQUEST.name}{{hostname={host}}} {mine}))",
        "yours_used": f"sum(max by (slice, UUID) ({SLICE_USED.name}{{hostname={host}}} {mine}))",
    }
    known = f"last_over_time({NODE_READ_AT.name}{{hostname={host}}}[{int(FORGET_AFTER)}s])"
    with ThreadPoolExecutor(max_workers=len(queries) + 1, thread_name_prefix="jupyter-vgpu-cluster") as pool:
        seen = pool.submit(prometheus.query, known, at=now)
        answers = dict(zip(queries, pool.map(lambda q: prometheus.query_range(q, start=start, end=end, step=step), queries.values())))
        if not seen.result() and not answers["total"]:
            raise NodeUnknown(f"No node named {shorten(hostname)} has reported to Prometheus at {prometheus.url} in the last 7 days.")
    grid = [start + i * step for i in range(round((end - start) / step) + 1)]
    reply: dict[str, Any] = {"hostname": hostname, "seconds": seconds, "step": step, "t": grid}
    for name, series in answers.items():
        values = {round(at): value for _, points in series for at, value in points}
        reply[name] = [_figure(values.get(round(t))) for t in grid]
    for name, basis in (("yours_booked", "booked"), ("yours_used", "used")):
        # Where the node reported and you held nothing: 0, not unknown.
        reply[name] = [0 if value is None and reply[basis][i] is not None else value for i, value in enumerate(reply[name])]
    return reply


def _figure(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if value == int(value) else round(value, 1)
