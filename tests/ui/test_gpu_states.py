"""What a user sees when the GPU is full, busy or shared, in a real JupyterLab on a simulated GPU.

One lab (a 16 GiB GPU, sliced kernelspecs of several sizes, a quick watchdog and history) and
one browser tab, in file order: train.ipynb holds 1/4 GPU; the launcher lists the sliced
kernels by size; train.ipynb's history is charted; it goes over its slice and the watchdog's
warning shows; notebooks that ask for the whole GPU wait in line (visibly, cancellably) or are
refused (readably, with a kernel that fits); the last waiter gets the GPU once it is free.

Screenshots of each state, light and dark, land in artifacts/ui/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import write_sliced_kernelspec

from .conftest import ARTIFACTS, KERNEL_DISPLAY_NAME, Lab, notebook_json
from .pages import SIDEBAR, activate_tab, expect, kernel_slice, lab_screenshot, open_sidebar, screenshots, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WHOLE_GPU = "python3-vgpu-1"
WAITS = "python3-vgpu-1-waits"
SHORT_WAIT = "python3-vgpu-1-short"

EXTRA_KERNELSPECS = {
    WHOLE_GPU: ("Python 3 (1 GPU)", {"gpu_fraction": 1}),
    "python3-vgpu-1-10": ("Python 3 (1/10 GPU)", {"gpu_fraction": 0.1}),
    "python3-vgpu-1-3": ("Python 3 (1/3 GPU)", {"gpu_fraction": "1/3"}),
    "python3-vgpu-1-2": ("Python 3 (1/2 GPU)", {"gpu_fraction": "50%"}),
    "python3-vgpu-8g": ("Python 3 (8 GiB GPU)", {"gpu_memory": "8GiB"}),
    "python3-vgpu-2": ("Python 3 (2 GPUs)", {"gpus": 2}),
    WAITS: ("Python 3 (1 GPU, waits)", {"gpu_fraction": 1, "wait_timeout": 300}),
    SHORT_WAIT: ("Python 3 (1 GPU, waits 5 s)", {"gpu_fraction": 1, "wait_timeout": 5}),
}
# A sample every half second, a history point every second, the watchdog acts after 1 s over.
SERVER_CONFIG = {
    "VGPUServer": {"monitor_interval": 0.5, "history_seconds": 120, "history_points": 120, "over_limit_grace": 1}
}

# Each sliced card's size in GPUs (the environment may add kernelspecs of these sizes too).
SIZES = {
    "Python 3 (1 GiB GPU)": 1 / 16,  # 1 of 16 GiB: what ./scripts/lab installs for examples/near-the-limit.ipynb
    "Python 3 (1 GiB GPU, up to 3 GiB)": 1 / 16,  # by its request: ./scripts/lab's for examples/bursty-notebook.ipynb
    "Python 3 (1/10 GPU)": 0.1,
    "Python 3 (1/8 GPU)": 0.125,
    "Python 3 (1/4 GPU)": 0.25,
    "Python 3 (1/3 GPU)": 1 / 3,
    "Python 3 (1/2 GPU)": 0.5,
    "Python 3 (1/2 GPU, 2 devices)": 0.5,  # what ./scripts/lab installs for examples/mirrored-strategy.ipynb
    "Python 3 (8 GiB GPU)": 0.5,  # 8 of 16 GiB
    "Python 3 (1 GPU)": 1,
    "Python 3 (1 GPU, waits)": 1,
    "Python 3 (1 GPU, waits 5 s)": 1,
    "Python 3 (2 GPUs)": 2,
}


def waiters(lab: Lab) -> list[dict[str, Any]]:
    status, reply = lab.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return list(reply.get("waiting", []))


def open_notebook(page: Any, path: str) -> None:
    page.evaluate("path => void window.jupyterapp.commands.execute('docmanager:open', {path})", path)
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text(path.rsplit("/", 1)[-1])


def slice_row(page: Any, name: str) -> Any:
    return page.locator(f"{SIDEBAR} .jp-vgpu-SliceRow", has_text=name)


def horizontal_overflow(dialog: Any) -> list[str]:
    """The dialog's visible boxes whose content is wider than they are."""
    return list(
        dialog.evaluate(
            """d => [...d.querySelectorAll('.jp-Dialog-content, .jp-Dialog-body, .jp-vgpu-DialogBody, pre, li, p, h3')]
                 .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
                 .map(e => `${e.tagName}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`)"""
        )
    )


def dismiss_kernel_picker(page: Any) -> None:
    """JupyterLab offers its "Select Kernel" dialog after a notebook's first kernel failed to
    start: keep no kernel."""
    picker = page.locator(".jp-Dialog", has_text="Select Kernel")
    try:
        expect(picker).to_be_visible(timeout=3000)
    except AssertionError:
        return
    picker.locator(".jp-Dialog-footer .jp-mod-reject").click()


def assert_fits_in_window(page: Any, dialog: Any) -> None:
    assert horizontal_overflow(dialog) == []
    box = dialog.locator(".jp-Dialog-content").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"], box


@pytest.fixture(scope="module")
def opened(lab: Lab, page: Any) -> dict[str, Any]:
    """work/train.ipynb open in the lab, its 1/4 GPU kernel started; returns its slice."""
    page.goto(lab.page_url("lab/tree/work/train.ipynb"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)
    return wait_for("train.ipynb's kernel to hold a slice", lambda: kernel_slice(lab, "work/train.ipynb"))


def test_launcher_lists_sliced_kernels_by_size_and_keeps_that_order(lab: Lab, page: Any, opened: dict) -> None:
    page.evaluate("() => { void window.jupyterapp.commands.execute('launcher:create'); }")
    section = page.locator(".jp-Launcher-section", has=page.locator(".jp-Launcher-sectionTitle", has_text="Notebook"))
    cards = section.locator(".jp-LauncherCard")
    expect(cards.filter(has_text="Python 3 (2 GPUs)")).to_have_count(1)

    def titles() -> list[str]:
        return list(cards.evaluate_all("cards => cards.map(c => c.getAttribute('title'))"))

    def sliced() -> list[str]:
        return [t for t in titles() if " GPU" in t]

    def by_size(expected: set[str]) -> bool:
        shown = sliced()
        return expected <= set(shown) and [SIZES[t] for t in shown] == sorted(SIZES[t] for t in shown)

    # This lab's own (a venv's kernelspecs of other sizes may be listed too, in their places).
    first = {display for display, _ in EXTRA_KERNELSPECS.values()} | {KERNEL_DISPLAY_NAME}
    wait_for(f"the sliced cards in order of size: {sliced()}", lambda: by_size(first), timeout=20)
    assert titles()[0] == "Python 3 (ipykernel)", titles()  # the default kernel keeps its place
    for card in cards.all():  # the badges are intact
        badge = card.evaluate("card => getComputedStyle(card, '::after').content")
        is_sliced = " GPU" in (card.get_attribute("title") or "")
        assert (badge == '"simulated GPU"') == is_sliced, card.get_attribute("title")  # simulated GPUs here

    # A kernelspec appears: JupyterLab renders the launcher again with one more card.
    write_sliced_kernelspec(
        Path(lab.env["JUPYTER_DATA_DIR"]), {"gpu_fraction": 0.125}, name="python3-vgpu-1-8", display_name="Python 3 (1/8 GPU)"
    )
    page.evaluate("() => { void window.jupyterapp.serviceManager.kernelspecs.refreshSpecs(); }")
    expect(cards.filter(has_text="Python 3 (1/8 GPU)")).to_have_count(1)
    wait_for(f"the new card in its place: {sliced()}", lambda: by_size(first | {"Python 3 (1/8 GPU)"}), timeout=20)
    page.wait_for_timeout(1000)
    assert by_size(first | {"Python 3 (1/8 GPU)"}), sliced()
    assert [t for t in sliced() if "/" in t][:3] == ["Python 3 (1/10 GPU)", "Python 3 (1/8 GPU)", "Python 3 (1/4 GPU)"]
    screenshots(page, ARTIFACTS, "launcher-order", page.locator(".jp-Launcher"))
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabCloseIcon").click()
    activate_tab(page, "train.ipynb")


def test_history_chart_draws_the_changing_use_of_a_slice(lab: Lab, page: Any, opened: dict) -> None:
    sidebar = open_sidebar(page)
    row = slice_row(page, "train.ipynb")
    expect(row).to_be_visible()
    for memory, util in (("0.5GiB", 10), ("1.5GiB", 40), ("3GiB", 90), ("2GiB", 60)):
        lab.simulate([{"gpu": 0, "pid": opened["pid"], "memory": memory, "utilization": util}])
        page.wait_for_timeout(1500)  # a history point each second
    toggle = row.get_by_role("button", name="History of train.ipynb")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    chart = row.locator("svg.jp-vgpu-Chart-plot")
    expect(chart).to_be_visible()

    def memory_points() -> list[tuple[float, float]]:
        lines = chart.locator("polyline.jp-vgpu-Chart-used")
        text = " ".join(lines.nth(i).get_attribute("points") or "" for i in range(lines.count()))
        return [(float(x), float(y)) for x, y in (p.split(",") for p in text.split())]

    points = wait_for(
        "a memory line through several different values",
        lambda: (p := memory_points()) and len(p) >= 4 and len({y for _, y in p}) >= 3 and p,
        timeout=20,
    )
    assert [x for x, _ in points] == sorted(x for x, _ in points)  # oldest on the left
    reserved = chart.locator("line.jp-vgpu-Chart-reserved")
    expect(reserved).to_have_count(1)
    assert float(reserved.get_attribute("y1") or 0) < min(y for _, y in points)  # 4 GiB above every use
    expect(chart.locator("polyline.jp-vgpu-Chart-util")).not_to_have_count(0)
    expect(row.locator(".jp-vgpu-SliceRow-share")).to_contain_text("1/4 GPU reserves")

    card = sidebar.locator(".jp-vgpu-DeviceCard").first
    card.get_by_role("button", name="History of GPU 0").click()
    expect(card.locator(".jp-vgpu-DeviceCard-details polyline.jp-vgpu-Chart-used")).not_to_have_count(0)
    screenshots(page, ARTIFACTS, "history-chart", sidebar)
    card.get_by_role("button", name="History of GPU 0").click()


def test_slice_row_says_what_its_share_reserves(lab: Lab, page: Any, opened: dict) -> None:
    row = slice_row(page, "train.ipynb")
    view = kernel_slice(lab, "work/train.ipynb")
    assert view is not None
    expect(row.locator(".jp-vgpu-SliceRow-tier")).to_have_text(view["tier"])  # exactly as the server says
    note = view.get("share_note") or "memory only; compute is shared"
    expect(row.locator(".jp-vgpu-SliceRow-kernel")).to_have_attribute("title", f"1/4 GPU reserves {note}.")
    if view.get("watched"):
        expect(row.locator(".jp-vgpu-Chip.jp-vgpu-mod-watched")).to_have_text("watched")


def test_watchdog_warning_reaches_the_person(lab: Lab, page: Any, opened: dict) -> None:
    lab.simulate([{"gpu": 0, "pid": opened["pid"], "memory": "5GiB", "utilization": 95}])  # 4 GiB slice
    toast = page.locator(".jp-Notification-Toast-warning", has_text="train.ipynb")
    expect(toast).to_be_visible(timeout=30_000)
    expect(toast).to_contain_text(opened["id"])
    expect(toast).to_contain_text("warns")
    screenshots(page, ARTIFACTS, "watchdog-warning")
    page.wait_for_timeout(3000)  # more refreshes, the same event: one notification
    expect(toast).to_have_count(1)
    lab.simulate([{"gpu": 0, "pid": opened["pid"], "memory": "1.5GiB", "utilization": 40}])


def test_a_waiting_notebook_shows_its_place_and_can_cancel(lab: Lab, page: Any, opened: dict) -> None:
    (lab.root / "work" / "wait.ipynb").write_text(notebook_json(WAITS, "Python 3 (1 GPU, waits)"))
    open_notebook(page, "work/wait.ipynb")
    sidebar = open_sidebar(page)
    row = sidebar.locator(".jp-vgpu-Waiting-row", has_text="wait.ipynb")
    expect(row).to_be_visible(timeout=30_000)
    expect(row.locator(".jp-vgpu-Waiting-place")).to_have_text("#1")
    expect(row.locator(".jp-vgpu-Waiting-request")).to_have_text("1 GPU")
    expect(row.locator(".jp-vgpu-Waiting-time")).to_have_text(re.compile(r"^waiting \d+ s$"))
    status = page.locator(".jp-vgpu-StatusItem")
    expect(status).to_contain_text("GPU: waiting #1 (1 GPU)")
    screenshots(page, ARTIFACTS, "waiting", sidebar)
    lab_screenshot(page, ARTIFACTS / "waiting-lab.png")

    # Framed as the README's picture (docs/sidebar.png, from ./scripts/docs-screenshots): the
    # panel beside train.ipynb, its history open, a notebook in line.
    page.evaluate("() => { void window.jupyterapp.commands.execute('apputils:dismiss-notification'); }")
    expect(page.locator(".jp-Notification-Toast-warning")).to_have_count(0)
    activate_tab(page, "train.ipynb")
    expect(slice_row(page, "train.ipynb").locator("svg.jp-vgpu-Chart-plot")).to_be_visible()
    lab_screenshot(page, ARTIFACTS / "readme-sidebar.png")
    activate_tab(page, "wait.ipynb")

    row.get_by_role("button", name="Cancel waiting for wait.ipynb").click()
    expect(row).to_have_count(0)
    assert not any(w.get("path") == "work/wait.ipynb" for w in waiters(lab))
    expect(page.locator(".jp-Notification-Toast-info", has_text="Stopped waiting")).to_be_visible()
    page.wait_for_timeout(2000)  # the kernel start fails now: no error dialog for it
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    expect(status).not_to_contain_text("waiting")


def test_refusal_dialog_text_wraps_and_names_the_holders(lab: Lab, page: Any, opened: dict) -> None:
    """JupyterLab's own dialog, as it is without the formatted view: the message wraps."""
    (lab.root / "work" / "big.ipynb").write_text(notebook_json(WHOLE_GPU, "Python 3 (1 GPU)"))
    page.route("**/api/vgpu/refusals/**", lambda route: route.fulfill(status=404, json={"message": "not here"}))
    try:
        open_notebook(page, "work/big.ipynb")
        dialog = page.locator(".jp-Dialog")
        expect(dialog.locator(".jp-Dialog-header")).to_contain_text("Error Starting Kernel", timeout=60_000)
        message = dialog.locator(".jp-Dialog-body pre").first
        expect(message).to_be_visible()
        page.wait_for_timeout(500)
        expect(message).to_have_css("white-space", "pre-wrap")
        assert_fits_in_window(page, dialog)
        screenshots(page, ARTIFACTS, "refusal-plain", dialog.locator(".jp-Dialog-content"))
        expect(message).to_contain_text("train.ipynb")
        dialog.get_by_role("button", name="Ok").click()
        dismiss_kernel_picker(page)
        expect(dialog).to_have_count(0)
    finally:
        page.unroute("**/api/vgpu/refusals/**")


def test_refusal_dialog_shows_holders_advice_and_starts_a_kernel_that_fits(lab: Lab, page: Any, opened: dict) -> None:
    (lab.root / "work" / "big2.ipynb").write_text(notebook_json(WHOLE_GPU, "Python 3 (1 GPU)"))
    open_notebook(page, "work/big2.ipynb")
    dialog = page.locator(".jp-Dialog")
    expect(dialog.locator(".jp-Dialog-header")).to_contain_text("Error Starting Kernel", timeout=60_000)
    view = dialog.locator(".jp-vgpu-Refusal")
    expect(view).to_be_visible(timeout=10_000)
    expect(dialog.locator(".jp-Dialog-body")).to_be_hidden()  # JupyterLab's text, replaced
    expect(view.locator(".jp-vgpu-Refusal-summary")).not_to_be_empty()
    expect(view.locator(".jp-vgpu-Refusal-asked")).to_contain_text("big2.ipynb")
    holder = view.locator(".jp-vgpu-Refusal-gpu[data-gpu-index='0'] .jp-vgpu-Refusal-holder", has_text="train.ipynb")
    expect(holder).to_contain_text("4.0 GiB")
    advice = view.locator(".jp-vgpu-Refusal-advice")
    expect(advice.locator("li")).not_to_have_count(0)
    # The server's markdown code spans read as code, not as backticks.
    expect(advice.locator("code", has_text="jupyter vgpu kernelspec install --wait SECONDS")).to_be_visible()
    expect(advice).not_to_contain_text("`")
    summary_font = view.locator(".jp-vgpu-Refusal-summary").evaluate("e => getComputedStyle(e).fontFamily")
    assert "mono" not in summary_font.lower(), summary_font  # only the code spans read as code
    # The same slice from a kernelspec that waits in line for it.
    expect(view.get_by_role("button", name="Wait in line (Python 3 (1 GPU, waits))")).to_have_attribute(
        "data-kernel-name", WAITS
    )
    assert_fits_in_window(page, dialog)
    screenshots(page, ARTIFACTS, "refusal", dialog.locator(".jp-Dialog-content"))

    start = view.locator(".jp-vgpu-Refusal-start").first
    kernel_name = start.get_attribute("data-kernel-name")
    assert kernel_name and kernel_name != WHOLE_GPU
    start.click()
    expect(dialog).to_have_count(0)
    started = wait_for("big2.ipynb on the kernel that fits", lambda: kernel_slice(lab, "work/big2.ipynb"))
    assert started["kernel_name"] == kernel_name


def test_a_waiter_that_times_out_is_announced(lab: Lab, page: Any, opened: dict) -> None:
    (lab.root / "work" / "short.ipynb").write_text(notebook_json(SHORT_WAIT, "Python 3 (1 GPU, waits 5 s)"))
    open_notebook(page, "work/short.ipynb")
    row = page.locator(f"{SIDEBAR} .jp-vgpu-Waiting-row", has_text="short.ipynb")
    expect(row).to_be_visible(timeout=30_000)
    dialog = page.locator(".jp-Dialog", has_text="Error Starting Kernel")
    expect(dialog).to_be_visible(timeout=30_000)
    expect(row).to_have_count(0)
    toast = page.locator(".jp-Notification-Toast-warning", has_text="short.ipynb")
    expect(toast).to_be_visible(timeout=30_000)
    expect(toast).to_contain_text("stopped waiting for a GPU slice (1 GPU)")
    longer = dialog.get_by_role("button", name="Wait longer (Python 3 (1 GPU, waits))")
    expect(longer).to_have_attribute("data-kernel-name", WAITS)
    assert_fits_in_window(page, dialog)
    screenshots(page, ARTIFACTS, "timed-out")
    dialog.get_by_role("button", name="Ok").click()
    dismiss_kernel_picker(page)
    expect(page.locator(".jp-Dialog")).to_have_count(0)


def test_a_granted_waiter_is_announced(lab: Lab, page: Any, opened: dict) -> None:
    activate_tab(page, "wait.ipynb")
    page.evaluate(
        """name => {
            const widget = [...window.jupyterapp.shell.widgets('main')]
                .find(w => w.sessionContext && w.sessionContext.path === 'work/wait.ipynb');
            void widget.sessionContext.changeKernel({name});
        }""",
        WAITS,
    )
    row = page.locator(f"{SIDEBAR} .jp-vgpu-Waiting-row", has_text="wait.ipynb")
    expect(row).to_be_visible(timeout=30_000)
    lab.simulate([])  # free the GPU: no memory in use, no slice held
    for held in lab.slices():
        if held["holder_kind"] == "kernel" and held["kernel_id"]:
            lab.api("DELETE", f"api/kernels/{held['kernel_id']}")
    toast = page.locator(".jp-Notification-Toast-success", has_text="wait.ipynb")
    expect(toast).to_be_visible(timeout=60_000)
    expect(toast).to_contain_text("got its GPU slice (1 GPU)")
    granted = wait_for("wait.ipynb's slice", lambda: kernel_slice(lab, "work/wait.ipynb"))
    assert granted["kernel_name"] == WAITS
    expect(page.locator(".jp-vgpu-StatusItem")).to_have_text(re.compile(r"^GPU .* / 16\.0 GiB · simulated$"))
