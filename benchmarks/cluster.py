"""Benchmark: the cluster view (issue 48, item 7) with N simulated nodes scraped by a real Prometheus.

Targets, at 64 nodes: ``GET /api/vgpu/cluster`` p95 < 250 ms and its reply < 64 KiB; the admin
page's reply < 500 ms. And how each grows with N (4, 16, 64 nodes; 8 GPUs of 80 GiB each, 4 slices a
GPU, 2 to 4 users a node, a line on most nodes).

How the nodes are made: every node is a real :class:`~jupyter_vgpu.metrics.node.NodePage` (the
sampler, collector and HTTP server that ``jupyter vgpu exporter`` runs) over a ledger of its own, on
simulated GPUs of its own name (``{"node": "node-07", ...}``: UUIDs of its own), with 32 slices booked
through the ledger API for 2 to 4 users (half of them elastic) and places in line. So a page is
exactly what a real exporter of such a node serves, and its figures move with each reading (every
5 s). What is shared, to fit 64 nodes on two cores, is the rest: the nodes run in one process per
batch (4, then 12, then 48 nodes), and slice number i of every node is held by one ``sleep`` process (the simulated NVML of each node lists it with that node's memory and
utilisation), so 64 nodes cost 35 processes, not 2,000 holders and 64 exporters.

Prometheus (Debian's, as the tests run it) scrapes every node every 5 s from a file_sd targets file;
the nodes of each batch are added to it, so N grows in one Prometheus. Before it starts, node-00's
series that the history reads are backfilled (``promtool tsdb create-blocks-from openmetrics``) for
the hour before, one sample every 5 s (or scrape interval) with its page's figures, so ``GET
/api/vgpu/cluster/nodes/node-00/history?seconds=3600`` reads a full hour; the other nodes have only the
run's minutes (the view's instant queries read the last scrape, except its 7-day look-back for each
node's last reading, which on a cluster a week old reads a week of samples: see ``--week``).

What is measured at each N, after every target has been scraped at least twice:

* ``GET /api/vgpu/cluster`` through a real ``jupyter server`` with the extension and
  ``--VGPUServer.prometheus_url``, as the benchmark's Unix user (who holds GPU 0's four slices on every
  eighth node), over keep-alive HTTP with ``Accept-Encoding: gzip`` as a browser sends (its size as
  sent, and its JSON's). The server keeps a reply 2 s (``CACHE_SECONDS``); the benchmark starts it with
  that set to 0 so that every request reads Prometheus (the uncached figure is the one the target is
  about: a cached reply costs only the HTTP round trip);
* the same read in this process (``read_cluster`` + ``to_dict`` + orjson, as the handler encodes);
* the hub admin page's ``GET api/cluster`` (``jupyter_vgpu/hub/admin.py``): what its handler does,
  ``cluster_report`` (``read_cluster(user=None)``: every slice, named; and the top users) written by
  tornado's ``json_encode``, in this process (not through a JupyterHub, its OAuth and its proxy);
* ``GET /api/vgpu/cluster/nodes/node-00/history?seconds=3600`` through the server;
* where the time of a read goes at the largest N: each query replayed alone (Prometheus's answer, its
  JSON decoded, the client's whole ``query``), then the whole read, ``to_dict`` and the encoding;
* with ``--week``, afterwards: each node's last reading on a week of readings, the 7-day look-back
  the view once asked beside what it asks now (:func:`week_lookback`).

    .venv/bin/python benchmarks/cluster.py [--nodes 4,16,64] [--reps 40] [--week] [--json PATH]
    .venv/bin/python benchmarks/cluster.py --quick          # 4 nodes only, at most 10 reads of each

The default run takes about 2 minutes on two shared cores (``--week``: 40 s more); ``--quick`` 20 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchstats import percentile
from clustersim import GPUS, JOB, SLICES, JupyterServer, Nodes, PrometheusServer, backfill, fetch, hostname, wait_for

SCRAPE_SECONDS = 5
HISTORY_SECONDS = 3600
HISTORY_NODE = "node-00"
TARGET_USER_P95_MS = 250.0
TARGET_USER_KIB = 64.0
TARGET_ADMIN_P95_MS = 500.0

# -- Measuring ----------------------------------------------------------------------------------


def timed(function: Callable[[], Any], reps: int) -> tuple[list[float], Any]:
    """``reps`` times of ``function`` after one untimed call (imports, a first connection)."""
    spent, result = [], function()
    for _ in range(reps):
        start = time.perf_counter()
        result = function()
        spent.append((time.perf_counter() - start) * 1000)
    return spent, result


def summary(times: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(times), "p95_ms": percentile(times, 0.95), "max_ms": max(times)}


def encoded(view: Any) -> bytes:
    import orjson

    return bytes(orjson.dumps(view.to_dict(), option=orjson.OPT_NON_STR_KEYS))  # as the handler writes it


def admin_reply(url: str) -> bytes:
    """The hub admin page's ``GET api/cluster``, as its handler makes it: ``cluster_report`` (every
    node and slice, named, and the top users) written by tornado's ``json_encode``. Without
    JupyterHub installed (``jupyter_vgpu.hub`` needs it): ``read_cluster(user=None)`` as orjson."""
    from tornado.escape import json_encode

    try:
        from jupyter_vgpu.hub.admin import cluster_report
    except ImportError:
        from jupyter_vgpu.metrics.cluster import read_cluster
        from jupyter_vgpu.metrics.prometheus import Prometheus

        return encoded(read_cluster(Prometheus(url), user=None))
    return json_encode(cluster_report(url)).encode()


def measure(n: int, prometheus: PrometheusServer, server: JupyterServer, me: str, reps: int) -> dict[str, Any]:
    from jupyter_vgpu.metrics.cluster import read_cluster
    from jupyter_vgpu.metrics.prometheus import Prometheus

    client = Prometheus(prometheus.url)
    figures: dict[str, Any] = {"nodes": n, "slices": n * SLICES, "series": len(prometheus.query('{__name__=~"jupyter_vgpu_.+"}'))}

    def http_view() -> tuple[bytes, int]:
        status, body, sent = server.get("/api/vgpu/cluster")
        assert status == 200, body[:500]
        return body, sent

    times, (body, sent) = timed(http_view, reps)
    reply = json.loads(body)
    assert len(reply["nodes"]) == n and not any(node["stale"] for node in reply["nodes"]), "a node is stale"
    figures["user_http"] = summary(times) | {"kib": sent / 1024, "json_kib": len(body) / 1024, "your_slices": len(reply["slices"])}

    times, body = timed(lambda: encoded(read_cluster(client, user=me)), reps)
    figures["user_direct"] = summary(times) | {"kib": len(body) / 1024}

    times, body = timed(lambda: admin_reply(prometheus.url), max(3, reps // 2))
    admin = json.loads(body)
    assert len(admin["slices"]) == n * SLICES, (len(admin["slices"]), n * SLICES)
    figures["admin_direct"] = summary(times) | {"json_kib": len(body) / 1024}

    def history() -> tuple[bytes, int]:
        status, body, sent = server.get(f"/api/vgpu/cluster/nodes/{HISTORY_NODE}/history?seconds={HISTORY_SECONDS}")
        assert status == 200, body[:500]
        return body, sent

    times, (body, sent) = timed(history, reps)
    found = json.loads(body)
    figures["history_http"] = summary(times) | {"kib": sent / 1024, "json_kib": len(body) / 1024, "points": sum(v is not None for v in found["total"])}
    figures["profile"] = {"user": profile(client, me), "admin": profile(client, None)}
    return figures


def profile(client: Any, user: str | None, reps: int = 5) -> dict[str, Any]:
    """Where one read's time goes: each of its queries replayed alone (Prometheus's answer over HTTP,
    its JSON decoded as the client does, and the client's whole ``query``: those two and the points
    built), then the whole read (the queries side by side and the assembly), ``to_dict`` and orjson."""
    import orjson

    from jupyter_vgpu.metrics.cluster import read_cluster
    from jupyter_vgpu.metrics.prometheus import Prometheus

    asked: list[tuple[str, float | None]] = []

    class Recording(Prometheus):
        def query(self, promql: str, *, at: float | None = None) -> Any:
            asked.append((promql, at))
            return super().query(promql, at=at)

    read_cluster(Recording(client.url), user=user)
    queries = []
    for promql, at in asked:
        params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
        url = f"{client.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        answer, decode, whole, body, points = [], [], [], b"", []
        for _ in range(reps):
            start = time.perf_counter()
            body = fetch(url) or b""
            answer.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            orjson.loads(body)
            decode.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            points = client.query(promql, at=at)
            whole.append((time.perf_counter() - start) * 1000)
        queries.append({
            "query": promql if len(promql) <= 90 else promql[:87] + "...", "kib": len(body) / 1024, "points": len(points),
            "prometheus_ms": statistics.median(answer), "decode_ms": statistics.median(decode), "query_ms": statistics.median(whole),
        })  # fmt: skip
    read, to_dict, encode = [], [], []
    for _ in range(reps):
        start = time.perf_counter()
        view = read_cluster(client, user=user)
        middle = time.perf_counter()
        reply = view.to_dict()
        after = time.perf_counter()
        orjson.dumps(reply, option=orjson.OPT_NON_STR_KEYS)
        done = time.perf_counter()
        read.append((middle - start) * 1000)
        to_dict.append((after - middle) * 1000)
        encode.append((done - after) * 1000)
    return {"queries": queries, "read_ms": statistics.median(read), "to_dict_ms": statistics.median(to_dict), "encode_ms": statistics.median(encode)}


def wait_scraped(prometheus: PrometheusServer, n: int, timeout: float) -> None:
    """Every target up and scraped at least twice, and the view shows every node fresh with its slices."""
    from jupyter_vgpu.metrics.cluster import read_cluster
    from jupyter_vgpu.metrics.prometheus import Prometheus

    def scraped() -> bool:
        up = prometheus.query(f'count_over_time(up{{job="{JOB}"}}[10m]) >= 2 and up{{job="{JOB}"}} == 1')
        if len(up) < n:
            return False
        view = read_cluster(Prometheus(prometheus.url), user=None)
        return sum(not node.stale for node in view.nodes) == n and len(view.slices) == n * SLICES

    wait_for(scraped, f"{n} nodes scraped twice", timeout, prometheus.log_tail)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(counts: list[int], reps: int, interval: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vgpu-bench-cluster-"))
    me = pwd.getpwuid(os.getuid()).pw_name
    results: dict[str, Any] = {"load_before": load(), "cpus": os.cpu_count(), "reps": reps, "scrape_seconds": interval, "user": me}
    nodes = Nodes(work, me)
    prometheus: PrometheusServer | None = None
    server: JupyterServer | None = None
    try:
        started = time.monotonic()
        nodes.grow(counts[0])
        (work / "prometheus" / "data").mkdir(parents=True)
        every = max(interval, SCRAPE_SECONDS)  # a quick run's 1 s scrapes would make 3,600 samples a series to backfill
        results["backfilled_samples"] = backfill(work / "prometheus" / "data", nodes.addresses[HISTORY_NODE], HISTORY_SECONDS, every)
        prometheus = PrometheusServer(work / "prometheus", interval)
        server = JupyterServer(work / "server", prometheus.url)
        results["by_nodes"] = []
        for n in counts:
            nodes.grow(n)
            prometheus.scrape([nodes.addresses[hostname(k)] for k in range(n)])
            wait_scraped(prometheus, n, timeout=60 + 4 * interval)
            if n == counts[0]:
                server.wait_ready()
            print(f"  {n} nodes scraped ({time.monotonic() - started:.0f} s in, load {load()}): measuring", file=sys.stderr, flush=True)
            results["by_nodes"].append(measure(n, prometheus, server, me, reps))
        results["seconds"] = time.monotonic() - started
        results["load_after"] = load()
    finally:
        for thing in (server, prometheus, nodes):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.stop()
    shutil.rmtree(work, ignore_errors=True)  # kept, with its logs, when the run failed
    return results


def week_lookback(counts: list[int], interval: int, reps: int) -> list[dict[str, Any]]:
    """The view's first query on a cluster a week old, before and after, side by side: a 7-day
    ``last_over_time`` of each node's reading time (read every sample of the week), and what the view
    asks now (:func:`~jupyter_vgpu.metrics.cluster.last_readings`: the last hour's samples, and the
    week's nodes from Prometheus's index). A scratch Prometheus holds a week of
    ``jupyter_vgpu_node_reading_timestamp_seconds`` for the largest count of nodes, one sample a
    minute (a quarter of what a 15 s scrape keeps: ``promtool`` takes 30 s for 64 nodes as it is);
    both are timed for the first N of them."""
    from jupyter_vgpu.metrics.cluster import FORGET_AFTER, last_readings
    from jupyter_vgpu.metrics.prometheus import Prometheus
    from jupyter_vgpu.metrics.series import NODE_READ_AT

    folder = Path(tempfile.mkdtemp(prefix="vgpu-bench-cluster-week-"))
    (folder / "data").mkdir()
    now, step = time.time(), 60
    times = [now - FORGET_AFTER + 600 + i * step for i in range(int((FORGET_AFTER - 1200) // step))]
    with (folder / "week.om").open("w") as out:
        out.write(f"# TYPE {NODE_READ_AT.name} gauge\n")
        for k in range(max(counts)):
            series = f'{NODE_READ_AT.name}{{hostname="{hostname(k)}",instance="10.0.0.{k}:9400",job="{JOB}"}}'
            out.writelines(f"{series} {at:.3f} {at:.3f}\n" for at in times)
        out.write("# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(folder / "week.om"), str(folder / "data")], check=True, timeout=600)
    (folder / "week.om").unlink()
    prometheus = PrometheusServer(folder, interval)
    found = []
    try:
        client = Prometheus(prometheus.url)
        for n in counts:
            hosts = "|".join(hostname(k) for k in range(n))
            query = f'last_over_time({NODE_READ_AT.name}{{hostname=~"{hosts}"}}[{int(FORGET_AFTER)}s])'
            spent, points = timed(lambda q=query: client.query(q, at=now), reps)  # type: ignore[misc]
            assert len(points) == n, len(points)
            found.append({"nodes": n, "samples": n * len(times), "sample_seconds": step, "asked": "7-day look-back"} | summary(spent))
            if n == max(counts):  # the view reads every node: its way now, on the same data
                spent, (recent, silent) = timed(lambda: last_readings(client, now, FORGET_AFTER), reps)
                assert len(recent) == n and not silent, (len(recent), silent)
                found.append({"nodes": n, "samples": n * len(times), "sample_seconds": step, "asked": "last hour + index"} | summary(spent))
    finally:
        prometheus.stop()
    shutil.rmtree(folder, ignore_errors=True)
    return found


def report(results: dict[str, Any]) -> dict[str, Any]:
    rows = results["by_nodes"]
    print(
        f"{GPUS} simulated GPUs x 80 GiB a node, {SLICES} slices a node (4 a GPU, half elastic), scraped every {results['scrape_seconds']} s; "
        f"{results['reps']} reads of each (the admin page's half); {results['cpus']} CPUs, load {results['load_before']} -> {results['load_after']}; "
        f"{results['seconds']:.0f} s"
    )
    admin_page = "the admin page's reply"
    print(f"  {'':12} | {'GET /api/vgpu/cluster':^33} | {'the same, here':^15} | {admin_page:^24} | {'GET history 1 h':^15}")
    print(f"  {'nodes series':12} | {'p50':>6} {'p95':>6} {'KiB sent':>8} {'JSON':>9} | {'p50':>6} {'p95':>6}   | {'p50':>6} {'p95':>6} {'JSON KiB':>9}  | {'p50':>6} {'p95':>6}")
    for r in rows:
        u, d, a, h = r["user_http"], r["user_direct"], r["admin_direct"], r["history_http"]
        print(
            f"  {r['nodes']:>5} {r['series']:>6} | {u['p50_ms']:6.1f} {u['p95_ms']:6.1f} {u['kib']:8.1f} {u['json_kib']:9.1f} | "
            f"{d['p50_ms']:6.1f} {d['p95_ms']:6.1f}   | {a['p50_ms']:6.1f} {a['p95_ms']:6.1f} {a['json_kib']:9.1f}  | {h['p50_ms']:6.1f} {h['p95_ms']:6.1f}"
        )
    first, last = rows[0], rows[-1]
    growth: dict[str, float] = {}
    if len(rows) > 1:
        pairs = {
            "GET /cluster p95": ("user_http", "p95_ms"), "its JSON": ("user_http", "json_kib"), "admin page p95": ("admin_direct", "p95_ms"),
            "admin page JSON": ("admin_direct", "json_kib"), "GET history p95": ("history_http", "p95_ms"),
        }  # fmt: skip
        growth = {label: last[kind][key] / first[kind][key] for label, (kind, key) in pairs.items()}
        print(f"  growth, {last['nodes']} nodes vs {first['nodes']} (x{last['nodes'] / first['nodes']:g}): " + ", ".join(f"{k} x{v:.1f}" for k, v in growth.items()))
    n, user, admin = last["nodes"], last["user_http"], last["admin_direct"]
    checks = {
        "user_p95_ms": (user["p95_ms"], TARGET_USER_P95_MS, f"GET /api/vgpu/cluster p95 {user['p95_ms']:.0f} ms < {TARGET_USER_P95_MS:g}"),
        "user_kib": (
            user["kib"], TARGET_USER_KIB,
            f"its reply as sent to a browser (Accept-Encoding: gzip) {user['kib']:.1f} KiB < {TARGET_USER_KIB:g} (its JSON {user['json_kib']:.1f} KiB)",
        ),
        "admin_p95_ms": (admin["p95_ms"], TARGET_ADMIN_P95_MS, f"the admin page's reply p95 {admin['p95_ms']:.0f} ms < {TARGET_ADMIN_P95_MS:g}"),
    }  # fmt: skip
    for value, target, label in checks.values():
        print(f"  at {n} nodes: {label}: {'met' if value < target else 'NOT met'}" + ("" if n >= 64 else " (the targets are for 64 nodes)"))
    print(f"  your slices in the view: {', '.join(str(r['user_http']['your_slices']) for r in rows)}; points of the 1 h history with figures: {last['history_http']['points']} of 241")
    for who in ("user", "admin"):
        p = last["profile"][who]
        print(f"  a read at {n} nodes, {who} view (read_cluster): read_cluster {p['read_ms']:.1f} ms, to_dict {p['to_dict_ms']:.1f}, orjson {p['encode_ms']:.1f}; its queries alone:")
        for q in p["queries"]:
            print(
                f"    Prometheus {q['prometheus_ms']:6.1f} ms ({q['kib']:5.0f} KiB, {q['points']:5d} points), decode {q['decode_ms']:5.1f}, "
                f"query() in all {q['query_ms']:6.1f}: {q['query']}"
            )
    for w in results.get("week", []):
        print(
            f"  each node's last reading, {w['asked']:>17}, {w['nodes']:>2} nodes ({w['samples']} samples, one a minute): p50 {w['p50_ms']:.1f} ms, p95 {w['p95_ms']:.1f}"
            f" (a 15 s scrape keeps {60 // 15}x the samples)"
        )
    return {"growth": growth, "targets": {key: {"nodes": n, "value": v, "target": t, "met": v < t} for key, (v, t, _) in checks.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="4,16,64", help="node counts, ascending (default 4,16,64)")
    parser.add_argument("--reps", type=int, default=40, help="reads timed of each kind at each count (default 40; the admin page's half)")
    parser.add_argument("--quick", action="store_true", help="4 nodes, at most 10 reads of each")
    parser.add_argument("--scrape-seconds", type=int, default=SCRAPE_SECONDS, help=f"Prometheus's scrape interval (default {SCRAPE_SECONDS})")
    parser.add_argument("--week", action="store_true", help="also time the 7-day look-back on a week of readings (about 40 s more at 64 nodes)")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    args = parser.parse_args()
    counts = [4] if args.quick else sorted({int(n) for n in args.nodes.split(",")})
    reps = min(args.reps, 10) if args.quick else args.reps
    results = run(counts, reps, args.scrape_seconds)
    if args.week:
        results["week"] = week_lookback(counts, args.scrape_seconds, reps)
    results |= report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
