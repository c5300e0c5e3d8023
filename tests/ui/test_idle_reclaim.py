"""Idle slices go back to people who are waiting: what the owner of an idle kernel sees, in a real
JupyterLab on one small simulated GPU (4 GiB: a "Python 3 (1/4 GPU)" kernel holds 1 GiB), light
and dark.

One lab and one browser tab, in file order: work/idle.ipynb holds 1/4 GPU and its row says how
long it has been idle; a command asks for 9/10 of the GPU and waits in line (a subprocess of the
test, as a colleague's terminal would); the idle kernel gets a notice: a notification naming the
notebook with "Keep it", a countdown in its row and in the status bar; "Keep it" cancels the
notice and the kernel stays; the next notice runs out: the kernel is shut down, the waiting
command gets its slice and prints GRANTED, and a notification says what happened, once; a page
reload then leaves the notebook with "No Kernel" and says why, while the command keeps its slice.

The server reclaims a slice idle ``idle_reclaim_after`` (8 s here) while someone waits, after a
notice of ``idle_reclaim_notice`` (30 s) (docs/rest.md, "Idle reclaim"). Screenshots land in
artifacts/ui/idle-*.
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ARTIFACTS, KERNEL_DISPLAY_NAME, KERNEL_NAME, Lab, notebook_json
from .pages import (
    SIDEBAR,
    expect,
    kernel_slice,
    open_sidebar,
    reload,
    route_sample,
    screenshots,
    set_theme_live,
    unroute,
    wait_for,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IDLE_AFTER = 8
NOTICE = 30
DEVICES = [{"name": "NVIDIA T4 (simulated)", "memory": "4GiB", "utilization": 0}]
SERVER_CONFIG = {
    "VGPUServer": {"monitor_interval": 0.5, "idle_reclaim_after": IDLE_AFTER, "idle_reclaim_notice": NOTICE}
}

IDLE = "work/idle.ipynb"
NOTICE_TOAST = ".jp-Notification-Toast-warning"
#: The notification of a notebook opened without its kernel after a reload (shutdownmemory.ts).
HELD_BACK_TOAST = ".jp-Notification-Toast-info"
MARKS_KEY_PREFIX = "jupyter-vgpu:shut-down:"
#: The row's warning and the status bar item while the notice runs (docs/ui.md).
ROW_COUNTDOWN = re.compile(r"^Shutting down in 0:[0-3]\d to free its GPU for 1 waiting in line$")
STATUS_COUNTDOWN = re.compile(r"^GPU idle: shutting down in 0:[0-3]\d$")


def slice_row(page: Any, name: str) -> Any:
    return page.locator(f"{SIDEBAR} .jp-vgpu-SliceRow", has_text=name)


def snapshot(lab: Lab) -> dict[str, Any]:
    status, reply = lab.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return dict(reply)


def notice_toast(page: Any) -> Any:
    return page.locator(NOTICE_TOAST, has_text="unless you keep it or run a cell")


def seconds_left(text: str) -> int:
    match = re.search(r"in (\d+):(\d\d)", text)
    assert match, text
    return int(match.group(1)) * 60 + int(match.group(2))


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The next line ``process`` prints, waiting at most ``timeout`` seconds for it."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"nothing printed in {timeout} s"
    return process.stdout.readline()


def shut_down_marks(page: Any) -> dict[str, Any]:
    """This browser's marks of notebooks whose kernel was shut down (localStorage, one key per server)."""
    entries = page.evaluate(f"() => Object.entries(localStorage).filter(([k]) => k.startsWith('{MARKS_KEY_PREFIX}'))")
    assert len(entries) <= 1, entries
    return json.loads(entries[0][1]) if entries else {}


@pytest.fixture(scope="module")
def idle(lab: Lab, page: Any) -> dict[str, Any]:
    """work/idle.ipynb open on a 1/4 GPU kernel (1 GiB of the 4 GiB GPU); returns its slice."""
    (lab.root / IDLE).write_text(notebook_json(KERNEL_NAME, KERNEL_DISPLAY_NAME))
    page.goto(lab.page_url(f"lab/tree/{IDLE}"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)
    return wait_for("idle.ipynb's kernel to hold a slice", lambda: kernel_slice(lab, IDLE))


@pytest.fixture(scope="module")
def waiter(lab: Lab, idle: dict[str, Any]) -> Iterator[subprocess.Popen[str]]:
    """`jupyter vgpu run -p 0.9 --wait 300`: 3.6 GiB, more than the 3 GiB free, so it waits in line.
    Once it has its slice it prints GRANTED and holds the slice until its stdin is closed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "0.9", "--wait", "300", "--",
         sys.executable, "-c", "import sys; print('GRANTED', flush=True); sys.stdin.read()"],
        env=lab.env, cwd=lab.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_for(
            "the command to wait in line",
            lambda: any(w["holder_kind"] == "command" for w in snapshot(lab).get("waiting", [])),
            timeout=30,
        )
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def test_a_slice_row_says_how_long_its_kernel_has_been_idle(lab: Lab, page: Any, idle: dict[str, Any]) -> None:
    sidebar = open_sidebar(page)
    row = slice_row(page, "idle.ipynb")
    expect(row).to_be_visible()
    expect(row.locator(".jp-vgpu-SliceRow-idle")).to_have_count(0)  # under a minute: not worth a word
    assert snapshot(lab)["slices"][0]["idle_seconds"] is not None  # the server does judge it
    # As it would read after 42 minutes.
    route_sample(
        page,
        "slices",
        lambda body: {**body, "slices": [{**s, "idle_seconds": 2520.4} for s in body.get("slices", [])]},
    )
    try:
        expect(row.locator(".jp-vgpu-SliceRow-idle")).to_have_text("idle 42 min")
        expect(row).to_have_attribute("title", re.compile(r"\nIdle for 42 min \(no cell run"))
        screenshots(page, ARTIFACTS, "idle-time-row", row)
    finally:
        unroute(page)
    expect(row.locator(".jp-vgpu-SliceRow-idle")).to_have_count(0)
    assert sidebar.is_visible()


def test_the_owner_is_told_and_keeps_the_kernel(
    lab: Lab, page: Any, idle: dict[str, Any], waiter: subprocess.Popen[str]
) -> None:
    open_sidebar(page)
    # The notification, naming the notebook, with "Keep it".
    toast = notice_toast(page)
    expect(toast).to_be_visible(timeout=IDLE_AFTER * 1000 + 30_000)
    expect(toast).to_contain_text(re.compile(r"idle\.ipynb's kernel, idle for \d+ s, shuts down at \d\d:\d\d:\d\d "))
    expect(toast).to_contain_text("to free its GPU for 1 waiting in line")
    keep = toast.get_by_role("button", name="Keep it")
    expect(keep).to_be_visible()
    noticed = next(s for s in snapshot(lab)["slices"] if s["id"] == idle["id"])
    assert noticed["idle_notice"] is not None, noticed
    assert noticed["idle_notice"]["for"].startswith("1 waiting in line"), noticed

    # The row counts down, with its own "Keep it"; so does the status bar.
    row = slice_row(page, "idle.ipynb")
    warning = row.locator(".jp-vgpu-SliceRow-idleNotice")
    expect(warning).to_be_visible()
    expect(warning.locator(".jp-vgpu-SliceRow-idleText")).to_have_text(ROW_COUNTDOWN)
    expect(warning).to_have_attribute("title", re.compile(r"Running a cell keeps it"))
    expect(warning.get_by_role("button", name="Keep idle.ipynb")).to_be_visible()
    status = page.locator(".jp-vgpu-StatusItem-content.jp-vgpu-mod-idle")
    expect(status).to_have_text(STATUS_COUNTDOWN)
    expect(status).to_have_attribute("title", re.compile(r"while the GPU is needed: 1 waiting in line"))
    expect(status).to_have_attribute("title", re.compile(r"Running a cell keeps it"))
    first = seconds_left(warning.inner_text())
    page.wait_for_timeout(2200)
    later = seconds_left(warning.inner_text())
    assert 0 < first - later <= 4, (first, later)  # it ticks, roughly in seconds
    assert abs(seconds_left(status.inner_text()) - later) <= 2
    screenshots(page, ARTIFACTS, "idle-notice")
    screenshots(page, ARTIFACTS, "idle-notice-row", row)

    # "Keep it" in the notification: the notice goes away, and the kernel stays.
    with page.expect_response(lambda r: r.url.split("?")[0].endswith(f"/api/vgpu/slices/{idle['id']}/keep")) as kept:
        keep.click()
    assert kept.value.status == 200
    assert kept.value.json() == {"slice_id": idle["id"], "kept": True, "notice_cancelled": True}
    # The next notice comes IDLE_AFTER seconds later: all of this is seen before it.
    expect(toast).to_have_count(0, timeout=IDLE_AFTER * 1000 // 2)
    expect(warning).to_have_count(0, timeout=IDLE_AFTER * 1000 // 2)
    expect(page.locator(".jp-vgpu-StatusItem-content")).to_have_text(
        re.compile(r"^GPU .* / 1\.0 GiB"), timeout=IDLE_AFTER * 1000 // 2
    )
    held = next(s for s in snapshot(lab)["slices"] if s["id"] == idle["id"])
    assert held["idle_notice"] is None, held
    assert lab.api("GET", f"api/kernels/{idle['kernel_id']}")[0] == 200
    assert waiter.poll() is None  # still in line


def test_an_idle_kernel_is_shut_down_for_the_one_who_waits(
    lab: Lab, page: Any, idle: dict[str, Any], waiter: subprocess.Popen[str]
) -> None:
    # A new notice (the kernel has done nothing since it was kept), left to run out.
    toast = notice_toast(page)
    expect(toast).to_be_visible(timeout=IDLE_AFTER * 1000 + 30_000)
    started = time.monotonic()
    line = read_line(waiter, timeout=NOTICE + 60)
    assert line.strip() == "GRANTED", (line, waiter.poll(), waiter.poll() is not None and waiter.communicate())
    assert time.monotonic() - started > NOTICE / 2  # after the notice, not before
    assert waiter.poll() is None  # it holds its slice

    # The kernel is gone (its notebook stays), its slice went to the command.
    assert lab.api("GET", f"api/kernels/{idle['kernel_id']}")[0] == 404

    def without_the_slice() -> dict[str, Any] | None:
        reply = snapshot(lab)
        return None if any(s["id"] == idle["id"] for s in reply["slices"]) else reply

    reply = wait_for("the slice to be gone from the server's sample", without_the_slice, timeout=10)
    events = [e for e in reply["watchdog"]["events"] if e["action"] == "idle"]
    assert len(events) == 1 and events[0]["ok"], events
    event = events[0]
    assert event["slice_id"] == idle["id"] and event["kernel_id"] == idle["kernel_id"], event
    assert event["path"] == IDLE, event

    # The notice's notification is gone; the reclaim's says what happened (Details: the server's
    # own message), once.
    reclaimed = page.locator(NOTICE_TOAST, has_text="idle.ipynb's kernel was shut down after")
    expect(reclaimed).to_be_visible(timeout=30_000)
    expect(reclaimed).to_contain_text("idle, to free its GPU for 1 waiting in line. The notebook is kept.")
    expect(notice_toast(page)).to_have_count(0)
    expect(slice_row(page, "idle.ipynb")).to_have_count(0)
    expect(page.locator(".jp-vgpu-StatusItem-content.jp-vgpu-mod-idle")).to_have_count(0)
    # JupyterLab learns at once that the kernel is gone, and starts no other.
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(notebook.locator(".jp-Toolbar-kernelName")).to_have_text("No Kernel", timeout=10_000)
    screenshots(page, ARTIFACTS, "idle-reclaimed")
    page.wait_for_timeout(3000)  # more refreshes, the same event: one notification
    expect(reclaimed).to_have_count(1)
    reclaimed.get_by_role("button", name="Details").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Idle GPU reclaimed")
    expect(dialog).to_contain_text(event["message"])
    screenshots(page, ARTIFACTS, "idle-reclaimed-details", dialog.locator(".jp-Dialog-content"))
    dialog.get_by_role("button", name="Ok").click()
    expect(dialog).to_have_count(0)
    assert (lab.root / IDLE).exists()  # the notebook stays
    assert lab.api("GET", "api/kernels")[1] == []
    # This browser remembers why, so that a reload does not start the kernel again.
    mark = shut_down_marks(page).get(IDLE)
    assert isinstance(mark, dict) and mark.get("why") == "idle", shut_down_marks(page)


def test_a_reload_starts_no_kernel_for_a_reclaimed_notebook_and_says_why(
    lab: Lab, page: Any, idle: dict[str, Any], waiter: subprocess.Popen[str]
) -> None:
    """JupyterLab starts a kernel for every notebook it opens without one, a reload included: the
    notebook whose idle kernel was reclaimed would take a slice (or a place in line) again."""
    command = next(s for s in snapshot(lab)["slices"] if s["holder_kind"] == "command")
    # What the page asks of the server to start a kernel: a session, or a kernel.
    starts: list[str] = []

    def on_request(request: Any) -> None:
        if request.method == "POST" and re.search(r"/api/(sessions|kernels)/?(\?|$)", request.url):
            starts.append(request.url)

    page.on("request", on_request)
    try:
        reload(page)
        notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        expect(notebook).to_be_visible(timeout=60_000)
        held = page.locator(HELD_BACK_TOAST, has_text="idle.ipynb: no kernel was started")
        expect(held).to_be_visible(timeout=20_000)
        expect(held).to_have_text(
            "idle.ipynb: no kernel was started; its idle kernel was reclaimed while others waited for the GPU. "
            "Pick a kernel to start one."
        )
        expect(held).to_have_count(1)
        expect(notebook.locator(".jp-Toolbar-kernelName")).to_have_text("No Kernel")
        screenshots(page, ARTIFACTS, "idle-reload-held-back")
        page.wait_for_timeout(8000)  # several refreshes of the panel (2 s) and samples of the server (0.5 s)
    finally:
        page.remove_listener("request", on_request)
    assert starts == [], starts  # the page asked for no kernel

    # The server started no kernel, gave no slice and has no one new in line.
    assert lab.api("GET", "api/kernels")[1] == []
    status, sessions = lab.api("GET", "api/sessions")
    assert status == 200 and not any(s["path"] == IDLE for s in sessions), sessions
    reply = snapshot(lab)
    assert not any(s.get("path") == IDLE for s in reply["slices"]), reply["slices"]
    assert reply.get("waiting", []) == [], reply.get("waiting")
    # The command keeps the slice it waited for.
    assert [s["id"] for s in reply["slices"]] == [command["id"]], reply["slices"]
    assert waiter.poll() is None
    # Nothing else to answer: no refusal, no kernel picker; the reclaim was told once, before.
    expect(notebook.locator(".jp-Toolbar-kernelName")).to_have_text("No Kernel")
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    expect(page.locator(NOTICE_TOAST, has_text="kernel was shut down after")).to_have_count(0)
    assert shut_down_marks(page).get(IDLE, {}).get("why") == "idle"

    # The command ends: its slice goes back.
    assert waiter.stdin is not None
    waiter.stdin.close()
    assert waiter.wait(timeout=30) == 0
    wait_for("the command's slice to be released", lambda: snapshot(lab)["slices"] == [], timeout=30)


def test_a_gpu_card_in_a_pods_share_says_so(lab: Lab, page: Any, idle: dict[str, Any]) -> None:
    """In a pod HAMi placed on a shared GPU the server sends `pod_share` (docs/rest.md): a muted line
    under the GPU's name."""
    share = "this pod's share: 4.0 GiB of 16.0 GiB (HAMi), 50% of the SMs"

    def in_a_pod(body: dict[str, Any]) -> dict[str, Any]:
        devices = [{**d, "pod_share": share, "card_memory": 16 * 1024**3, "sm_limit": 50} for d in body["devices"]]
        return {**body, "devices": devices}

    sidebar = open_sidebar(page)
    line = sidebar.locator(".jp-vgpu-DeviceCard-podShare")
    expect(line).to_have_count(0)
    route_sample(page, "devices", in_a_pod)
    try:
        expect(line).to_have_text(share)
        expect(line).to_have_attribute("title", re.compile(r"\nThe card itself has 16\.0 GiB\.\nThe pod may use 50%"))
        name = sidebar.locator(".jp-vgpu-DeviceCard-name")
        card = sidebar.locator(".jp-vgpu-DeviceCard")
        for theme in ("light", "dark"):
            set_theme_live(page, theme)
            colour = line.evaluate("e => getComputedStyle(e).color")
            assert colour != name.evaluate("e => getComputedStyle(e).color"), theme  # muted
            card.screenshot(path=str(ARTIFACTS / f"idle-podshare-card-{theme}.png"))
        set_theme_live(page, "light")
    finally:
        unroute(page)
    expect(line).to_have_count(0)
