"""An elastic slice in a real JupyterLab (issue 42, "Showing"): a kernel from a kernelspec with
``gpu_fraction`` 0.25 and ``gpu_fraction_limit`` 0.5 on one simulated 16 GiB GPU. Within its
request its row reads "1.2 GiB of up to 8.0 GiB (4.0 GiB guaranteed)" with no hatched part; above
it, the burst is hatched in the kernel's colour beside the solid use of the request, a mark where
the request ends, and the status bar says the request, the limit and the burst; light and dark.

The burst's countdown (a burst about to be reclaimed) does not exist yet: not tested here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import ARTIFACTS, Lab, notebook_json
from .pages import SIDEBAR, expect, kernel_slice, open_sidebar, screenshots, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GiB = 1024**3
ELASTIC = "python3-vgpu-elastic"
ELASTIC_DISPLAY = "Python 3 (1/4 GPU, up to 1/2)"
EXTRA_KERNELSPECS = {ELASTIC: (ELASTIC_DISPLAY, {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.5})}
SERVER_CONFIG = {"VGPUServer": {"monitor_interval": 0.5}}
# window.jupyterapp: switch themes for the screenshots without a reload.
LAB_ARGS = ["--LabApp.expose_app_in_browser=True"]
BURST = "work/burst.ipynb"
STATUS = ".jp-vgpu-StatusItem-content"


def style(locator: Any, prop: str) -> str:
    return str(locator.evaluate("(e, p) => getComputedStyle(e).getPropertyValue(p)", prop))


def percent(value: float) -> Any:
    """An inline style's percentage, as React writes it ("50.000%") or the browser reads it ("50%")."""
    return re.compile(rf":\s*{re.escape(f'{value:g}')}(\.?0*)%")


def test_an_elastic_slice_shows_its_burst_hatched_its_request_marked_and_says_request_and_limit(
    lab: Lab, page: Any
) -> None:
    (lab.root / BURST).write_text(notebook_json(ELASTIC, ELASTIC_DISPLAY))
    page.goto(lab.page_url(f"lab/tree/{BURST}"))
    sidebar = open_sidebar(page)
    held = wait_for("the elastic kernel to hold its slice", lambda: kernel_slice(lab, BURST))
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
    expect(status).to_contain_text("GPU 6.1 / 4.0 GiB, up to 8.0 GiB")
    expect(status).to_have_attribute(
        "title",
        re.compile(r"\nRequest 4\.0 GiB \(guaranteed\), limit 8\.0 GiB: bursting 2\.1 GiB above its request\.\n"),
    )

    screenshots(page, ARTIFACTS, "elastic-burst-sidebar", target=page.locator(SIDEBAR))
    screenshots(page, ARTIFACTS, "elastic-burst-row", target=row)
    screenshots(page, ARTIFACTS, "elastic-burst-lab")
