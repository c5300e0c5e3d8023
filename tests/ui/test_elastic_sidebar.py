"""An elastic slice in a real JupyterLab (issue 42, "Showing"): a kernel from a kernelspec with
``gpu_fraction`` 0.25 and ``gpu_fraction_limit`` 0.5 on one simulated 16 GiB GPU. Within its
request its row reads "1.2 GiB of up to 8.0 GiB (4.0 GiB guaranteed)" with no hatched part; above
it, the burst is hatched in the kernel's colour beside the solid use of the request, a mark where
the request ends, and the status bar says the request, the limit and the burst; light and dark.

Then a command waits in line for more than the burst leaves (a subprocess of the test, as a
colleague's terminal would): the server asks the burst back (docs/rest.md, "Giving bursts back")
and its owner sees a notification with *Show GPUs* and no *Keep it*, the row's countdown with the
burst hatched in the warning colour, and the status bar's countdown, light and dark; once the
kernel's use is back within its request, the notice is gone everywhere and the command gets in.
The notice lasts ``burst_reclaim_notice`` (600 s here): its action never comes during the test.

Between the two, the GPU's own card and the dashboard: the GPU's bar draws the burst hatched in
the kernel's colour after its request, counted once (the bar's empty part is what the server says
is free), and says what bursting kernels hold; the legend keys the burst and the request mark;
the dashboard's chart of the slice draws its request and its limit as lines, its use above the
request hatched, and reads request, limit and burst; light and dark.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ARTIFACTS, Lab, notebook_json
from .pages import SIDEBAR, expect, kernel_slice, open_sidebar, screenshots, set_theme_live, themes, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GiB = 1024**3
MiB = 1024**2
ELASTIC = "python3-vgpu-elastic"
ELASTIC_DISPLAY = "Python 3 (1/4 GPU, up to 1/2)"
EXTRA_KERNELSPECS = {ELASTIC: (ELASTIC_DISPLAY, {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.5})}
#: Seconds of the burst notice: long enough that its countdown is seen, never its restart.
NOTICE = 600
# A dashboard point every second (the default is 10 s), so its chart has a few soon.
SERVER_CONFIG = {"VGPUServer": {"monitor_interval": 0.5, "burst_reclaim_notice": NOTICE, "dashboard_step": 1}}
BURST = "work/burst.ipynb"
STATUS = ".jp-vgpu-StatusItem-content"
DASHBOARD = "#jp-vgpu-dashboard"
DASHBOARD_TAB = '.lm-DockPanel-tabBar .lm-TabBar-tab[data-id="jp-vgpu-dashboard"]'


def style(locator: Any, prop: str) -> str:
    return str(locator.evaluate("(e, p) => getComputedStyle(e).getPropertyValue(p)", prop))


def percent(value: float) -> Any:
    """An inline style's percentage, as React writes it ("50.000%") or the browser reads it ("50%")."""
    return re.compile(rf":\s*{re.escape(f'{value:g}')}(\.?0*)%")


@pytest.fixture(scope="module")
def elastic(lab: Lab, page: Any) -> dict[str, Any]:
    """work/burst.ipynb open on a 1/4 GPU kernel "up to 1/2"; returns its slice."""
    (lab.root / BURST).write_text(notebook_json(ELASTIC, ELASTIC_DISPLAY))
    page.goto(lab.page_url(f"lab/tree/{BURST}"))
    return dict(wait_for("the elastic kernel to hold its slice", lambda: kernel_slice(lab, BURST)))


def test_an_elastic_slice_shows_its_burst_hatched_its_request_marked_and_says_request_and_limit(
    lab: Lab, page: Any, elastic: dict[str, Any]
) -> None:
    sidebar = open_sidebar(page)
    held = elastic
    assert held["request_text"] == "1/4 GPU, up to 1/2", held
    assert held["memory_reserved"] == 4 * GiB and held["memory_burst_limit"] == 8 * GiB - held["context_allowance"], (
        held
    )

    row = sidebar.locator(".jp-vgpu-SliceRow", has_text="burst.ipynb")
    bar = row.locator(".jp-vgpu-SliceBar")
    memory = row.locator(".jp-vgpu-SliceRow-memory")
    mark = bar.locator(".jp-vgpu-SliceBar-request")
    burst = bar.locator(".jp-vgpu-SliceBar-burst")

    # Within its request: the use solid, nothing hatched, the request marked halfway (4 of 8 GiB).
    lab.simulate([{"gpu": 0, "pid": held["pid"], "memory": "1.2GiB", "utilization": 20}])
    expect(memory).to_have_text("1.2 GiB of up to 8.0 GiB (4.0 GiB guaranteed)")
    expect(burst).to_have_count(0)
    expect(mark).to_have_attribute("style", percent(50))
    expect(bar.locator(".jp-vgpu-SliceBar-used")).to_have_attribute("style", percent(15))
    expect(bar).to_have_attribute("aria-valuetext", "1.2 GiB used of up to 8.0 GiB, 4.0 GiB guaranteed")

    # Above it: the request's part solid, the 2.1 GiB burst hatched beside it, the mark where it was.
    lab.simulate([{"gpu": 0, "pid": held["pid"], "memory": "6.1GiB", "utilization": 80}])
    expect(memory).to_have_text("6.1 GiB of up to 8.0 GiB (4.0 GiB guaranteed)")
    expect(bar.locator(".jp-vgpu-SliceBar-used")).to_have_attribute("style", percent(50))
    expect(burst).to_have_attribute("style", percent(26.25))
    expect(mark).to_have_attribute("style", percent(50))
    expect(bar).to_have_attribute(
        "aria-valuetext", "6.1 GiB used of up to 8.0 GiB, 4.0 GiB guaranteed, bursting 2.1 GiB above the request"
    )
    assert "repeating-linear-gradient" in style(burst, "background-image")
    # Within its limit it is not over: no warning, no overflow.
    expect(bar.locator(".jp-vgpu-SliceBar-over")).to_have_count(0)
    assert kernel_slice(lab, BURST)["state"] in ("ok", "near")
    # The mark sits where the request ends: at the burst's left edge.
    mark_box, burst_box = mark.bounding_box(), burst.bounding_box()
    assert mark_box and burst_box and abs(mark_box["x"] + mark_box["width"] / 2 - burst_box["x"]) <= 2, (
        mark_box,
        burst_box,
    )

    # The longer figure is whole at the default sidebar width, the bar a line of its own.
    assert memory.evaluate("e => e.scrollWidth <= e.clientWidth"), memory.bounding_box()
    bar_box, row_box = bar.bounding_box(), row.locator(".jp-vgpu-SliceRow-main").bounding_box()
    assert bar_box and row_box and bar_box["width"] >= 0.9 * row_box["width"], (bar_box, row_box)

    status = page.locator(STATUS)
    expect(status).to_contain_text("GPU 6.1 GiB of up to 8.0 GiB")
    expect(status).to_have_attribute(
        "title",
        re.compile(r"\nRequest 4\.0 GiB \(guaranteed\), limit 8\.0 GiB: bursting 2\.1 GiB above its request\.\n"),
    )

    screenshots(page, ARTIFACTS, "elastic-burst-sidebar", target=page.locator(SIDEBAR))
    screenshots(page, ARTIFACTS, "elastic-burst-row", target=row)
    screenshots(page, ARTIFACTS, "elastic-burst-lab")


def width_of(locator: Any) -> float:
    """An inline style's width in percent."""
    match = re.search(r"width:\s*([0-9.]+)%", locator.get_attribute("style") or "")
    assert match, locator.get_attribute("style")
    return float(match.group(1))


def test_the_gpu_card_draws_the_burst_hatched_after_the_request_counted_once(
    lab: Lab, page: Any, elastic: dict[str, Any]
) -> None:
    sidebar = open_sidebar(page)
    # 6 GiB: 2 GiB above the 4 GiB request, within the 8 GiB limit.
    lab.simulate([{"gpu": 0, "pid": elastic["pid"], "memory": "6GiB", "utilization": 80}])
    row = sidebar.locator(".jp-vgpu-SliceRow", has_text="burst.ipynb")
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text("6.0 GiB of up to 8.0 GiB (4.0 GiB guaranteed)")
    status, devices = lab.api("GET", "api/vgpu/devices")
    assert status == 200, devices
    gpu = devices["devices"][0]
    assert gpu["memory_over_use"] == 2 * GiB and gpu["memory_free"] == gpu["memory_total"] - 6 * GiB, gpu

    card = sidebar.locator('.jp-vgpu-DeviceCard[data-gpu-index="0"]')
    bar = card.locator(".jp-vgpu-DeviceBar")
    part = bar.locator(f'.jp-vgpu-DeviceBar-slice[data-slice-id="{elastic["id"]}"]')
    burst = part.locator(".jp-vgpu-DeviceBar-burst")
    used = part.locator(".jp-vgpu-DeviceBar-used")
    # The slice's part is its request and its burst; within it, the request solid, the burst hatched.
    expect(part).to_have_attribute("style", percent(6 / 16 * 100))
    expect(used).to_have_attribute("style", percent(round(4 / 6 * 100, 3)))
    expect(burst).to_have_attribute("style", percent(round(2 / 6 * 100, 3)))
    expect(part).to_have_class(re.compile(r"\bjp-vgpu-mod-bursting\b"))
    held = "2.0 GiB held above requests by bursting kernels (given back when a request waits)"
    expect(bar).to_have_attribute("title", re.compile(re.escape(held)))
    expect(card.locator(".jp-vgpu-DeviceCard-burst")).to_have_text("2.0 GiB burst")
    expect(card.locator(".jp-vgpu-DeviceCard-burst")).to_have_attribute("title", f"{held}.")
    expect(card.locator(".jp-vgpu-DeviceCard-free")).to_have_text(f"{gpu['memory_free'] / GiB:.1f} GiB free to reserve")
    expect(card.locator(".jp-vgpu-DeviceCard-free")).to_have_attribute("title", re.compile(re.escape(held)))

    # Drawn once: the burst ends where the slice's part ends, and what the bar leaves empty is free.
    bar_box, part_box, burst_box = bar.bounding_box(), part.bounding_box(), burst.bounding_box()
    assert bar_box and part_box and burst_box
    assert abs(burst_box["x"] + burst_box["width"] - (part_box["x"] + part_box["width"])) <= 1, (part_box, burst_box)
    assert abs(burst_box["width"] - part_box["width"] / 3) <= 1.5, (part_box, burst_box)
    inner = bar.evaluate("b => b.clientWidth")
    drawn = bar.evaluate("b => Array.from(b.children).reduce((w, c) => w + c.getBoundingClientRect().width, 0)")
    assert abs((inner - drawn) / inner - gpu["memory_free"] / gpu["memory_total"]) < 0.02, (inner, drawn, gpu)

    # The legend keys the burst, hatched, and the request's mark.
    legend = sidebar.locator(".jp-vgpu-Legend")
    expect(legend.locator(".jp-vgpu-Legend-item")).to_have_text(
        ["used", "reserved", "burst", "request", "other processes", "free"]
    )
    expect(legend.locator(".jp-vgpu-Legend-item.jp-vgpu-mod-burst")).to_have_attribute(
        "title", re.compile(r"^Burst above request, given back when a request waits")
    )
    row_burst = row.locator(".jp-vgpu-SliceBar-burst")
    for theme in themes(page):
        # Hatched in the kernel's colour (its solid use's), as the row's burst is.
        assert "repeating-linear-gradient" in style(burst, "background-image"), theme
        assert style(used, "background-color") in style(burst, "background-image"), theme
        assert style(burst, "background-image") == style(row_burst, "background-image"), theme
        swatch = legend.locator(".jp-vgpu-Legend-swatch.jp-vgpu-mod-burst")
        assert "repeating-linear-gradient" in style(swatch, "background-image"), theme
        mark = legend.locator(".jp-vgpu-Legend-swatch.jp-vgpu-mod-request")
        assert "linear-gradient" in style(mark, "background-image"), theme
        card.screenshot(path=str(ARTIFACTS / f"elastic-burst-card-{theme}.png"))
        legend.screenshot(path=str(ARTIFACTS / f"elastic-burst-legend-{theme}.png"))


def test_the_dashboard_charts_the_request_and_the_limit_and_hatches_the_burst(
    lab: Lab, page: Any, elastic: dict[str, Any]
) -> None:
    lab.simulate([{"gpu": 0, "pid": elastic["pid"], "memory": "6GiB", "utilization": 80}])
    sidebar = open_sidebar(page)
    sidebar.get_by_role("button", name="Open GPU dashboard").click()
    chart = page.locator(f'{DASHBOARD} figure.jp-vgpu-mod-slice[data-slice-id="{elastic["id"]}"]')
    expect(chart).to_be_visible(timeout=30_000)
    svg = chart.locator("svg.jp-vgpu-TimeSeries-svg")
    wait_for("points in the slice's chart", lambda: int(svg.get_attribute("data-points") or 0) >= 3, timeout=30)
    expect(chart.locator(".jp-vgpu-Dashboard-chartNote")).to_contain_text("1/4 GPU, up to 1/2")
    expect(chart.locator('.jp-vgpu-Dashboard-key[data-series="request"]')).to_have_text("request 4.0 GiB")
    expect(chart.locator('.jp-vgpu-Dashboard-key[data-series="limit"]')).to_have_text("limit 8.0 GiB")
    expect(chart.locator('.jp-vgpu-Dashboard-key[data-series="burst"]')).to_have_text("burst 2.0 GiB")

    # The request and the limit cross the plot at their values: the limit twice as high.
    request = chart.locator("line.jp-vgpu-TimeSeries-reference.jp-vgpu-Series-reserved")
    limit = chart.locator("line.jp-vgpu-TimeSeries-reference.jp-vgpu-Series-burstLimit")
    expect(chart.locator("line.jp-vgpu-TimeSeries-reference")).to_have_count(2)
    background = chart.locator("rect.jp-vgpu-TimeSeries-bg")
    base = float(background.get_attribute("y") or 0) + float(background.get_attribute("height") or 0)
    request_y, limit_y = float(request.get_attribute("y1") or 0), float(limit.get_attribute("y1") or 0)
    assert abs((base - limit_y) - 2 * (base - request_y)) < 1.5, (base, request_y, limit_y)

    # The use above the request: the area again, clipped there, hatched.
    above = chart.locator("polygon.jp-vgpu-TimeSeries-areaAbove")
    expect(above).not_to_have_count(0)
    hatch = re.fullmatch(r"url\(#(.+)\)", above.first.get_attribute("fill") or "")
    assert hatch, above.first.get_attribute("fill")
    clip = chart.locator(f'[id="{hatch.group(1).removesuffix("hatch")}clip"] rect')
    assert abs(float(clip.get_attribute("y") or 0) + float(clip.get_attribute("height") or 0) - request_y) < 0.5
    stripes = chart.locator(f'pattern[id="{hatch.group(1)}"] rect')

    # Zoomed to the slice's points (a drag across them), so the hatch shows in the screenshots;
    # hovering the latest point reads the request, the limit and the burst.
    chart.scroll_into_view_if_needed()
    box = svg.bounding_box()
    assert box

    def xs() -> list[float]:
        lines = chart.locator("polyline.jp-vgpu-Series-memory").evaluate_all(
            "ls => ls.map(l => l.getAttribute('points'))"
        )
        return sorted(float(p.split(",")[0]) for points in lines for p in (points or "").split())

    # A drag zooms when it spans 5 px or more (charts/dragzoom.ts): the slice's few points may lie
    # closer together than that in a narrow chart (run 28), so the drag begins 16 px before the
    # first, within the plot.
    plot_left = float(background.get_attribute("x") or 0)
    plot_right = plot_left + float(background.get_attribute("width") or 0)
    first, latest = xs()[0], xs()[-1]
    left = max(plot_left + 1, first - 16)
    right = latest if latest - left >= 12 else min(plot_right - 1, left + 16)
    page.mouse.move(box["x"] + left, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + right, box["y"] + box["height"] * 0.5, steps=5)
    page.mouse.up()
    expect(page.locator(f"{DASHBOARD} button.jp-vgpu-Dashboard-resetZoom")).to_be_enabled()
    page.mouse.move(box["x"] + xs()[-1] - 1, box["y"] + box["height"] * 0.5)
    readout = chart.locator(".jp-vgpu-TimeSeries-readout")
    expect(readout).to_be_visible()
    rows = readout.locator(".jp-vgpu-TimeSeries-readoutRow")
    expect(rows.filter(has_text="request")).to_contain_text("4.0 GiB")
    expect(rows.filter(has_text="limit")).to_contain_text("8.0 GiB")
    expect(rows.filter(has_text="burst")).to_contain_text("2.0 GiB")
    for theme in themes(page):
        # The limit reads apart from the request (colour and dashes), the hatch shows.
        assert style(limit, "stroke") != style(request, "stroke"), theme
        assert style(limit, "stroke-dasharray") != style(request, "stroke-dasharray"), theme
        assert style(stripes, "fill") not in ("", "none", "rgba(0, 0, 0, 0)"), theme
        chart.screenshot(path=str(ARTIFACTS / f"elastic-dashboard-slice-{theme}.png"))
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] - 60)
    page.locator(f"{DASHBOARD} button.jp-vgpu-Dashboard-resetZoom").click()
    page.locator(DASHBOARD_TAB).locator(".lm-TabBar-tabCloseIcon").click()
    expect(page.locator(DASHBOARD)).to_have_count(0)
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="burst.ipynb").click()


def resolved(page: Any, css: str) -> str:
    """A CSS colour (``var(--jp-warn-color1)``) as the browser resolves it in the current theme."""
    return str(
        page.evaluate(
            """css => { const e = document.createElement('span'); e.style.color = css;
            document.body.appendChild(e); const c = getComputedStyle(e).color; e.remove(); return c; }""",
            css,
        )
    )


@pytest.fixture
def bursting(lab: Lab, elastic: dict[str, Any]) -> dict[str, Any]:
    """The elastic kernel uses 7.0 GiB: 3.0 GiB above its 4.0 GiB request; returns its slice."""
    lab.simulate([{"gpu": 0, "pid": elastic["pid"], "memory": "7GiB", "utilization": 80}])

    def burst_seen() -> dict[str, Any] | None:
        found = kernel_slice(lab, BURST)
        return found if found and abs((found.get("memory_burst") or 0) - 3.0 * GiB) < MiB else None

    return dict(wait_for("the server to see the 3.0 GiB burst", burst_seen, timeout=30))


@pytest.fixture
def waiter(lab: Lab, bursting: dict[str, Any]) -> Iterator[subprocess.Popen[str]]:
    """`jupyter vgpu run -p 0.7 --wait 300`: 11.2 GiB, which the 12 GiB the request leaves would
    hold, and the 9.0 GiB that the 3.0 GiB burst leaves does not: it waits in line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "0.7", "--wait", "300", "--",
         sys.executable, "-c", "print('GRANTED')"],
        env=lab.env, cwd=lab.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def seconds_left(text: str) -> int:
    match = re.search(r"in (\d+):(\d\d)", text)
    assert match, text
    return int(match.group(1)) * 60 + int(match.group(2))


def test_a_burst_asked_back_counts_down_in_a_notification_the_row_and_the_status_bar_with_no_keep_it(
    lab: Lab, page: Any, elastic: dict[str, Any], waiter: subprocess.Popen[str]
) -> None:
    sidebar = open_sidebar(page)

    def noticed() -> dict[str, Any] | None:
        found = kernel_slice(lab, BURST)
        return found if found and found.get("burst_notice") else None

    held = wait_for("the server to ask the burst back", noticed, timeout=60)
    notice = held["burst_notice"]
    assert notice["action"] == "restart" and abs(notice["burst"] - 3.0 * GiB) < MiB, notice
    assert notice["for"].startswith("1 waiting in line (first: `"), notice  # your own command: named
    assert NOTICE - 30 < notice["seconds_left"] <= NOTICE, notice

    # The notification: the notebook, how much, by when, for whom, what then; no "Keep it".
    toast = page.locator(".jp-Notification-Toast-warning", has_text="burst.ipynb: give back")
    expect(toast).to_be_visible(timeout=20_000)
    expect(toast).to_contain_text(
        re.compile(
            r"burst\.ipynb: give back 3\.0 GiB of GPU memory by \d\d:\d\d:\d\d for 1 waiting in line, "
            r"or the kernel restarts\."
        )
    )
    expect(toast.get_by_role("button", name="Show GPUs")).to_be_visible()
    expect(toast.get_by_role("button", name="Keep it")).to_have_count(0)

    # The row: its countdown (no "Keep it"), the burst hatched in the warning colour.
    row = sidebar.locator(".jp-vgpu-SliceRow", has_text="burst.ipynb")
    warning = row.locator(".jp-vgpu-SliceRow-burstNotice")
    expect(warning.locator(".jp-vgpu-SliceRow-burstText")).to_have_text(
        re.compile(r"^Give back 3\.0 GiB in (10:00|9:[0-5]\d) for 1 waiting in line, or the kernel restarts$")
    )
    expect(warning).to_have_attribute("aria-label", "Burst notice for burst.ipynb")
    expect(warning).to_have_attribute(
        "title", re.compile(r"^This kernel uses 3\.0 GiB above its 4\.0 GiB request while the GPU is needed: 1 waiting")
    )
    expect(warning).to_have_attribute("title", re.compile(r"torch\.cuda\.empty_cache\(\)"))
    expect(warning).to_have_attribute("title", re.compile(r"On a real GPU, TensorFlow and JAX cannot give memory back"))
    expect(row.get_by_role("button", name=re.compile("Keep"))).to_have_count(0)
    bar = row.locator(".jp-vgpu-SliceBar")
    expect(bar).to_have_class(re.compile(r"\bjp-vgpu-mod-givingBack\b"))
    expect(bar).to_have_attribute("aria-valuetext", re.compile(r"bursting 3\.0 GiB above the request, asked back$"))

    # The status bar counts down too, and its tooltip says how to end it.
    status = page.locator(".jp-vgpu-StatusItem-content.jp-vgpu-mod-burstNotice")
    expect(status).to_have_text(re.compile(r"^GPU burst: restarting in (10:00|9:[0-5]\d)$"))
    expect(status).to_have_attribute("title", re.compile(r"the server restarts the kernel: it keeps its slice"))
    expect(status).to_have_attribute("title", re.compile(r"\nRequest 4\.0 GiB \(guaranteed\), limit 8\.0 GiB"))
    text = warning.locator(".jp-vgpu-SliceRow-burstText")
    first = seconds_left(text.inner_text())
    page.wait_for_timeout(2200)
    later = seconds_left(text.inner_text())
    assert 0 < first - later <= 4, (first, later)  # it ticks, roughly in seconds
    assert abs(seconds_left(status.inner_text()) - later) <= 2

    # Light and dark: the warning's text reads on its background, the burst is hatched in the
    # theme's warning colour (not the kernel's), and the status bar stands out.
    burst = bar.locator(".jp-vgpu-SliceBar-burst")
    for theme in ("light", "dark"):
        set_theme_live(page, theme)
        assert resolved(page, "var(--jp-warn-color1)") in style(burst, "background-image"), theme
        assert style(text, "color") != style(warning, "background-color"), theme
        assert style(status, "background-color") not in ("", "rgba(0, 0, 0, 0)"), theme
        row.screenshot(path=str(ARTIFACTS / f"elastic-burst-notice-row-{theme}.png"))
        status.screenshot(path=str(ARTIFACTS / f"elastic-burst-notice-status-{theme}.png"))
        page.screenshot(path=str(ARTIFACTS / f"elastic-burst-notice-lab-{theme}.png"))
    set_theme_live(page, "light")
    assert waiter.poll() is None  # still in line

    # The kernel frees what it held above its request: the notice ends everywhere, and the
    # command gets in.
    lab.simulate([{"gpu": 0, "pid": elastic["pid"], "memory": "3GiB", "utilization": 10}])
    expect(toast).to_have_count(0, timeout=20_000)
    expect(warning).to_have_count(0)
    expect(bar).not_to_have_class(re.compile(r"jp-vgpu-mod-givingBack"))
    expect(page.locator(STATUS)).to_have_text(re.compile(r"^GPU 3\.0 GiB of up to 8\.0 GiB"))
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0 and "GRANTED" in out, (waiter.returncode, out, err)
    assert lab.api("GET", f"api/kernels/{elastic['kernel_id']}")[0] == 200  # nothing was restarted
