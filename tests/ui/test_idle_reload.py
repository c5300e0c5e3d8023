"""A browser reload is not activity (issue 30): in a real JupyterLab, a notebook's kernel that has
been idle keeps counting its idle time across a page reload (which reconnects the kernel's
websocket and asks kernel_info, comm_info and the debugger's info), while running a cell from the
page resets it. Before, every reload made every kernel read as idle for a few seconds, so the
idle reclaim could never reach a kernel whose owner kept a tab open."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import KERNEL_DISPLAY_NAME, KERNEL_NAME, Lab, notebook_json
from .pages import expect, kernel_slice, reload, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Idle times are judged (and shown) whatever idle_reclaim_after is; none is reclaimed here.
SERVER_CONFIG = {"VGPUServer": {"monitor_interval": 0.5}}
NOTEBOOKS = ("work/first.ipynb", "work/second.ipynb")
IDLE_BEFORE_RELOAD = 12.0


def idle_seconds(lab: Lab, path: str) -> float | None:
    found = kernel_slice(lab, path)
    return None if found is None else found.get("idle_seconds")


def open_notebook(lab: Lab, page: Any, path: str) -> None:
    page.goto(lab.page_url(f"lab/tree/{path}"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)
    # connected: the toolbar's kernel indicator reads Idle
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first).to_be_attached(timeout=60_000)


def test_a_reload_keeps_every_kernels_idle_time_and_a_cell_resets_it(lab: Lab, page: Any) -> None:
    for path in NOTEBOOKS:
        (lab.root / path).write_text(notebook_json(KERNEL_NAME, KERNEL_DISPLAY_NAME, source="x = 1"))
    for path in NOTEBOOKS:  # both open in the one tab (the second opens beside the first)
        open_notebook(lab, page, path)
        wait_for(f"{path}'s kernel to hold a slice", lambda p=path: kernel_slice(lab, p))
    wait_for(
        f"both kernels idle for {IDLE_BEFORE_RELOAD:g} s",
        lambda: all((idle_seconds(lab, p) or 0) >= IDLE_BEFORE_RELOAD for p in NOTEBOOKS),
        timeout=90,
    )
    before = {p: idle_seconds(lab, p) for p in NOTEBOOKS}
    read_at = time.time()

    reload(page)
    expect(page.locator(".jp-NotebookPanel:visible").first).to_be_visible(timeout=60_000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first).to_be_attached(timeout=60_000)
    page.wait_for_timeout(4000)  # several monitor ticks after the kernels were asked everything a reload asks

    for path in NOTEBOOKS:
        after = idle_seconds(lab, path)
        assert after is not None and after >= before[path] + (time.time() - read_at) - 3, (path, before[path], after)

    # A cell run from the page is activity: that kernel's idle time starts again, the other's does not.
    first = NOTEBOOKS[1]  # the notebook in front after the reload: the one opened last
    page.locator(".jp-NotebookPanel:visible .jp-Cell .jp-InputArea-editor").first.click()
    page.keyboard.press("Shift+Enter")
    wait_for(f"{first}'s idle time to start again", lambda: (idle_seconds(lab, first) or 99) < 5, timeout=30)
    assert (idle_seconds(lab, NOTEBOOKS[0]) or 0) >= IDLE_BEFORE_RELOAD
