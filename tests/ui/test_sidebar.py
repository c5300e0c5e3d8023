"""The GPUs sidebar and status bar item, in a real JupyterLab on simulated GPUs.

The tests share one lab and one browser tab and run in file order: a notebook on a
"Python 3 (1/4 GPU)" kernel is opened first, its slice is watched, then shut down.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ARTIFACTS, KERNEL_DISPLAY_NAME, Lab, notebook_json
from .pages import (
    SAMPLE,
    SIDEBAR,
    expect,
    kernel_slice,
    lab_screenshot,
    open_sidebar,
    reload,
    route_sample,
    unroute,
    wait_for,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GiB = 1024**3


def notebook_row(page: Any) -> Any:
    return page.locator(f"{SIDEBAR} .jp-vgpu-SliceRow", has_text="train.ipynb")


@pytest.fixture(scope="module")
def opened(lab: Lab, page: Any) -> dict[str, Any]:
    """work/train.ipynb open in the lab, its 1/4 GPU kernel started; returns its slice."""
    page.goto(lab.page_url("lab/tree/work/train.ipynb"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)
    return wait_for("the notebook's kernel to hold a slice", lambda: kernel_slice(lab, "work/train.ipynb"))


@pytest.fixture(scope="module")
def command_holder(lab: Lab) -> Iterator[subprocess.Popen[bytes]]:
    """`jupyter vgpu run -p 0.25 -- python -c 'sleep'`: a slice held by a command."""
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-q", "-p", "0.25", "--",
         sys.executable, "-c", "import time; time.sleep(600)"],
        env=lab.env, cwd=lab.root,
    )  # fmt: skip
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def command_slice(lab: Lab, run: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The command's slice once its command holds it: ``jupyter vgpu run`` books it as its own
    process, then gives it to the command it starts, whose GPU memory is the slice's; memory
    simulated for run's own pid would be a foreign process's (its row read "unknown"; a CI flake)."""
    return wait_for(
        "the command's slice, held by the command",
        lambda: next(
            (s for s in lab.slices() if s["holder_kind"] == "command" and s["pid"] not in (None, run.pid)), None
        ),
    )


def test_sidebar_shows_the_notebook_with_its_kernel_and_reserved_size(lab: Lab, page: Any, opened: dict) -> None:
    open_sidebar(page)
    row = notebook_row(page)
    expect(row).to_be_visible()
    expect(row.locator(".jp-vgpu-SliceRow-holder")).to_have_text("train.ipynb")
    expect(row.locator(".jp-vgpu-SliceRow-kernel")).to_have_text(KERNEL_DISPLAY_NAME)
    reserved = opened["memory_reserved"] / GiB
    assert reserved == pytest.approx(4.0, abs=0.05)  # a quarter of 16 GiB
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text(re.compile(rf"/ {reserved:.1f} GiB$"))
    expect(page.locator(f"{SIDEBAR} .jp-vgpu-Chip.jp-vgpu-mod-simulated")).to_have_text("simulated")


def test_simulated_usage_appears_in_the_row_and_the_gpu_bar(lab: Lab, page: Any, opened: dict) -> None:
    lab.simulate([{"gpu": 0, "pid": opened["pid"], "memory": "1.5GiB", "utilization": 40}])
    row = notebook_row(page)
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text("1.5 / 4.0 GiB")
    expect(row.locator(".jp-vgpu-SliceRow-util")).to_have_text("40%")
    used = page.locator(f'{SIDEBAR} .jp-vgpu-DeviceBar-slice[data-slice-id="{opened["id"]}"] .jp-vgpu-DeviceBar-used')
    expect(used).to_have_attribute("style", re.compile(r"width: 37\.5"))  # 1.5 of 4 GiB


def test_status_bar_shows_the_active_notebooks_slice(lab: Lab, page: Any, opened: dict) -> None:
    page.locator(".jp-NotebookPanel .jp-Cell").first.click()
    item = page.locator(".jp-vgpu-StatusItem")
    expect(item).to_be_visible()
    expect(item).to_have_text("GPU 1.5 / 4.0 GiB · simulated")


def test_status_bar_hides_for_a_kernel_without_a_slice(lab: Lab, page: Any, opened: dict) -> None:
    (lab.root / "work" / "plain.ipynb").write_text(notebook_json("python3", "Python 3 (ipykernel)"))
    page.goto(lab.page_url("lab/tree/work/plain.ipynb"))
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text("plain.ipynb")
    wait_for(
        "the plain notebook's kernel",
        lambda: any(s["path"] == "work/plain.ipynb" for s in lab.api("GET", "api/sessions")[1]),
    )
    expect(page.locator(".jp-vgpu-StatusItem")).to_be_hidden()
    assert all(s["holder_kind"] != "kernel" or s["id"] == opened["id"] for s in lab.slices())
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="train.ipynb").click()
    expect(page.locator(".jp-vgpu-StatusItem")).to_have_text("GPU 1.5 / 4.0 GiB · simulated")


def test_refresh_interval_is_a_user_setting(lab: Lab) -> None:
    status, reply = lab.api("GET", "lab/api/settings/jupyter-vgpu:plugin")
    assert status == 200, reply
    interval = reply["schema"]["properties"]["refreshInterval"]
    assert interval["default"] == 2
    assert interval["minimum"] > 0


def test_command_holders_and_foreign_usage_are_listed(
    lab: Lab, page: Any, opened: dict, command_holder: subprocess.Popen[bytes]
) -> None:
    command = command_slice(lab, command_holder)
    lab.simulate(
        [
            {"gpu": 0, "pid": opened["pid"], "memory": "1.5GiB", "utilization": 40},
            {"gpu": 0, "pid": command["pid"], "memory": "3.7GiB", "utilization": 85},
            {"gpu": 0, "pid": 1, "memory": "1GiB", "utilization": 5},  # init holds no slice
        ]
    )
    row = page.locator(f'{SIDEBAR} .jp-vgpu-SliceRow[data-slice-id="{command["id"]}"]')
    expect(row.locator(".jp-vgpu-SliceRow-holder")).to_contain_text("time.sleep(600)")
    expect(row.locator(".jp-vgpu-SliceRow-kernel")).to_have_text("jupyter vgpu run, 1/4 GPU")
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text("3.7 / 4.0 GiB")
    foreign = page.locator(f"{SIDEBAR} .jp-vgpu-ForeignRow")
    expect(foreign).to_contain_text("other processes (no slice)")
    expect(foreign).to_contain_text("1.0 GiB")


def test_screenshots_in_light_and_dark_themes(lab: Lab, page: Any, opened: dict) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    sidebar = open_sidebar(page)
    expect(notebook_row(page)).to_be_visible()
    page.wait_for_timeout(500)  # let the sparkline collect a few points
    sidebar.screenshot(path=str(ARTIFACTS / "sidebar-light.png"))
    lab_screenshot(page, ARTIFACTS / "lab-light.png")
    lab.set_theme("JupyterLab Dark")
    try:
        reload(page)
        expect(page.locator('body[data-jp-theme-light="false"]')).to_have_count(1, timeout=60_000)
        sidebar = open_sidebar(page)
        expect(notebook_row(page)).to_be_visible()
        expect(page.locator(".jp-vgpu-StatusItem")).to_contain_text("GPU")
        page.wait_for_timeout(500)
        sidebar.screenshot(path=str(ARTIFACTS / "sidebar-dark.png"))
        lab_screenshot(page, ARTIFACTS / "lab-dark.png")
    finally:
        lab.set_theme("JupyterLab Light")
    reload(page)
    expect(page.locator('body[data-jp-theme-light="true"]')).to_have_count(1, timeout=60_000)
    open_sidebar(page)


def test_copy_puts_the_slice_id_on_the_clipboard(lab: Lab, page: Any, opened: dict) -> None:
    open_sidebar(page)
    notebook_row(page).locator(".jp-vgpu-action-copy").click()
    assert page.evaluate("() => navigator.clipboard.readText()") == opened["id"]


def test_launcher_marks_sliced_kernelspecs(lab: Lab, page: Any, opened: dict) -> None:
    page.get_by_role("button", name="New Launcher").click()
    card = page.locator(f'.jp-LauncherCard[title="{KERNEL_DISPLAY_NAME}"]').first
    expect(card).to_be_visible()
    badge = card.evaluate("card => getComputedStyle(card, '::after').content")
    assert badge == '"simulated GPU"'  # the GPUs of this lab are simulated
    plain = page.locator('.jp-LauncherCard[title="Python 3 (ipykernel)"]').first
    assert plain.evaluate("card => getComputedStyle(card, '::after').content") in ("none", "normal")
    page.locator(".jp-Launcher").screenshot(path=str(ARTIFACTS / "launcher.png"))
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="train.ipynb").click()
    expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")).to_be_visible()


def test_server_errors_show_in_the_sidebar_until_it_answers_again(lab: Lab, page: Any, opened: dict) -> None:
    sidebar = open_sidebar(page)
    reply = {"status": 500, "content_type": "application/json", "body": json.dumps({"message": "monitor crashed"})}
    page.route(SAMPLE, lambda route: route.fulfill(**reply))
    try:
        sidebar.locator(".jp-vgpu-Header-refresh").click()
        error = sidebar.locator(".jp-vgpu-Message.jp-vgpu-mod-error")
        expect(error).to_contain_text("monitor crashed")
        expect(notebook_row(page)).to_be_visible()  # the last good data stays
    finally:
        unroute(page)
    retry = sidebar.get_by_role("button", name="Retry now")
    expect(retry).to_be_visible()
    # The click as its event: a loaded CI machine once kept re-rendering the banner (each backed-off
    # poll) for the 30 s Playwright waits for a stable element to click.
    retry.dispatch_event("click")
    expect(sidebar.locator(".jp-vgpu-Message.jp-vgpu-mod-error")).to_have_count(0)


def test_no_gpu_is_said_plainly(lab: Lab, page: Any, opened: dict) -> None:
    sidebar = open_sidebar(page)
    body = {"simulated": False, "available": False, "message": "NVML: driver not loaded", "driver": None,
            "interval": 2.0, "devices": []}  # fmt: skip
    route_sample(page, "devices", lambda _: body)
    try:
        sidebar.locator(".jp-vgpu-Header-refresh").click()
        message = sidebar.locator(".jp-vgpu-Message.jp-vgpu-mod-no-gpu")
        expect(message).to_contain_text("No GPU on this server.")
        expect(message).to_contain_text("NVML: driver not loaded")
    finally:
        unroute(page)
    sidebar.locator(".jp-vgpu-Header-refresh").click()
    expect(notebook_row(page)).to_be_visible()


def test_free_reads_the_same_in_the_sidebar_the_api_and_the_cli(
    lab: Lab, page: Any, opened: dict, command_holder: subprocess.Popen[bytes]
) -> None:
    command = command_slice(lab, command_holder)
    # the notebook's kernel uses 1 GiB beyond its 4 GiB: nobody else can have that
    lab.simulate([{"gpu": 0, "pid": opened["pid"], "memory": "5GiB"}, {"gpu": 0, "pid": command["pid"], "memory": "1GiB"}])
    figure = "7.0 GiB"  # 16 - 4 - 4 reserved - 1 used beyond its slice
    free = page.locator(f"{SIDEBAR} .jp-vgpu-DeviceCard-free").first
    # what "free" means, said where it is read (issue 33): what a new slice can still reserve
    expect(free).to_have_text(f"{figure} free to reserve", timeout=30_000)
    status, devices = lab.api("GET", "api/vgpu/devices")
    assert status == 200 and devices["devices"][0]["memory_free"] == 7 * GiB
    cli = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "status"], env=lab.env, capture_output=True, text=True, check=True
    )
    assert f"  free {figure}" in cli.stdout, cli.stdout


def test_another_users_command_offers_no_release(lab: Lab, page: Any, opened: dict) -> None:
    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.ledger import SQLiteLedger
    from jupyter_vgpu.slices import Actor, Holder, SliceRequest

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ledger = SQLiteLedger(lab.env["JUPYTER_VGPU_LEDGER"], Inventory(lab.env["JUPYTER_VGPU_SIMULATE"]), context_allowance=300 << 20)
    someone_else = ledger.acting_for(Actor("someone-else", os.getuid() + 4242))
    theirs = None
    try:
        theirs = someone_else.reserve(SliceRequest.parse("1/10"), Holder.command("their-job.py", pid=sleeper.pid))
        row = page.locator(f'{SIDEBAR} .jp-vgpu-SliceRow[data-slice-id="{theirs.id}"]')
        expect(row).to_be_visible(timeout=30_000)
        view = next(s for s in lab.slices() if s["id"] == theirs.id)
        assert view["yours"] is False and view["holder_kind"] == "command"
        expect(row.locator(".jp-vgpu-action-release")).to_have_count(0)
        expect(row.locator(".jp-vgpu-action-copy")).to_have_count(1)
    finally:
        if theirs is not None:  # now, not when the reaper next looks (the last test wants no slice)
            someone_else.release(theirs.id)
        sleeper.kill()
        sleeper.wait()
        ledger.close()


def test_shutting_the_kernel_down_from_the_sidebar_frees_its_slice(lab: Lab, page: Any, opened: dict) -> None:
    open_sidebar(page)
    row = notebook_row(page)
    row.locator(".jp-vgpu-action-shutdown").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Shut down kernel?")
    dialog.get_by_role("button", name="Shut Down").click()
    expect(row).to_have_count(0)
    wait_for("the slice to be released", lambda: all(s["id"] != opened["id"] for s in lab.slices()), timeout=30)
    status, reply = lab.api("GET", f"api/vgpu/kernels/{opened['kernel_id']}")
    assert status == 404 or reply["slice"] is None
    expect(page.locator(".jp-vgpu-StatusItem")).to_be_hidden()


def test_with_no_slice_left_the_sidebar_says_how_to_get_one(
    lab: Lab, page: Any, opened: dict, command_holder: subprocess.Popen[bytes]
) -> None:
    command_holder.terminate()  # `jupyter vgpu run` releases the command's slice as it exits
    command_holder.wait(timeout=20)
    sidebar = open_sidebar(page)
    empty = sidebar.locator(".jp-vgpu-Message.jp-vgpu-mod-empty")
    expect(empty).to_contain_text("No kernel holds a GPU slice.")
    expect(sidebar.locator(".jp-vgpu-SliceRow")).to_have_count(0)
    assert lab.slices() == []
