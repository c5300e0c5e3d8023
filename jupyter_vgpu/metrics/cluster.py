"""The cluster as a site's Prometheus sees it: every node that ever served our series, its GPUs
and line, and the slices one user may see (every slice, named, for an admin).

Read with a fixed set of instant queries, asked side by side:

1. each node's last reading in the last hour (``last_over_time`` of the exporters'
   ``jupyter_vgpu_node_reading_timestamp_seconds``), and every node that reported within
   ``forget_after`` from Prometheus's index (no sample read); a node silent for longer than the
   hour has its last reading asked alone (:func:`last_readings`);
2. the node series now (GPUs, line, whether the exporter could read its node);
3. the slices now: the user's only (``slice_info{user=...}``, then their per-GPU and idle series
   asked by slice id and joined on ``slice, hostname``), or every one for an admin;
4. for each node that is not fresh now (its exporter down, or unable to read its node), its raw
   samples of the five minutes after its last reading: the figures of its last whole scrape.

A node is never dropped and never zeroed: a stale one keeps the figures of its last scrape that
read it, and says when that was. A scrape is whole or absent in Prometheus (a failed scrape marks
every series of its target stale), and query 4 keeps only the samples of one scrape, so no view
shows half a node. Another user's slices are counted in their node's figures (booked, used, free,
the line) and never named: their series never leave this module for a user's view.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .clusterview import STALE_AFTER, ClusterGPU, ClusterNode, ClusterSlice, ClusterView, SliceOnGPU, duration
from .prometheus import Point, Prometheus, string
from .series import (
    GPU_FREE,
    GPU_INFO,
    GPU_RESERVED,
    GPU_TOTAL,
    GPU_USED,
    GPU_UTIL,
    NODE_READ_AT,
    NODE_UP,
    SLICE_BURST,
    SLICE_IDLE,
    SLICE_INFO,
    SLICE_LIMIT,
    SLICE_REQUEST,
    SLICE_SHARE_UTIL,
    SLICE_USED,
    SLICE_UTIL,
    WAITING,
    WAITING_MEMORY,
    Series,
)

#: A node that has not reported for this long is forgotten (a node taken out of the cluster).
FORGET_AFTER = 7 * 86400.0
#: How far back each node's last reading is read at once. A node silent longer (up to
#: ``FORGET_AFTER``) is found in Prometheus's index (``/api/v1/series``: no sample read) and its last
#: reading asked alone: a week's look-back for every node read every sample of the week (79 ms at
#: 64 nodes with one reading a minute, against 24 ms this way; benchmarks/cluster.py --week).
RECENT = 3600.0
#: How far after its last reading a stale node's last scrape is looked for (Prometheus's own look-back).
LAST_SCRAPE_WINDOW = 300.0
#: At most this many stale nodes get their last figures read (each costs a query); the rest say so.
MAX_STALE_READS = 64

_NODE = (GPU_INFO, GPU_TOTAL, GPU_RESERVED, GPU_USED, GPU_FREE, GPU_UTIL, WAITING, WAITING_MEMORY, NODE_UP, NODE_READ_AT)
_SLICE_GPU = (SLICE_REQUEST, SLICE_LIMIT, SLICE_USED, SLICE_BURST, SLICE_UTIL, SLICE_SHARE_UTIL)
#: The per-slice series (``{slice, hostname}``), read with the per-GPU ones.
_PER_SLICE = (*_SLICE_GPU, SLICE_IDLE)
#: The per-slice series, one per series of the label contract whoever scraped it, without
#: the labels of who did (``job``, ``instance``): what Prometheus encodes and this module decodes.
_PER_SERIES = "max by (__name__, slice, UUID, hostname)"


def _names(series: Iterable[Series]) -> str:
    return "|".join(s.name for s in series)


def read_cluster(
    prometheus: Prometheus,
    *,
    user: str | None,
    now: float | None = None,
    stale_after: float = STALE_AFTER,
    forget_after: float = FORGET_AFTER,
) -> ClusterView:
    """The cluster now: ``user``'s own slices, or every slice (named) when ``user`` is None.
    Raises :class:`~.prometheus.PrometheusUnavailable` when Prometheus cannot answer."""
    now = time.time() if now is None else now
    mine = f"{SLICE_INFO.name}{{user={string(user)}}}" if user is not None else SLICE_INFO.name
    slice_series = f'__name__=~"{_names(_PER_SLICE)}"'
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="jupyter-vgpu-cluster") as pool:
        readings = pool.submit(last_readings, prometheus, now, forget_after)
        current_answer = pool.submit(prometheus.query, f'{{__name__=~"{_names(_NODE)}"}}', at=now)
        # An admin's: every slice's (a series without its slice's info is left out below). A
        # user's: their slices' only, asked by id once their infos are in, which Prometheus
        # answers from its index (a join alone makes it read every slice's: 70 ms at 64 nodes).
        everyone = pool.submit(prometheus.query, f"{_PER_SERIES} ({{{slice_series}}})", at=now) if user is None else None
        infos = prometheus.query(mine, at=now)
        if everyone is not None:
            per_gpu = everyone.result()
        elif ids := sorted({p.labels.get("slice", "") for p in infos}):
            pattern = string("|".join(re.escape(i) for i in ids))
            per_gpu = prometheus.query(f"{_PER_SERIES} ({{{slice_series}, slice=~{pattern}}}) and on(slice, hostname) {mine}", at=now)
        else:
            per_gpu = []
        current = current_answer.result()
        last_reading, silent = readings.result()
        by_host = _by_host(current)
        fresh = {
            host
            for host, points in by_host.items()
            if any(p.name == NODE_UP.name and p.value == 1 for p in points)
            and now - _latest(points, NODE_READ_AT, default=now) <= stale_after
        }
        hosts = sorted((set(last_reading) | set(by_host) | silent) - {""})
        stale = [h for h in hosts if h not in fresh]
        read = stale[:MAX_STALE_READS]

        def last_of(host: str) -> list[Point]:
            at = last_reading.get(host)
            if at is None and host in silent:  # silent for over an hour: its last reading asked alone
                found = prometheus.query(f"last_over_time({NODE_READ_AT.name}{{hostname={string(host)}}}[{int(forget_after)}s])", at=now)
                at = max((p.value for p in found), default=None)
                if at is not None:
                    last_reading[host] = at
            return _last_scrape(prometheus, host, at, now)

        last_scrapes = dict(zip(read, pool.map(last_of, read)))
    nodes: list[ClusterNode] = []
    slice_points = list(_dedup(infos)) + list(_dedup(per_gpu))
    for host in hosts:
        if host in fresh:
            node = _node(host, by_host[host], last_seen=_latest(by_host[host], NODE_READ_AT, default=None), stale=False)
        elif host in last_scrapes:
            scraped = last_scrapes[host]
            node = _node(host, scraped, last_seen=last_reading.get(host), stale=True)
            node.problem = _why_stale(host, by_host.get(host, []), node, now)
            slice_points += [p for p in scraped if p.name == SLICE_INFO.name and (user is None or p.labels.get("user") == user)]
            kept = {(p.labels.get("slice"), host) for p in slice_points if p.name == SLICE_INFO.name}
            slice_points += [p for p in scraped if p.name in _SLICE_NAMES and (p.labels.get("slice"), host) in kept]
        else:
            node = ClusterNode(host, last_reading.get(host), True)
            node.problem = f"{host} has not reported lately; its last figures were not read (more than {MAX_STALE_READS} nodes are stale)."
        nodes.append(node)
    return ClusterView(prometheus.url, now, nodes, _slices(slice_points, nodes, user), admin=user is None)


_SLICE_NAMES = {s.name for s in _PER_SLICE}


def last_readings(prometheus: Prometheus, now: float, forget_after: float) -> tuple[dict[str, float], set[str]]:
    """Each node's last reading within :data:`RECENT` (one query over the hour's samples), and the
    nodes that reported within ``forget_after`` but not in that hour (from the index alone)."""
    recent: dict[str, float] = {}
    for point in prometheus.query(f"last_over_time({NODE_READ_AT.name}[{int(min(RECENT, forget_after))}s])", at=now):
        host = point.labels.get("hostname", "")
        recent[host] = max(point.value, recent.get(host, 0.0))
    known = {labels.get("hostname", "") for labels in prometheus.series(NODE_READ_AT.name, start=now - forget_after, end=now)}
    return recent, known - set(recent) - {""}


def _key(point: Point) -> tuple[str, str | None, str | None, str | None]:
    """What names a series in the label contract: its name, node, GPU and slice. The rest say who
    scraped it (``job``, ``instance``, a site's target labels) or are figures of it (a GPU's index,
    which a container renumbers; a slice's user and holder)."""
    labels = point.labels
    return point.name, labels.get("hostname"), labels.get("UUID"), labels.get("slice")


def _dedup(points: Iterable[Point]) -> Iterable[Point]:
    """One point per series, whatever scraped it (an exporter and a user's server both serve a
    user's slices and the node's GPUs): the newest."""
    newest: dict[tuple[str, str | None, str | None, str | None], Point] = {}
    for point in points:
        key = _key(point)
        if key not in newest or point.at > newest[key].at:
            newest[key] = point
    return newest.values()


def _by_host(points: Iterable[Point]) -> dict[str, list[Point]]:
    grouped: dict[str, list[Point]] = defaultdict(list)
    for point in _dedup(points):
        grouped[point.labels.get("hostname", "")].append(point)
    return grouped


def _latest(points: Sequence[Point], series: Series, *, default: float | None) -> Any:
    values = [p.value for p in points if p.name == series.name]
    return max(values) if values else default


def _last_scrape(prometheus: Prometheus, host: str, last_reading: float | None, now: float) -> list[Point]:
    """A stale node's samples of its last scrape that read it: the raw samples of the window after
    its last reading, then only those of the newest scrape whose ``node_up`` was 1."""
    if last_reading is None:
        return []
    names = _names((*_NODE, SLICE_INFO, *_PER_SLICE))
    window = int(LAST_SCRAPE_WINDOW)
    at = min(now, last_reading + LAST_SCRAPE_WINDOW)
    points = prometheus.query(f'{{__name__=~"{names}", hostname={string(host)}}}[{window}s]', at=at)
    scrapes = [p.at for p in points if p.name == NODE_UP.name and p.value == 1]
    if not scrapes:
        return [p for p in points if p.name == NODE_READ_AT.name][-1:]
    last = max(scrapes)
    return list(_dedup(p for p in points if p.at == last))


def _why_stale(host: str, current: Sequence[Point], node: ClusterNode, now: float) -> str:
    if any(p.name == NODE_UP.name and p.value == 0 for p in current):
        problem = f"{host}'s exporter answers but cannot read the node's GPUs, its ledger or its jobs (its log says why)"
    elif current:
        problem = f"{host}'s exporter has not read the node for {duration(now - (node.last_seen or now))}"
    elif node.last_seen is not None:
        problem = f"{host} has not been seen for {duration(now - node.last_seen)}: its exporter does not answer Prometheus"
    else:
        problem = f"{host}'s exporter does not answer Prometheus"
    if node.figures_at is None:
        return f"{problem}; its last figures are no longer in Prometheus."
    return f"{problem}; shown as it was {duration(now - node.figures_at)} ago."


def _node(host: str, points: Sequence[Point], *, last_seen: float | None, stale: bool) -> ClusterNode:
    node = ClusterNode(host, last_seen, stale)
    gpus: dict[str, ClusterGPU] = {}
    fields = {GPU_TOTAL.name: "total", GPU_RESERVED.name: "booked", GPU_USED.name: "used", GPU_FREE.name: "free", GPU_UTIL.name: "utilization"}
    for p in points:
        if p.name == GPU_INFO.name:
            uuid = p.labels.get("UUID", "")
            gpus[uuid] = ClusterGPU(_int(p.labels.get("gpu")) or 0, uuid, p.labels.get("modelName", ""))
    for p in points:
        if p.name in fields and (gpu := gpus.get(p.labels.get("UUID", ""))) is not None:
            setattr(gpu, fields[p.name], p.value)
        elif p.name == WAITING.name:
            node.waiting_requests = p.value
        elif p.name == WAITING_MEMORY.name:
            node.waiting_memory = p.value
    node.gpus = sorted(gpus.values(), key=lambda g: g.index)
    # A fresh node's figures are its newest reading's; a stale one's, its last whole scrape's.
    node.figures_at = max((p.at for p in points if p.name == GPU_INFO.name), default=None) if stale else last_seen
    return node


def _slices(points: Sequence[Point], nodes: Sequence[ClusterNode], user: str | None) -> list[ClusterSlice]:
    index = {(n.hostname, g.uuid): g.index for n in nodes for g in n.gpus}
    slices: dict[tuple[str, str], ClusterSlice] = {}
    for p in points:
        labels = p.labels
        if p.name == SLICE_INFO.name and (user is None or labels.get("user") == user):
            key = (labels.get("hostname", ""), labels.get("slice", ""))
            slices[key] = ClusterSlice(
                id=key[1], hostname=key[0], user=labels.get("user", ""), kernel_id=labels.get("kernel_id", ""),
                holder=labels.get("holder", ""), launcher=labels.get("launcher", ""), tier=labels.get("tier", ""),
            )  # fmt: skip
    fields = {
        SLICE_REQUEST.name: "request", SLICE_LIMIT.name: "limit", SLICE_USED.name: "used", SLICE_BURST.name: "burst",
        SLICE_UTIL.name: "utilization", SLICE_SHARE_UTIL.name: "share_utilization",
    }  # fmt: skip
    on_gpu: dict[tuple[str, str, str], SliceOnGPU] = {}
    for p in points:
        name, labels = p.name, p.labels
        key = (labels.get("hostname", ""), labels.get("slice", ""))
        if name == SLICE_IDLE.name and key in slices:
            slices[key].idle_seconds = p.value
        elif name in fields and key in slices:
            uuid = labels.get("UUID", "")
            where = (key[0], key[1], uuid)
            entry = on_gpu.get(where)
            if entry is None:
                entry = on_gpu[where] = SliceOnGPU(index.get((key[0], uuid)), uuid)
                slices[key].gpus.append(entry)
            setattr(entry, fields[name], p.value)
    for s in slices.values():
        s.gpus.sort(key=lambda g: (g.index is None, g.index or 0, g.uuid))
    return [slices[key] for key in sorted(slices)]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
