"""``jupyter vgpu report``: GPU memory-hours booked, used and idle per user, group or node over a
period, from the site's Prometheus (docs/cluster.md, "Reports")."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from ..units import GiB


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "report",
        help="GPU memory-hours booked, used and idle per user, group or node, from the site's Prometheus",
        description=(
            "GPU memory-hours booked (the slices' requests), used, and booked but idle, over a period, per user, "
            "group or node, read from the site's Prometheus (which scrapes every node's exporter or broker). "
            "It names every user: it is for admins, as Prometheus is."
        ),
    )
    parser.add_argument("--prometheus", metavar="URL", default=None, help="the site's Prometheus (default: $JUPYTER_VGPU_PROMETHEUS, else the hub policy's)")
    parser.add_argument("--since", metavar="PERIOD", default="7d", help="the period before now: 7d (the default), 24h, 90m or seconds")
    parser.add_argument("--by", choices=("user", "group", "node"), default="user", help="one row per user (the default), Unix group or node")
    parser.add_argument("--csv", action="store_true", help="CSV on stdout (GiB-hours, six decimals), for a spreadsheet")
    parser.add_argument(
        "--step", metavar="SECONDS", type=float, default=None,
        help="seconds between two samples summed (default: the period / 1000, at least 15; not below the scrape interval)",
    )  # fmt: skip
    parser.set_defaults(handler=report)


def report(args: argparse.Namespace) -> int:
    from ..accounts import user_groups
    from ..errors import InvalidRequest
    from ..metrics.report import memory_hours, span_seconds
    from .cluster import site_prometheus

    since = span_seconds(args.since)
    if args.step is not None and not 1 <= args.step <= since:
        raise InvalidRequest(f"--step {args.step:g} is not allowed: give 1 to {since:g} seconds (the period).")
    prometheus = site_prometheus(args.prometheus, "report")
    rows = memory_hours(prometheus, since=since, by=args.by, step=args.step, groups_of=user_groups)
    heading = {"user": "USER", "group": "GROUP", "node": "NODE"}[args.by]
    if args.csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow([args.by, "booked_gib_hours", "used_gib_hours", "idle_gib_hours"])
        for row in rows:
            out.writerow([row.key, *(f"{value / GiB:.6f}" for value in (row.booked, row.used, row.idle))])
        return 0
    print(f"GPU memory-hours over the last {args.since}, from {prometheus.url}")
    if not rows:
        print("No slice was booked in that period.")
        return 0
    table: list[tuple[str, ...]] = [(heading, "BOOKED", "USED", "IDLE", "IDLE %")]
    for row in rows:
        idle_share = f"{100 * row.idle / row.booked:.0f}%" if row.booked else "-"
        table.append((row.key, *(f"{value / GiB:.2f} GiB·h" for value in (row.booked, row.used, row.idle)), idle_share))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths))))
    return 0
