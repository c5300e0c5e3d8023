"""The GPU dashboard's cluster view in a real JupyterLab (issue 48): the lab reads a real Prometheus
(Debian's, `--VGPUServer.prometheus_url`) that scrapes two simulated nodes, each a real
`jupyter vgpu exporter` with its own ledger (node-a: 2 x 16 GiB, node-b: 1 x 16 GiB); a `jupyter
vgpu run -- cat` of this user holds 1/4 of a GPU on node-a. The dashboard lists both nodes with
their figures, node-a marked as holding your slice and the slice under "Where your kernels run";
once node-b's exporter stops, node-b is marked stale with the server's sentence and keeps its
figures; a click on node-a charts its memory over the last hour. Screenshots land in artifacts/ui/
(``cluster-view-*``), light and dark."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from exporter_process import JUPYTER_VGPU, Node, listening, start_exporter
from jupyter_process import free_port, isolated_env, start_jupyter
from prometheus_process import PrometheusProcess, start_prometheus

from ui.conftest import ARTIFACTS, CHROMIUM, Lab, _write_user_settings
from ui.pages import expect, one_tab, screenshots

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DASHBOARD = "#jp-vgpu-dashboard"
CLUSTER = f"{DASHBOARD} section.jp-vgpu-Cluster"
#: Prometheus scrapes every second, the server reads it at most every 2 s and the dashboard every
#: 5 s: a change shows within seconds, on two loaded cores within these.
SHOWS_MS = 60_000


@dataclass
class Cluster:
    prometheus: PrometheusProcess
    a: Node
    b: Node
    holder: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def cluster_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Cluster]]:
    """The two nodes, Prometheus and the lab, started side by side (the lab first: it takes
    longest); returns the lab and the cluster it reads."""
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("cluster-lab")
    port = free_port()
    _write_user_settings(tmp / "config")
    env = isolated_env(tmp, JUPYTER_VGPU_SIMULATE="1x16GiB")
    started = start_jupyter(
        tmp,
        app="lab",
        env=env,
        args=[f"--VGPUServer.prometheus_url=http://127.0.0.1:{port}", "--LabApp.expose_app_in_browser=True"],
        wait=False,
    )
    server = Lab(**vars(started))
    a = start_exporter(tmp / "a", "node-a", "2x16GiB@node-a", named=False)
    b = start_exporter(tmp / "b", "node-b", "1x16GiB@node-b", named=False)
    # This user's command holds 1/4 of a GPU on node-a, in node-a's ledger.
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1/4", "--", "cat"], env=a.env, stdin=subprocess.PIPE)
    prometheus: PrometheusProcess | None = None
    try:
        prometheus = start_prometheus(tmp / "prometheus", port=port)
        prometheus.scrape("cluster-view", [listening(a).address, listening(b).address])
        server.wait_ready()
        yield server, Cluster(prometheus, a, b, holder)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        for exporter in (a, b):
            exporter.stop()
        if prometheus is not None:
            prometheus.stop()
        server.stop(timeout=20)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.log, ARTIFACTS / "server-test_cluster_view.log")


@pytest.fixture(scope="module")
def page(browser: Any, cluster_lab: tuple[Lab, Cluster]) -> Iterator[Any]:
    """One browser tab on this module's lab (instead of conftest's, which starts a lab of its own)."""
    with one_tab(browser, "test_cluster_view", height=900) as page:
        yield page


def node(page: Any, hostname: str) -> Any:
    return page.locator(f'{CLUSTER} .jp-vgpu-ClusterNode[data-hostname="{hostname}"]')


def figure(card: Any, name: str) -> Any:
    return card.locator(f'.jp-vgpu-ClusterNode-figure[data-figure="{name}"] .jp-vgpu-ClusterNode-value')


def legend(chart: Any, series: str) -> Any:
    return chart.locator(f'.jp-vgpu-Dashboard-key[data-series="{series}"]')


def test_every_node_your_slice_and_a_node_gone_stale(cluster_lab: tuple[Lab, Cluster], page: Any) -> None:
    server, cluster = cluster_lab
    page.goto(server.page_url("lab"))
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")
    page.evaluate("() => void window.jupyterapp.commands.execute('vgpu:open-dashboard')")
    section = page.locator(CLUSTER)
    expect(section).to_be_visible()

    a, b = node(page, "node-a"), node(page, "node-b")
    expect(a).to_be_visible(timeout=SHOWS_MS)
    expect(b).to_be_visible(timeout=SHOWS_MS)
    # The same room on one GPU (16 GiB): in host name order.
    expect(section.locator(".jp-vgpu-ClusterNode")).to_have_count(2)
    shown = section.locator(".jp-vgpu-ClusterNode").evaluate_all("cards => cards.map(c => c.dataset.hostname)")
    assert shown == ["node-a", "node-b"]
    expect(a.locator(".jp-vgpu-ClusterNode-model")).to_have_text("2 × Simulated GPU 16GiB")
    expect(figure(a, "booked")).to_have_text("4.0 / 32.0 GiB", timeout=SHOWS_MS)  # the slice, once scraped
    expect(figure(a, "free")).to_have_text("28.0 GiB")
    expect(figure(a, "room")).to_have_text("16.0 GiB")
    expect(figure(a, "line")).to_have_text("none waiting")
    expect(a.locator(".jp-vgpu-Chip.jp-vgpu-mod-yours")).to_have_text("your slice")
    expect(a).to_have_attribute("data-stale", "false")
    expect(b.locator(".jp-vgpu-ClusterNode-model")).to_have_text("1 × Simulated GPU 16GiB")
    expect(figure(b, "booked")).to_have_text("0.0 / 16.0 GiB")
    expect(figure(b, "room")).to_have_text("16.0 GiB")
    expect(b.locator(".jp-vgpu-mod-yours")).to_have_count(0)
    mine = section.locator('.jp-vgpu-ClusterSlices tbody[data-hostname="node-a"] tr')
    expect(mine).to_have_count(1)
    expect(mine.locator(".jp-vgpu-ClusterSlices-holder")).to_have_text("cat")
    expect(mine.locator(".jp-vgpu-ClusterSlices-gpu")).to_have_text("GPU 0")
    expect(mine.locator(".jp-vgpu-ClusterSlices-request")).to_have_text("4.0 GiB")
    expect(section.locator('.jp-vgpu-ClusterSlices tbody[data-hostname="node-b"]')).to_have_count(0)

    # node-a's memory over the last hour (read while node-b goes stale): its two GPUs' total, and
    # your slice's booking there.
    a.locator(".jp-vgpu-ClusterNode-name").click()
    chart = section.locator('.jp-vgpu-ClusterHistory figure[data-chart="node"][data-hostname="node-a"]')
    expect(chart).to_be_visible(timeout=SHOWS_MS)

    assert cluster.b.stop() == 0  # node-b's exporter ends: stale, never dropped, never zeroed
    expect(b).to_have_class(re.compile(r"\bjp-vgpu-mod-stale\b"), timeout=SHOWS_MS)
    expect(b.locator(".jp-vgpu-Chip.jp-vgpu-mod-stale")).to_have_text("stale")
    expect(b.locator(".jp-vgpu-ClusterNode-problem")).to_contain_text("node-b has not been seen for ")
    expect(b.locator(".jp-vgpu-ClusterNode-problem")).to_contain_text("its exporter does not answer Prometheus")
    expect(figure(b, "booked")).to_have_text("0.0 / 16.0 GiB")
    expect(figure(b, "free")).to_have_text("16.0 GiB")
    expect(a).to_have_attribute("data-stale", "false")
    expect(a.locator(".jp-vgpu-Chip.jp-vgpu-mod-yours")).to_have_text("your slice")

    expect(legend(chart, "total")).to_have_text("total 32.0 GiB", timeout=SHOWS_MS)
    expect(legend(chart, "yours_booked")).to_have_text("yours booked 4.0 GiB")
    screenshots(page, ARTIFACTS, "cluster-view", section)
