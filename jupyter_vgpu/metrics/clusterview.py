"""The cluster as one reading of it shows it (:func:`~.cluster.read_cluster` builds it): nodes,
their GPUs and line, slices and their use on each GPU; the REST reply it makes (docs/rest.md, "The
cluster": a user's view names no user) and what the views sum from it (top users, a node's totals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: A node whose newest reading is older than this is stale (its exporter reads every 5 s by default).
STALE_AFTER = 60.0


@dataclass
class ClusterGPU:
    index: int
    uuid: str
    model: str
    total: float | None = None
    booked: float | None = None
    used: float | None = None
    free: float | None = None
    utilization: float | None = None


@dataclass
class ClusterNode:
    hostname: str
    last_seen: float | None
    stale: bool
    #: Why the node is stale or shows no figures, one sentence; None when fresh.
    problem: str | None = None
    gpus: list[ClusterGPU] = field(default_factory=list)
    waiting_requests: float | None = None
    waiting_memory: float | None = None
    #: When the figures shown were scraped (the last whole scrape, for a stale node).
    figures_at: float | None = None


@dataclass
class SliceOnGPU:
    index: int | None
    uuid: str
    request: float | None = None
    limit: float | None = None
    used: float | None = None
    burst: float | None = None
    utilization: float | None = None
    share_utilization: float | None = None


@dataclass
class ClusterSlice:
    id: str
    hostname: str
    user: str
    kernel_id: str
    holder: str
    launcher: str
    tier: str
    gpus: list[SliceOnGPU] = field(default_factory=list)
    #: Seconds its kernel has been idle (0: busy), as its user's server judged; None when unknown.
    idle_seconds: float | None = None


@dataclass
class ClusterView:
    prometheus: str
    read_at: float
    nodes: list[ClusterNode]
    slices: list[ClusterSlice]
    #: An admin's view names every slice's user; a user's shows only their own slices.
    admin: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The REST reply (docs/rest.md, "The cluster"): a user's view names no user."""
        return {
            "prometheus": self.prometheus,
            "read_at": self.read_at,
            "stale_after": STALE_AFTER,
            "nodes": [_node_dict(n) for n in self.nodes],
            "slices": [_slice_dict(s, admin=self.admin) for s in self.slices],
        }


def _node_dict(node: ClusterNode) -> dict[str, Any]:
    models = {g.model for g in node.gpus}
    model = models.pop() if len(models) == 1 else None
    gpus = []
    for g in node.gpus:
        entry: dict[str, Any] = {"index": g.index, "uuid": g.uuid}
        if model is None:
            entry["model"] = g.model
        entry |= {"total": _n(g.total), "booked": _n(g.booked), "used": _n(g.used), "free": _n(g.free), "utilization": _n(g.utilization)}
        gpus.append(entry)
    return {
        "hostname": node.hostname,
        "last_seen": node.last_seen,
        "stale": node.stale,
        "problem": node.problem,
        "figures_at": node.figures_at,
        "model": model,
        "gpus": gpus,
        "waiting": {"requests": _n(node.waiting_requests), "memory": _n(node.waiting_memory)},
    }


def _n(value: float | None) -> float | int | None:
    """A figure for JSON: bytes and counts as integers, utilisation to a tenth of a percent."""
    if value is None:
        return None
    return int(value) if value == int(value) else round(value, 1)


def _slice_dict(s: ClusterSlice, *, admin: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": s.id, "hostname": s.hostname}
    if admin:
        entry["user"] = s.user
    entry |= {"kernel_id": s.kernel_id or None, "holder": s.holder, "launcher": s.launcher, "tier": s.tier}
    entry["idle_seconds"] = None if s.idle_seconds is None else round(s.idle_seconds)
    entry["gpus"] = [
        {
            "index": g.index, "uuid": g.uuid, "request": _n(g.request), "limit": _n(g.limit), "used": _n(g.used),
            "burst": _n(g.burst), "utilization": _n(g.utilization), "share_utilization": _n(g.share_utilization),
        }
        for g in s.gpus
    ]  # fmt: skip
    return entry


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``5 h``, ``3 days``."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


def top_users(view: ClusterView, *, by: str = "booked", limit: int = 10) -> list[dict[str, Any]]:
    """An admin's view's users by GPU memory ``booked`` (or booked but ``unused``: booked less used,
    where known), the most first, each with what they book, use and leave unused."""
    users: dict[str, dict[str, Any]] = {}
    for s in view.slices:
        entry = users.setdefault(s.user, {"user": s.user, "booked": 0, "used": 0, "unused": 0, "slices": 0, "unknown": 0})
        entry["slices"] += 1
        for g in s.gpus:
            booked = g.request or 0
            entry["booked"] += booked
            if g.used is None:
                entry["unknown"] += 1
                continue
            entry["used"] += g.used
            entry["unused"] += max(0.0, booked - g.used)
    other = "unused" if by == "booked" else "booked"
    ranked = sorted(users.values(), key=lambda u: (-u[by], -u[other], u["user"]))
    return [{**u, "booked": _n(u["booked"]), "used": _n(u["used"]), "unused": _n(u["unused"])} for u in ranked[:limit]]


def node_totals(node: Mapping[str, Any]) -> dict[str, float | None]:
    """A node's sums over its GPUs (a REST node's ``gpus``), None where a GPU's figure is unknown."""
    totals: dict[str, float | None] = {}
    for name in ("total", "booked", "used", "free"):
        values = [g.get(name) for g in node.get("gpus") or []]
        totals[name] = None if not values or any(v is None for v in values) else float(sum(values))
    return totals
