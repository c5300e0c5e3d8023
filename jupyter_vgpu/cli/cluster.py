"""``jupyter vgpu status --cluster``: every node's GPUs and line, and your slices on every node,
from the site's Prometheus (the table ``GET /api/vgpu/cluster`` answers, docs/cluster.md)."""

from __future__ import annotations

import json
import os
import pwd
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidConfig
from ..metrics.cluster import read_cluster
from ..metrics.clusterview import duration, node_totals
from ..metrics.prometheus import ENV_PROMETHEUS, Prometheus
from ..units import format_bytes


def site_prometheus(url: str | None, command: str) -> Prometheus:
    """The site's Prometheus: ``--prometheus``, else $JUPYTER_VGPU_PROMETHEUS, else the hub
    policy's (the node broker's ``info``); one sentence naming ``command`` when none is set."""
    setting = "--prometheus" if url else ENV_PROMETHEUS
    url = url or os.environ.get(ENV_PROMETHEUS, "")
    if not url:
        url, setting = _policys(), "the hub policy's prometheus_url"
    if not url:
        raise InvalidConfig(
            f"{command} needs the site's Prometheus: give --prometheus URL or set {ENV_PROMETHEUS} "
            "(on a hub node, the admin can set the policy's prometheus_url; docs/cluster.md)."
        )
    return Prometheus(url, setting=setting)


def cluster_status(url: str | None, *, as_json: bool) -> int:
    """Print the cluster for this user; raises :class:`VGPUError` (one sentence) when it cannot."""
    prometheus = site_prometheus(url, "status --cluster")
    view = read_cluster(prometheus, user=pwd.getpwuid(os.getuid()).pw_name).to_dict()
    if as_json:
        json.dump(view, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(view))
    return 0


def _policys() -> str:
    """The hub policy's Prometheus, from the node broker's ``info`` ("" without a broker or one)."""
    from ..config import load_settings
    from ..ledger import open_ledger

    ledger = open_ledger(load_settings(), read_only_ok=True)
    try:
        return str((getattr(ledger, "info", None) or {}).get("prometheus_url") or "")
    finally:
        ledger.close()


def _bytes(value: float | None) -> str:
    return "?" if value is None else format_bytes(int(value))


def _ago(at: float | None, now: float) -> str:
    return "never" if at is None else f"{duration(now - at)} ago"


def render(view: dict[str, Any]) -> str:
    """The table: one row per node (its GPUs' sums, the most free on one GPU, its line), then its
    problem if stale; then your slices."""
    now = float(view["read_at"])
    lines = [f"jupyter-vgpu · the cluster as {view['prometheus']} sees it"]
    header = ("NODE", "GPUS", "BOOKED", "USED", "FREE", "ROOM ON ONE GPU", "WAITING", "SEEN")
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for node in view["nodes"]:
        sums = node_totals(node)
        frees = [g["free"] for g in node["gpus"] if g.get("free") is not None]
        waiting = node["waiting"]
        seen = _ago(node["last_seen"], now) + (" STALE" if node["stale"] else "")
        rows.append((
            node["hostname"], str(len(node["gpus"])),
            f"{_bytes(sums['booked'])} / {_bytes(sums['total'])}", _bytes(sums["used"]), _bytes(sums["free"]),
            _bytes(max(frees)) if frees else "?",
            "?" if waiting["requests"] is None else f"{int(waiting['requests'])} ({_bytes(waiting['memory'])})",
            seen,
        ))  # fmt: skip
        if node["problem"]:
            notes.append(f"  {node['hostname']}: {node['problem']}")
    if rows:
        lines += _table(header, rows)
    else:
        lines.append("No node has reported to Prometheus: run `jupyter vgpu exporter` on each GPU node and scrape it (docs/cluster.md).")
    lines += notes
    slices = view["slices"]
    lines.append("")
    if not slices:
        lines.append("You hold no slice on any node.")
        return "\n".join(lines) + "\n"
    lines.append("Your slices:")
    slice_rows: list[tuple[str, ...]] = []
    for s in slices:
        gpus = s["gpus"]
        used = [g["used"] for g in gpus]
        slice_rows.append((
            s["id"], s["hostname"], ",".join(str(g["index"]) if g["index"] is not None else "?" for g in gpus),
            _bytes(sum(g["request"] or 0 for g in gpus)),
            "?" if any(u is None for u in used) else _bytes(sum(used)),
            _idle(s.get("idle_seconds"), s.get("kernel_id")),
            s["holder"][:60],
        ))  # fmt: skip
    lines += _table(("SLICE", "NODE", "GPU", "REQUEST", "USED", "IDLE", "HOLDER"), slice_rows)
    return "\n".join(lines) + "\n"


def _idle(seconds: float | None, kernel_id: str | None) -> str:
    """A kernel's idle time as its server judges it ("busy" at 0); "-" for a command, "?" unknown."""
    if not kernel_id:
        return "-"
    if seconds is None:
        return "?"
    return "busy" if seconds <= 0 else duration(seconds)


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)]

