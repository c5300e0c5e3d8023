"""GPU memory-hours per user, group or node from the site's Prometheus: booked, used, and booked
but idle (``jupyter vgpu report``; the chargeback and "what do my users really need" questions).

One instant query per figure, each a subquery over the period: the per-slice-per-GPU series are
taken once however many jobs scrape them (``max by (slice, UUID, hostname)``), joined to their
slice's user on ``slice, hostname``, summed by the key, and summed over time at ``step``; times
the step, that is byte-seconds. ``idle`` is booked less used, where the use is known (a slice
whose use is unknown counts in booked only).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import InvalidRequest
from ..units import shorten
from .prometheus import Prometheus
from .series import SLICE_INFO, SLICE_REQUEST, SLICE_USED

BY = ("user", "group", "node")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
MAX_SECONDS = 400 * 86400
#: At most this many steps in a period (a step is never shorter than ``MIN_STEP``).
STEPS = 1000
MIN_STEP = 15.0


def span_seconds(text: str, *, what: str = "--since") -> float:
    """``7d``, ``24h``, ``90m``, ``3600`` (seconds) -> seconds; one sentence otherwise."""
    match = _SPAN.match(text or "")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"] if match else 0.0
    if not 60 <= seconds <= MAX_SECONDS:
        raise InvalidRequest(f"{what} {shorten(text)} is not a period: give 60 s to 400 days, such as 7d, 24h, 90m or 3600 (seconds).")
    return seconds


@dataclass(frozen=True)
class ReportRow:
    key: str
    booked: float  # byte-hours
    used: float
    idle: float


def _per_slice(series: str) -> str:
    return f"max by (slice, UUID, hostname) ({series})"


def memory_hours(
    prometheus: Prometheus,
    *,
    since: float,
    by: str = "user",
    step: float | None = None,
    now: float | None = None,
    groups_of: Callable[[str], Iterable[str]] | None = None,
) -> list[ReportRow]:
    """GPU memory-hours (byte-hours) booked, used and idle over the last ``since`` seconds, per
    ``by`` (user, group or node), the most booked first. A user in several groups counts in each."""
    if by not in BY:
        raise InvalidRequest(f"--by {shorten(by)} is not allowed; use one of {', '.join(BY)}.")
    step = step or max(MIN_STEP, since / STEPS)
    key = "hostname" if by == "node" else "user"
    info = f"max by (slice, hostname, user) ({SLICE_INFO.name})"
    request, used = _per_slice(SLICE_REQUEST.name), _per_slice(SLICE_USED.name)
    figures = {"booked": request, "used": used, "idle": f"clamp_min({request} - {used}, 0)"}
    queries = {
        name: f"sum_over_time((sum by ({key}) ({expr} * on(slice, hostname) group_left(user) {info}))[{int(since)}s:{step:g}s])"
        for name, expr in figures.items()
    }
    with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="jupyter-vgpu-report") as pool:
        answers = dict(zip(queries, pool.map(lambda q: prometheus.query(q, at=now), queries.values())))
    totals: dict[str, dict[str, float]] = {}
    for name, points in answers.items():
        for point in points:
            names = [point.labels.get(key, "")]
            if by == "group":
                names = list(groups_of(names[0]) if groups_of is not None else []) or ["(no group)"]
            for name_ in names:
                totals.setdefault(name_, {"booked": 0.0, "used": 0.0, "idle": 0.0})[name] += point.value * step / 3600
    rows = [ReportRow(k, v["booked"], v["used"], v["idle"]) for k, v in totals.items()]
    return sorted(rows, key=lambda r: (-r.booked, r.key))
