"""The GPUs panel of a CPU-only JupyterLab whose kernels run on a GPU node (docs/remote.md), in a
real browser, light and dark.

Two real servers on loopback: a GPU node (`jupyter vgpu gateway` on a simulated 16 GiB GPU,
tests/gateway/conftest.py's ``start_node``) and a CPU-only `jupyter lab --gateway-url=...` with
no GPU of its own. One browser tab on the CPU-only lab, in file order: the panel names the GPU
node and shows its GPU; a notebook on "Python 3 (1/4 GPU)" is a slice row under its own name; a
notebook on "Python 3 (1 GPU)" is refused with the node's own sentence; the node stops and the
panel says it is unreachable; the node starts again (same folder, same port) and its GPU comes
back in the panel by itself.

Screenshots land in artifacts/ui/ (``remote-*``) with both servers' logs.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway.conftest import NODE_TOKEN, QUARTER, WHOLE, start_node
from jupyter_process import JupyterProcess, free_port, isolated_env, start_jupyter

from .conftest import ARTIFACTS, _write_user_settings, notebook_json
from .pages import SIDEBAR, expect, lab_screenshot, one_tab, open_sidebar, screenshots, set_theme_live, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TRAIN = "work/train.ipynb"
BIG = "work/big.ipynb"


class Servers:
    """The GPU node (restartable on its folder and port) and the CPU-only lab."""

    def __init__(self, tmp: Path) -> None:
        self.folder = tmp / "gpu-node"
        self.port = free_port()
        self.node = start_node(self.folder, self.port)
        laptop = tmp / "laptop"
        (laptop / "root" / "work").mkdir(parents=True)
        _write_user_settings(laptop / "config")
        env = isolated_env(laptop)
        env.pop("JUPYTER_VGPU_SIMULATE", None)  # no GPU here, simulated or not
        self.lab = start_jupyter(
            laptop,
            app="lab",
            env=env,
            base_url="/laptop/",
            args=[
                f"--gateway-url=http://127.0.0.1:{self.port}/node",
                f"--GatewayClient.auth_token={NODE_TOKEN}",
                # window.jupyterapp: switch themes with a dialog open, open files.
                "--LabApp.expose_app_in_browser=True",
            ],
        )

    @property
    def node_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/node"

    def restart_node(self) -> None:
        self.node = start_node(self.folder, self.port)

    def stop(self) -> None:
        for server in (self.lab, self.node):
            server.stop(timeout=20)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    running = Servers(tmp_path_factory.mktemp("remote"))
    try:
        yield running
    finally:
        running.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(running.lab.log, ARTIFACTS / "server-test_remote_sidebar-lab.log")
        shutil.copy(running.node.log, ARTIFACTS / "server-test_remote_sidebar-node.log")


@pytest.fixture(scope="module")
def page(browser: Any, servers: Servers) -> Iterator[Any]:
    """One browser tab on the CPU-only lab (instead of conftest's, which starts a lab of its own)."""
    with one_tab(browser, "test_remote_sidebar", height=800) as page:
        yield page


def page_url(lab: JupyterProcess, path: str) -> str:
    return f"{lab.url}{path}?token={lab.token}"


def slices(server: JupyterProcess) -> list[dict[str, Any]]:
    status, reply = server.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return list(reply["slices"])


def held_by(server: JupyterProcess, path: str) -> dict[str, Any] | None:
    return next((s for s in slices(server) if s.get("path") == path), None)


def open_notebook(page: Any, path: str) -> None:
    page.evaluate("path => void window.jupyterapp.commands.execute('docmanager:open', {path})", path)
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text(path.rsplit("/", 1)[-1])


def dismiss_kernel_picker(page: Any) -> None:
    """JupyterLab offers "Select Kernel" after a notebook's first kernel failed to start: keep none."""
    picker = page.locator(".jp-Dialog", has_text="Select Kernel")
    try:
        expect(picker).to_be_visible(timeout=3000)
    except AssertionError:
        return
    picker.locator(".jp-Dialog-footer .jp-mod-reject").click()


def node_line(page: Any) -> Any:
    return page.locator(f"{SIDEBAR} .jp-vgpu-Header-node")


@pytest.fixture(scope="module")
def train(servers: Servers, page: Any) -> dict[str, Any]:
    """work/train.ipynb open on the node's 1/4 GPU kernel; returns its slice (the laptop's view)."""
    (servers.lab.root / TRAIN).write_text(notebook_json(QUARTER, "Python 3 (1/4 GPU)"))
    page.goto(page_url(servers.lab, f"lab/tree/{TRAIN}"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)
    held: dict[str, Any] = wait_for(
        "train.ipynb's kernel to hold a slice on the node", lambda: held_by(servers.lab, TRAIN), timeout=90
    )
    return held


def test_the_lab_has_no_gpu_of_its_own_and_loads_the_extension(servers: Servers) -> None:
    log = servers.lab.log_text()
    assert "jupyter_vgpu | extension was successfully loaded" in log, servers.lab.log_tail()
    assert "answers from the GPU node" in log, servers.lab.log_tail()
    assert "JUPYTER_VGPU_SIMULATE" not in servers.lab.env
    status, reply = servers.lab.api("GET", "api/vgpu/devices")
    assert status == 200 and reply["gateway"] == {"url": servers.node_url, "node": reply["node"]}, reply


def test_the_panel_names_the_gpu_node_and_shows_its_gpu(servers: Servers, page: Any, train: dict[str, Any]) -> None:
    sidebar = open_sidebar(page)
    status, devices = servers.lab.api("GET", "api/vgpu/devices")
    assert status == 200, devices
    node = devices["gateway"]["node"]
    expect(node_line(page)).to_have_text(f"GPU node {node} ({servers.node_url})")
    expect(sidebar.locator(".jp-vgpu-Header .jp-vgpu-mod-simulated")).to_have_text("simulated")
    expect(sidebar.locator(".jp-vgpu-Header-count")).to_have_text("1 GPU")
    card = sidebar.locator(".jp-vgpu-DeviceCard")
    expect(card).to_have_count(1)
    expect(card.locator(".jp-vgpu-DeviceCard-name")).to_have_text(devices["devices"][0]["name"])
    expect(card.locator(".jp-vgpu-DeviceCard-memory")).to_contain_text("/ 16.0 GiB")

    row = sidebar.locator(".jp-vgpu-SliceRow", has_text="train.ipynb")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-slice-id", train["id"])
    expect(row.locator(".jp-vgpu-SliceRow-holder")).to_have_text("train.ipynb")
    expect(row.locator(".jp-vgpu-SliceRow-kernel")).to_have_text("Python 3 (1/4 GPU)")
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_contain_text("/ 4.0 GiB")
    expect(row.locator(".jp-vgpu-action-shutdown")).to_have_count(1)  # a kernel of this lab
    for theme in ("light", "dark"):
        set_theme_live(page, theme)
        line = node_line(page)
        expect(line).to_be_visible()
        box, header = line.bounding_box(), sidebar.locator(".jp-vgpu-Header").bounding_box()
        assert box is not None and header is not None
        assert box["x"] + box["width"] <= header["x"] + header["width"] + 0.5  # wrapped, not cut
        colour = line.evaluate("e => getComputedStyle(e).color")
        background = sidebar.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour != background, (theme, colour)
    set_theme_live(page, "light")
    screenshots(page, ARTIFACTS, "remote-sidebar", sidebar)
    lab_screenshot(page, ARTIFACTS / "remote-lab.png")


def test_the_dashboard_charts_the_nodes_gpu(servers: Servers, page: Any, train: dict[str, Any]) -> None:
    sidebar = open_sidebar(page)
    sidebar.get_by_role("button", name="Open GPU dashboard").click()
    panel = page.locator("#jp-vgpu-dashboard")
    expect(panel).to_be_visible()
    expect(panel.locator(".jp-vgpu-Dashboard-node")).to_contain_text("GPU node ")
    expect(panel.locator(".jp-vgpu-Dashboard-node")).to_contain_text(servers.node_url)
    expect(panel.locator(".jp-vgpu-Dashboard-simulated")).to_be_visible()
    section = panel.locator('section.jp-vgpu-Dashboard-gpu[data-gpu-index="0"]')
    expect(section.locator('figure[data-chart="memory"]')).to_be_visible()
    slice_chart = panel.locator(f'figure.jp-vgpu-mod-slice[data-slice-id="{train["id"]}"]')
    expect(slice_chart.locator(".jp-vgpu-Dashboard-sliceName")).to_have_text("train.ipynb")
    screenshots(page, ARTIFACTS, "remote-dashboard", panel)
    page.locator('.lm-TabBar-tab[data-id="jp-vgpu-dashboard"] .lm-TabBar-tabCloseIcon').click()
    expect(panel).to_have_count(0)


def test_a_whole_gpu_notebook_is_refused_with_the_nodes_sentence(
    servers: Servers, page: Any, train: dict[str, Any]
) -> None:
    (servers.lab.root / BIG).write_text(notebook_json(WHOLE, "Python 3 (1 GPU)"))
    open_notebook(page, BIG)
    dialog = page.locator(".jp-Dialog")
    expect(dialog.locator(".jp-Dialog-header")).to_contain_text("Error Starting Kernel", timeout=90_000)
    expect(dialog).to_contain_text("No room for 1 GPU")
    expect(dialog).not_to_contain_text("Error from Gateway")
    expect(dialog).not_to_contain_text("Ensure gateway url is valid")
    # The node recorded the refusal: the dialog lays it out, train.ipynb named as the holder.
    view = dialog.locator(".jp-vgpu-Refusal")
    expect(view).to_be_visible(timeout=15_000)
    expect(view.locator(".jp-vgpu-Refusal-summary")).to_contain_text("No room for 1 GPU")
    expect(view.locator(".jp-vgpu-Refusal-asked")).to_contain_text("big.ipynb")
    expect(view.locator(".jp-vgpu-Refusal-holder", has_text="train.ipynb")).to_contain_text("4.0 GiB")
    screenshots(page, ARTIFACTS, "remote-refusal", dialog.locator(".jp-Dialog-content"))
    dialog.get_by_role("button", name="Ok").click()
    dismiss_kernel_picker(page)
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    assert held_by(servers.lab, BIG) is None
    assert len(slices(servers.node)) == 1  # train.ipynb's only


def test_a_stopped_node_is_said_unreachable(servers: Servers, page: Any, train: dict[str, Any]) -> None:
    sidebar = open_sidebar(page)
    expect(sidebar.locator(".jp-vgpu-DeviceCard")).to_have_count(1)
    servers.node.stop(timeout=20)
    error = sidebar.locator(".jp-vgpu-Message.jp-vgpu-mod-error")
    expect(error).to_be_visible(timeout=30_000)
    expect(error.locator(".jp-vgpu-Message-title")).to_have_text("The GPU node does not answer.")
    expect(error).to_contain_text(re.compile(rf"GPU node {re.escape(servers.node_url)} unreachable"))
    expect(error).to_contain_text("Retry now")
    wide = error.evaluate(
        "e => [...e.querySelectorAll('p')].filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.textContent)"
    )
    assert wide == [], wide  # the URL and the reason wrap inside the box
    expect(node_line(page)).to_contain_text(servers.node_url)  # the last good view stays under it
    screenshots(page, ARTIFACTS, "remote-unreachable", sidebar)


def test_the_node_comes_back_in_the_panel_by_itself(servers: Servers, page: Any, train: dict[str, Any]) -> None:
    sidebar = open_sidebar(page)
    error = sidebar.locator(".jp-vgpu-Message.jp-vgpu-mod-error")
    expect(error).to_be_visible()
    servers.restart_node()
    status, reply = servers.lab.api("GET", "api/vgpu/devices")
    assert status == 200, reply
    # The panel polls less often while the node is away (at most a minute between tries).
    expect(error).to_have_count(0, timeout=90_000)
    expect(sidebar.locator(".jp-vgpu-DeviceCard")).to_have_count(1)
    expect(sidebar.locator(".jp-vgpu-DeviceCard-memory")).to_contain_text("/ 16.0 GiB")
    expect(node_line(page)).to_contain_text(servers.node_url)
    # The old kernel went with the node: no slice is left on it.
    expect(sidebar.locator(".jp-vgpu-SliceRow", has_text="train.ipynb")).to_have_count(0)
    screenshots(page, ARTIFACTS, "remote-back", sidebar)
