"""The GPU dashboard and the sidebar's small charts, in a real JupyterLab on a simulated GPU,
light and dark.

One lab (a simulated 40 GiB A100, a sample every half second, a dashboard point every second)
and one browser tab, in file order: train.ipynb holds 1/4 GPU and a background "workload"
changes its memory and utilisation every half second; the dashboard opens from the command
palette and from the GPUs panel's header; its GPU section charts memory, utilisation, power,
temperature and PCIe throughput under the "Simulated GPUs" banner, and train.ipynb's slice has a
chart of its own; a chart's readout follows the pointer and the arrow keys; a drag zooms and
*Reset zoom* undoes it; the range buttons switch; the dashboard docks beside the notebook. The
panel's small GPU chart has tick values, a readout and a legend that agrees with its card.

Screenshots land in artifacts/ui/ (``dashboard-*``, ``sidebar-chart-*``); ``dashboard-docs.png``
is framed as docs/dashboard.png (which ./scripts/docs-screenshots takes from the demo).
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any

import pytest

from .conftest import ARTIFACTS, Lab
from .pages import expect, kernel_slice, lab_screenshot, open_sidebar, screenshots, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GiB = 1024**3

DEVICES = [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", "utilization": 0}]
# A sample every half second; a dashboard point every second (the default is 10 s).
SERVER_CONFIG = {"VGPUServer": {"monitor_interval": 0.5, "dashboard_step": 1}}

DASHBOARD = "#jp-vgpu-dashboard"
DASHBOARD_TAB = '.lm-DockPanel-tabBar .lm-TabBar-tab[data-id="jp-vgpu-dashboard"]'
GPU_CHARTS = ["memory", "util", "power", "temp", "pcie"]
CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")


class Workload(threading.Thread):
    """What a training notebook looks like to NVML: memory climbing to about 7 GiB and
    wobbling, utilisation swinging between 40 and 95 %."""

    def __init__(self, lab: Lab, pid: int) -> None:
        super().__init__(daemon=True)
        self.lab, self.pid = lab, pid
        self.stopped = threading.Event()

    def figures(self, s: float) -> tuple[int, int]:
        memory = min(6.5, 0.8 + 0.12 * s) + 0.5 * math.sin(s / 9)
        util = 68 + 27 * math.sin(s / 6) * (0.8 + 0.2 * math.sin(s / 17))
        return int(max(0.2, memory) * GiB), int(util)

    def run(self) -> None:
        s = 0.0
        while not self.stopped.wait(0.5):
            s += 0.5
            memory, util = self.figures(s)
            self.lab.simulate([{"gpu": 0, "pid": self.pid, "memory": memory, "utilization": util}])


@pytest.fixture(scope="module")
def opened(lab: Lab, page: Any) -> Any:
    """work/train.ipynb open on its 1/4 GPU kernel, its GPU use changing; returns its slice."""
    page.goto(lab.page_url("lab/tree/work/train.ipynb"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)
    held = wait_for("train.ipynb's kernel to hold a slice", lambda: kernel_slice(lab, "work/train.ipynb"))
    workload = Workload(lab, held["pid"])
    workload.start()
    try:
        yield held
    finally:
        workload.stopped.set()
        workload.join(timeout=5)


def close_dashboard(page: Any) -> None:
    tab = page.locator(DASHBOARD_TAB)
    if tab.count():
        tab.locator(".lm-TabBar-tabCloseIcon").click()
    expect(page.locator(DASHBOARD)).to_have_count(0)


def dashboard(page: Any) -> Any:
    panel = page.locator(DASHBOARD)
    expect(panel).to_be_visible()
    expect(panel.locator(".jp-vgpu-Dashboard")).to_be_visible()
    return panel


def gpu_chart(page: Any, kind: str) -> Any:
    return page.locator(f'{DASHBOARD} section.jp-vgpu-Dashboard-gpu[data-gpu-index="0"] figure[data-chart="{kind}"]')


def window_of(chart: Any) -> tuple[float, float]:
    svg = chart.locator("svg.jp-vgpu-TimeSeries-svg")
    return float(svg.get_attribute("data-start") or "nan"), float(svg.get_attribute("data-end") or "nan")


def points_of(chart: Any) -> int:
    return int(chart.locator("svg.jp-vgpu-TimeSeries-svg").get_attribute("data-points") or 0)


def data_xs(chart: Any) -> tuple[float, float]:
    """The page x of the first and of the last point the chart's lines draw."""
    box = chart.locator("svg.jp-vgpu-TimeSeries-svg").bounding_box()
    assert box is not None
    xs = [
        float(p.split(",")[0])
        for points in chart.locator("polyline.jp-vgpu-TimeSeries-line").evaluate_all(
            "lines => lines.map(l => l.getAttribute('points'))"
        )
        for p in (points or "").split()
    ]
    assert xs, "no line drawn"
    return box["x"] + min(xs), box["x"] + max(xs)


def readout_time(chart: Any) -> str:
    return str(chart.locator(".jp-vgpu-TimeSeries-readoutTime").inner_text()).strip()


def test_opens_from_the_command_palette(lab: Lab, page: Any, opened: Any) -> None:
    page.keyboard.press("Control+Shift+C")
    palette = page.locator(".lm-CommandPalette")
    expect(palette).to_be_visible()
    palette.locator(".lm-CommandPalette-input").fill("GPU dashboard")
    item = palette.locator(".lm-CommandPalette-item", has_text="Open GPU dashboard")
    expect(item).to_have_count(1)
    item.click()
    panel = dashboard(page)
    expect(page.locator(DASHBOARD_TAB)).to_have_class(re.compile(r"\blm-mod-current\b"))
    expect(page.locator(DASHBOARD_TAB)).to_contain_text("GPU dashboard")
    expect(panel.locator(".jp-vgpu-Dashboard-title")).to_have_text("GPU dashboard")
    close_dashboard(page)


def test_opens_from_the_gpus_panel_once(lab: Lab, page: Any, opened: Any) -> None:
    sidebar = open_sidebar(page)
    button = sidebar.get_by_role("button", name="Open GPU dashboard")
    expect(button).to_be_visible()
    button.click()
    dashboard(page)
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="train.ipynb").click()
    button.click()  # shows the dashboard already open
    expect(page.locator(DASHBOARD)).to_have_count(1)
    expect(page.locator(DASHBOARD_TAB)).to_have_class(re.compile(r"\blm-mod-current\b"))
    screenshots(page, ARTIFACTS, "sidebar-dashboard-button", sidebar.locator(".jp-vgpu-Header"))


def test_gpu_section_charts_memory_utilisation_power_temperature_and_pcie(lab: Lab, page: Any, opened: Any) -> None:
    panel = dashboard(page)
    expect(panel.locator(".jp-vgpu-Dashboard-simulated")).to_contain_text("Simulated GPUs")
    section = panel.locator('section.jp-vgpu-Dashboard-gpu[data-gpu-index="0"]')
    expect(section).to_be_visible()
    expect(section.locator(".jp-vgpu-Dashboard-gpuTitle")).to_contain_text("NVIDIA A100-SXM4-40GB")
    expect(section.locator("figure.jp-vgpu-Dashboard-chart:not(.jp-vgpu-mod-slice)")).to_have_count(len(GPU_CHARTS))
    for kind in GPU_CHARTS:
        chart = gpu_chart(page, kind)
        expect(chart).to_be_visible()

        def enough(c: Any = chart) -> bool:
            return points_of(c) >= 3

        wait_for(f"points in the {kind} chart", enough, timeout=30)
        expect(chart.locator("polyline.jp-vgpu-TimeSeries-line")).not_to_have_count(0)
        ticks = chart.locator(".jp-vgpu-TimeSeries-axis.jp-vgpu-mod-left .jp-vgpu-TimeSeries-tick")
        assert ticks.count() >= 2, kind
        times = chart.locator(".jp-vgpu-TimeSeries-axis.jp-vgpu-mod-time .jp-vgpu-TimeSeries-tick")
        assert times.count() >= 1 and re.fullmatch(r"\d\d:\d\d(:\d\d)?", times.first.text_content() or ""), kind
    unit = {"memory": "GiB", "util": "%", "power": "W", "temp": "°C", "pcie": "/s"}
    for kind, text in unit.items():
        expect(gpu_chart(page, kind).locator(".jp-vgpu-TimeSeries-axis.jp-vgpu-mod-left")).to_contain_text(text)
    expect(gpu_chart(page, "memory").locator(".jp-vgpu-Dashboard-chartNote")).to_contain_text("of 40.0 GiB")
    expect(gpu_chart(page, "power").locator(".jp-vgpu-Dashboard-legend")).to_contain_text("limit 400 W")
    expect(gpu_chart(page, "pcie").locator(".jp-vgpu-Dashboard-key")).to_have_count(2)  # TX and RX
    screenshots(page, ARTIFACTS, "dashboard", panel)


def test_a_sliced_kernel_has_its_own_chart(lab: Lab, page: Any, opened: Any) -> None:
    chart = page.locator(f'{DASHBOARD} figure.jp-vgpu-mod-slice[data-chart="slice"][data-slice-id="{opened["id"]}"]')
    expect(chart).to_be_visible(timeout=30_000)
    expect(chart.locator(".jp-vgpu-Dashboard-sliceName")).to_have_text("train.ipynb")
    expect(chart.locator(".jp-vgpu-Dashboard-chartNote")).to_contain_text("1/4 GPU")
    expect(chart.locator('.jp-vgpu-Dashboard-key[data-series="reserved"]')).to_contain_text("reserved 10.0 GiB")
    wait_for("points in train.ipynb's chart", lambda: points_of(chart) >= 3, timeout=30)
    expect(chart.locator("polyline.jp-vgpu-Series-memory")).not_to_have_count(0)
    expect(chart.locator("line.jp-vgpu-TimeSeries-reference")).to_have_count(1)  # the reservation
    screenshots(page, ARTIFACTS, "dashboard-slice", chart)


def test_hovering_a_chart_reads_out_the_time_and_values(lab: Lab, page: Any, opened: Any) -> None:
    chart = gpu_chart(page, "memory")
    chart.scroll_into_view_if_needed()
    readout = chart.locator(".jp-vgpu-TimeSeries-readout")
    expect(readout).to_be_hidden()
    box = chart.locator("svg.jp-vgpu-TimeSeries-svg").bounding_box()
    assert box is not None
    page.mouse.move(data_xs(chart)[1] - 1, box["y"] + box["height"] * 0.4)  # the latest point
    expect(readout).to_be_visible()
    assert CLOCK.match(readout_time(chart)), readout_time(chart)
    rows = readout.locator(".jp-vgpu-TimeSeries-readoutRow")
    expect(rows.filter(has_text="used")).to_contain_text(re.compile(r"\d+(\.\d)? GiB"))
    expect(rows.filter(has_text="reserved by slices")).to_contain_text("10.0 GiB")
    expect(chart.locator("line.jp-vgpu-TimeSeries-rule")).to_have_count(1)
    screenshots(page, ARTIFACTS, "dashboard-readout", chart)
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] - 40)  # off the chart
    expect(readout).to_be_hidden()


def test_arrow_keys_move_the_readout_of_a_focused_chart(lab: Lab, page: Any, opened: Any) -> None:
    chart = gpu_chart(page, "util")
    wait_for("several utilisation points", lambda: points_of(chart) >= 6, timeout=30)
    chart.locator(".jp-vgpu-TimeSeries").focus()
    readout = chart.locator(".jp-vgpu-TimeSeries-readout")
    expect(readout).to_be_visible()  # the latest point, at once
    rule = chart.locator("line.jp-vgpu-TimeSeries-rule")
    before, x_before = readout_time(chart), float(rule.get_attribute("x1") or 0)
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
    after = readout_time(chart)
    assert CLOCK.match(after) and after < before, (before, after)
    assert float(rule.get_attribute("x1") or 0) < x_before
    expect(readout.locator(".jp-vgpu-TimeSeries-readoutRow", has_text="utilisation")).to_contain_text("%")
    page.keyboard.press("Escape")
    expect(readout).to_be_hidden()


def test_dragging_across_a_chart_zooms_and_reset_zoom_restores(lab: Lab, page: Any, opened: Any) -> None:
    reset = page.locator(f"{DASHBOARD} button.jp-vgpu-Dashboard-resetZoom")
    expect(reset).to_be_disabled()
    chart = gpu_chart(page, "power")
    chart.scroll_into_view_if_needed()
    start, end = window_of(chart)
    assert end - start == pytest.approx(900)  # 15 min at first
    box = chart.locator("svg.jp-vgpu-TimeSeries-svg").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] * 0.5
    page.mouse.move(box["x"] + box["width"] * 0.6, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
    expect(chart.locator("rect.jp-vgpu-TimeSeries-selection")).to_have_count(1)
    page.mouse.move(box["x"] + box["width"] * 0.8, y, steps=5)
    page.mouse.up()
    expect(reset).to_be_enabled()
    zoomed = window_of(chart)
    assert zoomed[0] > start + 300 and zoomed[1] < end and zoomed[1] - zoomed[0] < 300, (start, end, zoomed)
    # Every chart shows the zoomed window, and no range button is pressed.
    assert window_of(gpu_chart(page, "memory")) == zoomed
    expect(page.locator(f'{DASHBOARD} button.jp-vgpu-Dashboard-range[aria-pressed="true"]')).to_have_count(0)
    expect(page.locator(f"{DASHBOARD} .jp-vgpu-Dashboard-status")).to_contain_text(" to ")
    screenshots(page, ARTIFACTS, "dashboard-zoomed", page.locator(DASHBOARD))
    reset.click()
    expect(reset).to_be_disabled()
    start2, end2 = window_of(chart)
    assert end2 - start2 == pytest.approx(900) and end2 >= end
    expect(page.locator(f'{DASHBOARD} button.jp-vgpu-Dashboard-range[data-seconds="900"]')).to_have_attribute(
        "aria-pressed", "true"
    )


def test_range_buttons_switch_the_window(lab: Lab, page: Any, opened: Any) -> None:
    chart = gpu_chart(page, "memory")
    for seconds in (300, 3600, 900):
        button = page.locator(f'{DASHBOARD} button.jp-vgpu-Dashboard-range[data-seconds="{seconds}"]')
        button.click()
        expect(button).to_have_attribute("aria-pressed", "true")
        expect(button).to_have_class(re.compile(r"\bjp-mod-active\b"))
        expect(page.locator(f'{DASHBOARD} button.jp-vgpu-Dashboard-range[aria-pressed="true"]')).to_have_count(1)
        start, end = window_of(chart)
        assert end - start == pytest.approx(seconds), seconds
        if seconds == 300:
            screenshots(page, ARTIFACTS, "dashboard-5min", page.locator(DASHBOARD))


def test_docs_screenshot(lab: Lab, page: Any, opened: Any) -> None:
    """Framed as docs/dashboard.png: the dashboard alone in the main area, light, zoomed to the
    minute or two of history the test has made."""
    size = page.viewport_size
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    page.set_viewport_size({"width": 1280, "height": 1000})
    try:
        page.locator(DASHBOARD_TAB).click()
        page.locator(f'{DASHBOARD} button.jp-vgpu-Dashboard-range[data-seconds="300"]').click()
        chart = gpu_chart(page, "memory")
        wait_for("a minute of history", lambda: points_of(chart) >= 60, timeout=90)
        first, last = data_xs(chart)
        box = chart.locator("svg.jp-vgpu-TimeSeries-svg").bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        page.mouse.move(first + 2, y)
        page.mouse.down()
        page.mouse.move(last + 20, y, steps=6)
        page.mouse.up()
        expect(page.locator(f"{DASHBOARD} button.jp-vgpu-Dashboard-resetZoom")).to_be_enabled()
        page.mouse.move(0, 0)
        page.wait_for_timeout(600)
        page.locator(DASHBOARD).screenshot(path=str(ARTIFACTS / "dashboard-docs.png"))
    finally:
        page.set_viewport_size(size)
        page.evaluate("() => window.jupyterapp.shell.expandLeft()")
        page.locator(f'{DASHBOARD} button.jp-vgpu-Dashboard-range[data-seconds="900"]').click()


def test_the_dashboard_docks_beside_a_notebook(lab: Lab, page: Any, opened: Any) -> None:
    """Drag its tab to the right edge of the main area: the notebook and the dashboard side by
    side, both live."""
    tab = page.locator(DASHBOARD_TAB)
    notebook = page.locator(".jp-NotebookPanel", has=page.locator(".jp-Notebook")).first
    box = tab.bounding_box()
    dock = page.locator("#jp-main-dock-panel").bounding_box()
    assert box is not None and dock is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 80, steps=8)  # out of the tab bar: detached
    target = (dock["x"] + dock["width"] - 15, dock["y"] + dock["height"] / 2)
    page.mouse.move(*target, steps=12)
    expect(page.locator(".lm-DockPanel-overlay")).to_be_visible()
    page.mouse.move(target[0] + 2, target[1], steps=2)
    page.mouse.up()
    panel = page.locator(DASHBOARD)
    expect(panel).to_be_visible()
    expect(notebook).to_be_visible()
    a, b = notebook.bounding_box(), panel.bounding_box()
    assert a is not None and b is not None
    assert b["x"] >= a["x"] + a["width"] - 8, (a, b)  # the dashboard on the right of the notebook
    assert b["y"] < a["y"] + a["height"] and a["y"] < b["y"] + b["height"], (a, b)  # side by side
    assert a["width"] > 200 and b["width"] > 200, (a, b)
    # Two tab bars: the notebook's and the dashboard's.
    expect(page.locator("#jp-main-dock-panel .lm-DockPanel-tabBar:visible")).to_have_count(2)
    expect(gpu_chart(page, "memory").locator("polyline.jp-vgpu-TimeSeries-line")).not_to_have_count(0)
    page.wait_for_timeout(500)  # the charts take the new width
    for kind in GPU_CHARTS:
        svg = gpu_chart(page, kind).locator("svg.jp-vgpu-TimeSeries-svg").bounding_box()
        assert svg is not None and svg["x"] + svg["width"] <= b["x"] + b["width"] + 1, kind  # within the panel
    screenshots(page, ARTIFACTS, "dashboard-docked")
    lab_screenshot(page, ARTIFACTS / "dashboard-docked-lab.png")


def test_sidebar_gpu_chart_has_axis_values_a_readout_and_the_cards_figures(lab: Lab, page: Any, opened: Any) -> None:
    close_dashboard(page)
    sidebar = open_sidebar(page)
    card = sidebar.locator(".jp-vgpu-DeviceCard").first
    toggle = card.get_by_role("button", name="History of GPU 0")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    chart = card.locator(".jp-vgpu-DeviceCard-details .jp-vgpu-Chart")
    expect(chart).to_be_visible()
    expect(chart.locator("polyline.jp-vgpu-Chart-used")).not_to_have_count(0)
    left = chart.locator(".jp-vgpu-TimeSeries-axis.jp-vgpu-mod-left .jp-vgpu-TimeSeries-tick")
    right = chart.locator(".jp-vgpu-TimeSeries-axis.jp-vgpu-mod-right .jp-vgpu-TimeSeries-tick")
    assert left.count() >= 2 and right.count() >= 2
    assert all(re.fullmatch(r"\d+(\.\d+)? (B|KiB|MiB|GiB)", t) for t in left.all_text_contents()), (
        left.all_text_contents()
    )
    assert all(re.fullmatch(r"\d+(\.\d+)?%", t) for t in right.all_text_contents()), right.all_text_contents()
    assert "40 GiB" in left.all_text_contents()  # the GPU's memory is the top
    assert "100%" in right.all_text_contents()
    times = chart.locator(".jp-vgpu-TimeSeries-axis.jp-vgpu-mod-time .jp-vgpu-TimeSeries-tick")
    assert times.count() >= 1 and re.fullmatch(r"\d\d:\d\d(:\d\d)?", times.first.text_content() or "")

    # The legend reads what the card reads (not the last history point, which lags it).
    def figures() -> dict[str, str]:
        return dict(
            card.evaluate(
                """c => ({
                    card: c.querySelector('.jp-vgpu-DeviceCard-memory').textContent,
                    cardUtil: c.querySelector('.jp-vgpu-DeviceCard-util').textContent,
                    used: c.querySelector('.jp-vgpu-Chart-key.jp-vgpu-mod-used').textContent,
                    util: c.querySelector('.jp-vgpu-Chart-key.jp-vgpu-mod-util').textContent,
                })"""
            )
        )

    for _ in range(4):
        seen = figures()
        assert seen["util"] == seen["cardUtil"], seen
        assert seen["used"] == f"used {seen['card'].split(' / ')[0]} GiB", seen
        page.wait_for_timeout(700)

    readout = chart.locator(".jp-vgpu-TimeSeries-readout")
    expect(readout).to_be_hidden()
    box = chart.locator("svg.jp-vgpu-TimeSeries-svg").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.85, box["y"] + box["height"] * 0.5)
    expect(readout).to_be_visible()
    assert CLOCK.match(readout_time(chart)), readout_time(chart)
    expect(readout.locator(".jp-vgpu-TimeSeries-readoutRow", has_text="used")).to_contain_text("GiB")
    expect(readout.locator(".jp-vgpu-TimeSeries-readoutRow", has_text="util")).to_contain_text("%")
    screenshots(page, ARTIFACTS, "sidebar-chart", sidebar)
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] - 60)
    expect(readout).to_be_hidden()
    toggle.click()


def test_sidebar_slice_chart_legend_agrees_with_its_row(lab: Lab, page: Any, opened: Any) -> None:
    sidebar = open_sidebar(page)
    row = sidebar.locator(".jp-vgpu-SliceRow", has_text="train.ipynb")
    toggle = row.get_by_role("button", name="History of train.ipynb")
    toggle.click()
    chart = row.locator(".jp-vgpu-Chart")
    expect(chart).to_be_visible()
    for _ in range(4):
        seen = dict(
            row.evaluate(
                """r => ({
                    row: r.querySelector('.jp-vgpu-SliceRow-memory').textContent,
                    rowUtil: r.querySelector('.jp-vgpu-SliceRow-util').textContent,
                    used: r.querySelector('.jp-vgpu-Chart-key.jp-vgpu-mod-used').textContent,
                    util: r.querySelector('.jp-vgpu-Chart-key.jp-vgpu-mod-util').textContent,
                })"""
            )
        )
        assert seen["util"] == f"util {seen['rowUtil']}", seen
        assert seen["used"] == f"used {seen['row'].split(' / ')[0]} GiB", seen
        page.wait_for_timeout(700)
    toggle.click()
    expect(sidebar.locator(".jp-vgpu-Chart")).to_have_count(0)
