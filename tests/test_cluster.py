"""The cluster view through a real Prometheus (issue 48): simulated nodes, each a real
`jupyter vgpu exporter` with its own ledger and hostname, scraped every second, read by
`jupyter vgpu status --cluster`; a node whose exporter stops, a scrape cut halfway, and Prometheus
down. (Two Unix users through a server's `GET /api/vgpu/cluster`: tests/hub/test_cluster_users.py.)"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_process import JUPYTER_VGPU, idle_kernel, listening, page_with_slice, start_exporter
from prometheus_process import PrometheusProcess, backfill, start_prometheus

GiB = 1024**3
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    server = start_prometheus(tmp_path_factory.mktemp("prometheus"))
    try:
        yield server
    finally:
        server.stop()


def cluster(url: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`jupyter vgpu status --cluster --json`, as a user runs it."""
    result = subprocess.run(
        [*JUPYTER_VGPU, "status", "--cluster", "--json", "--prometheus", url], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def wait_for_view(url: str, check: Any, what: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = cluster(url)
        if check(view):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"the cluster view did not show {what} in {timeout} s: {json.dumps(view, indent=1)[:4000]}")
        time.sleep(0.3)


def node(view: dict[str, Any], hostname: str) -> dict[str, Any]:
    (found,) = [n for n in view["nodes"] if n["hostname"] == hostname]
    return found


def test_every_node_is_shown_and_one_whose_exporter_stops_stays_as_it_last_was(
    prometheus: PrometheusProcess, tmp_path: Path
) -> None:
    a = listening(start_exporter(tmp_path / "a", "node-a", "2x16GiB@node-a", named=False))
    b = listening(start_exporter(tmp_path / "b", "node-b", "1x8GiB@node-b", named=False))
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "--gpu", "0", "-p", "1/4", "--", "cat"], env=a.env, stdin=subprocess.PIPE)
    kernel = idle_kernel(a.env, fraction=0.25, kernel_id="5c1f0a2b-idle")  # on GPU 1, its server's idle file beside node-a's ledger
    try:
        prometheus.scrape("every-node", [a.address, b.address])
        mine = {"node-a", "node-b"}
        view = wait_for_view(
            prometheus.url,
            lambda v: mine <= {n["hostname"] for n in v["nodes"] if not n["stale"]}
            and len([s for s in v["slices"] if s["hostname"] == "node-a" and (s["kernel_id"] is None or s["idle_seconds"] is not None)]) == 2,
            "node-a and node-b fresh, and the command's and the idle kernel's slices on node-a",
        )
        a_view, b_view = node(view, "node-a"), node(view, "node-b")
        assert a_view["model"] == "Simulated GPU 16GiB" and [g["index"] for g in a_view["gpus"]] == [0, 1]
        assert [(g["total"], g["booked"], g["free"]) for g in a_view["gpus"]] == [(16 * GiB, 4 * GiB, 12 * GiB), (16 * GiB, 4 * GiB, 12 * GiB)]
        assert [(g["total"], g["booked"]) for g in b_view["gpus"]] == [(8 * GiB, 0)]
        assert not {g["uuid"] for g in a_view["gpus"]} & {g["uuid"] for g in b_view["gpus"]}  # named machines: UUIDs of their own
        assert a_view["problem"] is None and a_view["waiting"] == {"requests": 0, "memory": 0}
        (held,) = [s for s in view["slices"] if s["hostname"] == "node-a" and s["id"] != kernel]
        assert held["holder"] == "cat" and held["kernel_id"] is None and "user" not in held and held["idle_seconds"] is None
        assert [(g["index"], g["request"]) for g in held["gpus"]] == [(0, 4 * GiB)]
        (idle,) = [s for s in view["slices"] if s["id"] == kernel]  # issue 48, item 3: the kernel's idle time
        assert idle["kernel_id"] == "5c1f0a2b-idle" and 590 <= idle["idle_seconds"] <= 700, idle
        # Every view agrees: the node's own `status` books what Prometheus says.
        local = json.loads(subprocess.run([*JUPYTER_VGPU, "status", "--json"], env=a.env, capture_output=True, text=True, check=True).stdout)
        assert [g["memory_reserved"] for g in local["gpus"]] == [g["booked"] for g in a_view["gpus"]]

        table = subprocess.run([*JUPYTER_VGPU, "status", "--cluster", "--prometheus", prometheus.url], capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        rows = {line.split()[0]: line for line in table.stdout.splitlines() if line.startswith("node-")}
        assert "8.0 GiB / 32.0 GiB" in rows["node-a"] and "STALE" not in rows["node-a"], table.stdout
        assert held["id"] in table.stdout and "Your slices:" in table.stdout
        (row,) = [line.split() for line in table.stdout.splitlines() if line.startswith(held["id"])]
        assert row[:7] == [held["id"], "node-a", "0", "4.0", "GiB", "0", "B"] and row[7] == "-"  # a command: no idle time

        assert b.stop() == 0  # node-b's exporter ends: node-b is stale, never dropped, never zeroed
        view = wait_for_view(prometheus.url, lambda v: node(v, "node-b")["stale"], "node-b stale")
        b_stale = node(view, "node-b")
        assert [(g["total"], g["booked"], g["free"]) for g in b_stale["gpus"]] == [(8 * GiB, 0, 8 * GiB)]
        assert b_stale["problem"].startswith("node-b has not been seen for ") and "its exporter does not answer Prometheus" in b_stale["problem"]
        assert b_stale["last_seen"] == pytest.approx(b_view["last_seen"], abs=30) and b_stale["figures_at"] <= view["read_at"]
        assert not node(view, "node-a")["stale"]
        table = subprocess.run([*JUPYTER_VGPU, "status", "--cluster", "--prometheus", prometheus.url], capture_output=True, text=True, timeout=60)
        assert "STALE" in next(line for line in table.stdout.splitlines() if line.startswith("node-b")), table.stdout
        assert "  node-b: node-b has not been seen for " in table.stdout
    finally:
        prometheus.scrape("every-node", [])
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        for exporter in (a, b):
            exporter.stop()


def test_a_node_silent_for_hours_is_still_shown_as_it_last_was_and_one_silent_for_over_a_week_is_forgotten(tmp_path: Path) -> None:
    """The view reads the last hour's readings at once and finds older nodes in Prometheus's index:
    a node whose exporter last answered two hours ago (its scrapes backfilled into Prometheus's
    storage) is still listed, stale, with its last figures; one silent for eight days is not."""
    old = listening(start_exporter(tmp_path / "old", "node-old", "1x8GiB@node-old", named=False))
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1/2", "--", "cat"], env=old.env, stdin=subprocess.PIPE)
    try:
        page = page_with_slice(old.url)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        old.stop()
    now = time.time()
    data = tmp_path / "prometheus" / "data"
    last = now - 2 * 3600
    backfill(data, page, [last - 60 * i for i in range(60, -1, -1)], job="jupyter-vgpu", instance="10.0.0.1:9401")
    forgotten = page.replace('"node-old"', '"node-gone"')
    backfill(data, forgotten, [now - 8 * 86400 - 60 * i for i in range(10, -1, -1)], job="jupyter-vgpu", instance="10.0.0.2:9401")
    prometheus = start_prometheus(tmp_path / "prometheus")
    try:
        view = cluster(prometheus.url)
    finally:
        prometheus.stop()
    assert [n["hostname"] for n in view["nodes"]] == ["node-old"]
    (shown,) = view["nodes"]
    assert shown["stale"] and shown["last_seen"] == pytest.approx(last, abs=1)
    assert [(g["total"], g["booked"]) for g in shown["gpus"]] == [(8 * GiB, 4 * GiB)]  # its last scrape's figures
    assert shown["problem"].startswith("node-old has not been seen for 2 h") and "its exporter does not answer Prometheus" in shown["problem"], shown
    assert [s["hostname"] for s in view["slices"]] == ["node-old"]


class _Page(http.server.BaseHTTPRequestHandler):
    """An exporter's recorded page, then (once ``cut`` is set) only its first half, cut mid-line."""

    page = b""
    cut = threading.Event()

    def do_GET(self) -> None:
        body = self.page[: len(self.page) // 2] if self.cut.is_set() else self.page
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.page)))  # says the whole page, sends half, closes
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_a_scrape_cut_halfway_never_shows_half_a_node(prometheus: PrometheusProcess, tmp_path: Path) -> None:
    """Node-c's page (a real exporter's, with a slice on it) is served whole, then cut in half:
    Prometheus drops the cut scrape whole, and node-c is shown stale, as its last whole page."""
    c = listening(start_exporter(tmp_path / "c", "node-c", "2x16GiB@node-c", named=False))
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1/2", "--", "cat"], env=c.env, stdin=subprocess.PIPE)
    try:
        recorded = page_with_slice(c.url).encode()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        c.stop()
    _Page.page = recorded
    _Page.cut.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prometheus.scrape("half", [f"127.0.0.1:{server.server_address[1]}"])
        whole = wait_for_view(prometheus.url, lambda v: any(n["hostname"] == "node-c" and not n["stale"] for n in v["nodes"]), "node-c fresh")
        _Page.cut.set()
        prometheus.wait_for(
            f'up{{instance="127.0.0.1:{server.server_address[1]}"}}', lambda r: bool(r) and r[0]["value"][1] == "0", "the cut scrape failed"
        )
        view = wait_for_view(prometheus.url, lambda v: node(v, "node-c")["stale"], "node-c stale")
        shown, before = node(view, "node-c"), node(whole, "node-c")
        assert shown["gpus"] == before["gpus"] and [(g["booked"]) for g in shown["gpus"]] == [8 * GiB, 0]
        mine = [s for s in view["slices"] if s["hostname"] == "node-c"]
        assert [(s["gpus"][0]["request"]) for s in mine] == [8 * GiB]
    finally:
        prometheus.scrape("half", [])
        server.shutdown()


def test_prometheus_down_is_one_sentence_and_the_nodes_own_view_works(tmp_path: Path, vgpu_env: dict[str, str]) -> None:
    from jupyter_process import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run([*JUPYTER_VGPU, "status", "--cluster", "--prometheus", url], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"jupyter vgpu: Prometheus at {url} cannot be reached: Connection refused.\n"
    assert subprocess.run([*JUPYTER_VGPU, "status"], capture_output=True, text=True, timeout=60).returncode == 0
    env = {**os.environ, "JUPYTER_VGPU_PROMETHEUS": "prometheus:9090"}
    result = subprocess.run([*JUPYTER_VGPU, "status", "--cluster"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1 and result.stderr == (
        "jupyter vgpu: JUPYTER_VGPU_PROMETHEUS 'prometheus:9090' is not the URL of a Prometheus server: give http:// or "
        "https://, a host and optionally a port and path, e.g. http://prometheus:9090.\n"
    )
