"""A real Prometheus (Debian's `prometheus`, as ./scripts/test installs it) for the cluster tests:
on loopback, scraping every second the targets a test names, its data in the test's folder.

Targets are file-based service discovery: each test writes its own targets file, and Prometheus
reads it as it changes (no reload), so tests that share one Prometheus never see each other's
nodes unless they look for them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
#: Every target is scraped this often (the cluster view's tests wait for a scrape or two).
SCRAPE_SECONDS = 1

CONFIG = """\
global:
  scrape_interval: {interval}s
  scrape_timeout: {interval}s
  evaluation_interval: {interval}s
scrape_configs:
  - job_name: jupyter-vgpu
    file_sd_configs:
      - files: ["{targets}/*.json"]
        refresh_interval: 1s
"""


@dataclass
class PrometheusProcess:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scrape(self, name: str, targets: Sequence[str], **labels: str) -> None:
        """Scrape ``targets`` (``host:port``) as the set ``name`` (a test's own; empty: none)."""
        path = self.folder / "targets" / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": list(targets), "labels": labels}] if targets else []))
        os.replace(tmp, path)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            data = json.loads(reply.read())
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def wait_for(self, promql: str, check: Callable[[list[dict[str, Any]]], bool], what: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The first answer to ``promql`` that ``check`` accepts, asked until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if check(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not show {what} in {timeout} s: {promql} = {result}\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join((self.folder / "prometheus.log").read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_prometheus(folder: Path, *, port: int | None = None, timeout: float = 60) -> PrometheusProcess:
    """Prometheus on loopback (a free port of this worker's, or ``port``), ready to answer."""
    if not os.path.exists(PROMETHEUS):
        pytest.skip("Debian's prometheus is not installed (./scripts/test installs it when run as root)")
    (folder / "targets").mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(CONFIG.format(interval=SCRAPE_SECONDS, targets=folder / "targets"))
    port = port or free_port()
    command = [
        PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]  # fmt: skip
    with (folder / "prometheus.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = PrometheusProcess(folder, port, process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited with {process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=5) as reply:
                if reply.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"prometheus was not ready in {timeout} s:\n{server.log_tail()}")
        time.sleep(0.1)


def backfill(data: Path, page: str, times: Sequence[float], **labels: str) -> None:
    """An exporter's ``page`` as if Prometheus had scraped it at each of ``times`` (past), its
    samples given ``labels`` too (``job``, ``instance``), written as TSDB blocks into ``data``
    (a Prometheus's storage, before it starts) with ``promtool tsdb create-blocks-from openmetrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    lines = []
    for family in text_string_to_metric_families(page):
        lines.append(f"# TYPE {family.name} gauge")
        for sample in family.samples:
            text = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted({**sample.labels, **labels}.items()))
            for at in times:
                value = at if family.name == "jupyter_vgpu_node_reading_timestamp_seconds" else sample.value
                lines.append(f"{family.name}{{{text}}} {value!r} {at:.3f}")
    data.mkdir(parents=True, exist_ok=True)
    source = data.parent / "backfill.om"
    source.write_text("\n".join([*lines, "# EOF"]) + "\n")
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(data)], check=True, timeout=120, capture_output=True)

