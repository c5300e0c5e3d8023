"""benchmarks/cluster.py on 4 simulated nodes, scraped every second by a real Prometheus: it runs to
the end through a real server and says what it measured (the figures themselves are the benchmark's
to judge, on a quiet machine), and the server sent its cluster replies gzipped, as a browser asks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_the_cluster_benchmark_measures_every_view_of_four_nodes(tmp_path: Path) -> None:
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        pytest.skip("Debian's prometheus is not installed (./scripts/test installs it when run as root)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's package, whatever the venv has installed
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cluster.py"), "--quick", "--reps", "3", "--scrape-seconds", "1", "--json", str(figures)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = json.loads(figures.read_text())["by_nodes"]
    assert (row["nodes"], row["slices"], row["user_http"]["your_slices"]) == (4, 128, 4)  # the benchmark's user: GPU 0's on node-00
    assert row["history_http"]["points"] == 241  # the hour before was backfilled
    for kind in ("user_http", "user_direct", "admin_direct", "history_http"):
        assert 0 < row[kind]["p50_ms"] <= row[kind]["p95_ms"], kind
    for kind in ("user_http", "history_http"):  # sent gzipped to a client that accepts it, as a browser does
        assert row[kind]["kib"] < row[kind]["json_kib"] / 2, row[kind]
    assert "GET /api/vgpu/cluster p95" in done.stdout and "the admin page's reply p95" in done.stdout
