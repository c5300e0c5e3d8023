"""What a newcomer reads in the GPUs panel, the status bar, the launcher and a refusal (issue
"A newcomer's first hour"), in a real JupyterLab on two simulated 80 GiB GPUs, light and dark.

One lab and one browser tab, in file order: both GPUs empty (a notebook on a plain kernel);
Untitled.ipynb and Untitled1.ipynb on 1/4 GPU kernels (their names and the GPUs' names in full
at the default sidebar width, an idle slice's empty bar, use and over-use, an unknown use and
why); the status bar and the launcher say the GPUs are simulated; a whole-GPU notebook is
refused at 1440x900 and waits in line from the dialog; Untitled1.ipynb's kernel, shut down
from the panel, is not started again by a reload.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from .conftest import ARTIFACTS, KERNEL_DISPLAY_NAME, KERNEL_NAME, Lab, notebook_json
from .pages import (
    SAMPLE,
    SIDEBAR,
    activate_tab,
    expect,
    kernel_slice,
    open_sidebar,
    reload,
    route_sample,
    themes,
    unroute,
    wait_for,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GiB = 1024**3
MiB = 1024**2

WHOLE_GPU = "python3-vgpu-1"
WAITS = "python3-vgpu-1-waits"
EXTRA_KERNELSPECS = {
    WHOLE_GPU: ("Python 3 (1 GPU)", {"gpu_fraction": 1}),
    WAITS: ("Python 3 (1 GPU, waits)", {"gpu_fraction": 1, "wait_timeout": 300}),
}
DEVICES = [
    {"name": "NVIDIA A100-SXM4-80GB", "memory": "80GiB", "utilization": 0},
    {"name": "NVIDIA H100 80GB HBM3", "memory": "80GiB", "utilization": 0},
]
SERVER_CONFIG = {"VGPUServer": {"monitor_interval": 0.5}}

UNTITLED = "work/Untitled.ipynb"
UNTITLED1 = "work/Untitled1.ipynb"
BIG = "work/big.ipynb"
#: What the server would say of a slice whose use is not known yet (docs/rest.md, `usage_note`).
SERVER_NOTE = "No GPU process of this kernel seen yet: its use shows once it allocates GPU memory."
HOST = {"cpu_percent": 12.3, "memory_rss": 310 * MiB, "memory_total": int(23.4 * GiB), "cpu_count": 16}


def open_notebook(page: Any, path: str) -> None:
    page.evaluate("path => void window.jupyterapp.commands.execute('docmanager:open', {path})", path)
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text(path.rsplit("/", 1)[-1])


def close_tab(page: Any, name: str) -> None:
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name)
    tab.first.locator(".lm-TabBar-tabCloseIcon").click()
    dialog = page.locator(".jp-Dialog", has_text="unsaved")
    try:  # "Save your work" for a notebook JupyterLab considers changed
        expect(dialog).to_be_visible(timeout=1500)
        dialog.get_by_role("button", name="Discard").click()
    except AssertionError:
        pass
    expect(tab).to_have_count(0)


def slice_row(page: Any, name: str) -> Any:
    return page.locator(f"{SIDEBAR} .jp-vgpu-SliceRow", has_text=name)


def waiters(lab: Lab) -> list[dict[str, Any]]:
    status, reply = lab.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return list(reply.get("waiting", []))


def style(locator: Any, prop: str, pseudo: str | None = None) -> str:
    return str(locator.evaluate("(e, [p, pseudo]) => getComputedStyle(e, pseudo).getPropertyValue(p)", [prop, pseudo]))


def is_transparent(colour: str) -> bool:
    return colour in ("transparent", "rgba(0, 0, 0, 0)") or bool(re.fullmatch(r"rgba\(.*,\s*0\)", colour))


def truncated(page: Any, selector: str) -> list[str]:
    """The elements (visible, under ``selector``) whose content is wider than they are, or that
    stick out of the sidebar."""
    return list(
        page.evaluate(
            """([sel, sidebar]) => {
                const edge = document.querySelector(sidebar).getBoundingClientRect().right;
                return [...document.querySelectorAll(sel)]
                  .filter(e => e.offsetParent !== null)
                  .filter(e => e.scrollWidth > e.clientWidth || e.getBoundingClientRect().right > edge + 0.5)
                  .map(e => `${e.className} "${e.textContent}": ${e.scrollWidth} > ${e.clientWidth}`);
            }""",
            [selector, SIDEBAR],
        )
    )


def in_viewport(page: Any, locator: Any) -> bool:
    box = locator.bounding_box()
    size = page.viewport_size
    return (
        box is not None
        and box["y"] >= 0
        and box["x"] >= 0
        and box["y"] + box["height"] <= size["height"]
        and box["x"] + box["width"] <= size["width"]
    )


def inside(inner: Any, outer: Any) -> bool:
    """Whether ``inner`` is drawn within ``outer``'s box (not scrolled or clipped away)."""
    a, b = inner.bounding_box(), outer.bounding_box()
    return (
        a is not None
        and b is not None
        and a["y"] >= b["y"] - 0.5
        and a["y"] + a["height"] <= b["y"] + b["height"] + 0.5
        and a["height"] > 0
    )


@pytest.fixture(scope="module")
def plain(lab: Lab, page: Any) -> None:
    """work/plain.ipynb open on a kernel without a slice: both GPUs empty."""
    (lab.root / "work" / "plain.ipynb").write_text(notebook_json("python3", "Python 3 (ipykernel)"))
    page.goto(lab.page_url("lab/tree/work/plain.ipynb"))
    expect(page.locator(".jp-NotebookPanel")).to_be_visible(timeout=60_000)


@pytest.fixture(scope="module")
def untitled(lab: Lab, page: Any, plain: None) -> dict[str, dict[str, Any]]:
    """Untitled.ipynb and Untitled1.ipynb open on 1/4 GPU kernels; their slices by path."""
    held = {}
    for path in (UNTITLED, UNTITLED1):
        (lab.root / path).write_text(notebook_json(KERNEL_NAME, KERNEL_DISPLAY_NAME))
        open_notebook(page, path)
        held[path] = wait_for(f"{path}'s kernel to hold a slice", lambda p=path: kernel_slice(lab, p))
    return held


def test_an_empty_gpu_reads_empty_and_the_legend_says_how_to_read_the_bars(lab: Lab, page: Any, plain: None) -> None:
    sidebar = open_sidebar(page)
    bars = sidebar.locator(".jp-vgpu-DeviceBar")
    expect(bars).to_have_count(2)
    assert lab.slices() == []
    legend = sidebar.locator(".jp-vgpu-Legend")
    expect(legend).to_have_count(1)  # once in the panel, not per GPU
    expect(legend.locator(".jp-vgpu-Legend-item")).to_have_text(["used", "reserved", "other processes", "free"])
    for theme in themes(page):
        expect(legend).to_be_visible()
        for i in range(2):
            bar = bars.nth(i)
            assert bar.evaluate("b => b.children.length") == 0, theme  # no segment
            assert is_transparent(style(bar, "background-color")), (theme, style(bar, "background-color"))
            assert style(bar, "background-image") == "none", theme
            assert float(style(bar, "border-top-width").removesuffix("px")) >= 1, theme  # the track shows
            assert not is_transparent(style(bar, "border-top-color")), theme
        swatches = legend.locator(".jp-vgpu-Legend-swatch")
        assert not is_transparent(style(swatches.nth(0), "background-color")), theme  # used: solid
        assert style(swatches.nth(2), "background-image").startswith("repeating-linear-gradient"), theme  # hatched
        assert is_transparent(style(swatches.nth(3), "background-color")), theme  # free: empty
        sidebar.screenshot(path=str(ARTIFACTS / f"look-empty-gpu-{theme}.png"))


def test_gpu_and_notebook_names_are_whole_at_the_default_sidebar_width(
    lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]
) -> None:
    sidebar = open_sidebar(page)
    width = sidebar.bounding_box()["width"]
    # JupyterLab's floor (250 px) or the panel's own (320 px: issue 49, the demo's names whole), no wider
    assert width <= 320, f"the sidebar is {width}px wide: wider than the panel asks"
    names = sidebar.locator(".jp-vgpu-DeviceCard-name")
    expect(names).to_have_text(["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"])
    for name in ("Untitled.ipynb", "Untitled1.ipynb"):
        row = slice_row(page, name)
        expect(row.locator(".jp-vgpu-SliceRow-holder")).to_have_text(name)
        expect(row.locator(".jp-vgpu-SliceRow-holder")).to_have_attribute("title", f"Open work/{name}")
        expect(row.locator(".jp-vgpu-SliceRow-kernel")).to_have_text(KERNEL_DISPLAY_NAME)
    expect(names.first).to_have_attribute("title", re.compile(r"^NVIDIA A100-SXM4-80GB\n"))
    selectors = ", ".join(
        f"{SIDEBAR} {s}"
        for s in (
            ".jp-vgpu-DeviceCard-name",
            ".jp-vgpu-SliceRow-holder",
            ".jp-vgpu-SliceRow-kernel",
            ".jp-vgpu-Legend-item",
        )
    )
    for theme in themes(page):
        assert truncated(page, selectors) == [], theme
        sidebar.screenshot(path=str(ARTIFACTS / f"look-names-{theme}.png"))


def test_an_idle_slice_bar_is_empty_and_fills_as_it_is_used(
    lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]
) -> None:
    held = untitled[UNTITLED]
    row = slice_row(page, "Untitled.ipynb")
    bar = row.locator(".jp-vgpu-SliceBar")
    used = bar.locator(".jp-vgpu-SliceBar-used")
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text("0.0 / 20.0 GiB")
    for theme in themes(page):
        assert used.bounding_box()["width"] == 0, theme  # nothing used: nothing filled
        assert is_transparent(style(bar, "background-color")), (theme, style(bar, "background-color"))
        assert style(bar, "background-image") == "none", theme
        assert float(style(bar, "border-top-width").removesuffix("px")) >= 1, theme  # the reservation's outline
        assert not is_transparent(style(bar, "border-top-color")), theme
        expect(bar.locator(".jp-vgpu-SliceBar-over")).to_have_count(0)
        row.screenshot(path=str(ARTIFACTS / f"look-idle-slice-{theme}.png"))

    lab.simulate([{"gpu": 0, "pid": held["pid"], "memory": "5GiB", "utilization": 30}])
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text("5.0 / 20.0 GiB")
    expect(used).to_have_attribute("style", re.compile(r"width: 25(\.0+)?%"))
    assert not is_transparent(style(used, "background-color"))  # solid

    lab.simulate([{"gpu": 0, "pid": held["pid"], "memory": "25GiB", "utilization": 90}])  # 5 GiB over
    over = bar.locator(".jp-vgpu-SliceBar-over")
    expect(over).to_have_count(1)
    expect(over).to_have_attribute("style", re.compile(r"width: 20(\.0+)?%"))
    expect(used).to_have_attribute("style", re.compile(r"width: 80(\.0+)?%"))
    for theme in themes(page):
        assert over.bounding_box()["width"] > 0, theme
        assert style(over, "background-image").startswith("repeating-linear-gradient"), theme
        row.screenshot(path=str(ARTIFACTS / f"look-over-slice-{theme}.png"))
    lab.simulate([])
    expect(row.locator(".jp-vgpu-SliceRow-memory")).to_have_text("0.0 / 20.0 GiB")


def test_an_unknown_use_says_why(lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]) -> None:
    row = slice_row(page, "Untitled.ipynb")
    note = row.locator(".jp-vgpu-SliceRow-note")
    expect(note).to_have_count(0)  # measured (0 bytes): nothing to explain
    # A process without a slice on GPU 0: the server cannot tell whose memory is whose.
    lab.simulate([{"gpu": 0, "pid": 1, "memory": "1GiB"}])
    wait_for("an unknown use", lambda: kernel_slice(lab, UNTITLED)["state"] == "unknown", timeout=30)
    expect(note).to_be_visible()
    sentence = kernel_slice(lab, UNTITLED).get("usage_note") or "No GPU process of this kernel seen yet"
    expect(note).to_contain_text(sentence)
    expect(row).to_have_attribute("title", re.compile(re.escape(sentence)))
    expect(row.locator(".jp-vgpu-SliceBar")).to_have_class(re.compile(r"jp-vgpu-mod-unknown"))
    for theme in themes(page):
        assert style(note, "color") != style(row.locator(".jp-vgpu-SliceRow-holder"), "color"), theme  # muted
        row.screenshot(path=str(ARTIFACTS / f"look-unknown-{theme}.png"))

    # The server's own sentence, in the row and its tooltip; only in the tooltip once it is measured.
    # A reply with ``since`` names only what changed: a slice's state is the last one it named.
    states: dict[str, str] = {}

    def with_note(body: dict[str, Any]) -> dict[str, Any]:
        for s in body.get("slices", []):
            state = states[s["id"]] = s.get("state", states.get(s["id"], "unknown"))
            s["usage_note"] = SERVER_NOTE if state == "unknown" else "Measured by NVML."
        return body

    route_sample(page, "slices", with_note)
    try:
        expect(note).to_have_text(SERVER_NOTE)
        expect(row).to_have_attribute("title", re.compile(re.escape(SERVER_NOTE)))
        lab.simulate([])
        expect(note).to_have_count(0)
        expect(row).to_have_attribute("title", re.compile("Measured by NVML."))
    finally:
        unroute(page)


def test_the_status_bar_says_simulated_and_the_kernels_cpu_and_ram(
    lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]
) -> None:
    held = untitled[UNTITLED]
    lab.simulate([{"gpu": 0, "pid": held["pid"], "memory": "2GiB", "utilization": 20}])
    # The host use comes on the slice of the kernel the status bar follows.
    route_sample(page, "slices", lambda body: {**body, "slices": [{**s, "host": HOST} if "host" in s else s for s in body["slices"]]})
    try:
        activate_tab(page, "Untitled.ipynb")
        item = page.locator(".jp-vgpu-StatusItem-content")
        expect(item).to_have_text("GPU 2.0 / 20.0 GiB · simulated")
        expect(item.locator(".jp-vgpu-StatusItem-simulated")).to_be_visible()
        expect(item).to_have_attribute("title", re.compile(r"^GPU 2\.0 / 20\.0 GiB used of reserved: 1/4 GPU, slice "))
        expect(item).to_have_attribute("title", re.compile(r"\nCPU 12 % · RAM 310 MiB of 23\.4 GiB\n"))
        expect(item).to_have_attribute("title", re.compile(r"simulated \(JUPYTER_VGPU_SIMULATE\)"))
        for theme in themes(page):
            page.locator(".jp-StatusBar-Widget").screenshot(path=str(ARTIFACTS / f"look-status-{theme}.png"))
    finally:
        unroute(page)
    # A server without `host` (or one that cannot read it): the tooltip does without.
    route_sample(page, "slices", lambda body: {**body, "slices": [{k: v for k, v in s.items() if k != "host"} for s in body["slices"]]})
    try:
        expect(item).not_to_have_attribute("title", re.compile("CPU"), timeout=10_000)
        expect(item).to_have_text("GPU 2.0 / 20.0 GiB · simulated")
    finally:
        unroute(page)
    lab.simulate([])


def test_the_launcher_says_the_gpu_is_simulated(lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]) -> None:
    page.evaluate("() => { void window.jupyterapp.commands.execute('launcher:create'); }")
    launcher = page.locator(".jp-Launcher:not(.lm-mod-hidden)").last
    expect(launcher).to_have_attribute("data-jp-vgpu-simulated", "true")
    card = launcher.locator(f'.jp-LauncherCard[title="{KERNEL_DISPLAY_NAME}"]').first
    plain = launcher.locator('.jp-LauncherCard[title="Python 3 (ipykernel)"]').first
    expect(card).to_be_visible()
    for theme in themes(page):
        assert style(card, "content", "::after") == '"simulated GPU"', theme
        assert style(plain, "content", "::after") in ("none", "normal"), theme
        assert style(card, "color", "::after") != style(card, "background-color", "::after"), theme
        launcher.screenshot(path=str(ARTIFACTS / f"look-launcher-{theme}.png"))
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabCloseIcon").click()
    activate_tab(page, "Untitled.ipynb")


def test_a_refusal_keeps_its_heading_and_buttons_in_view_at_1440x900(
    lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]
) -> None:
    # GPU 0 holds two 1/4 slices, GPU 1 a process without a slice: no whole GPU is free.
    lab.simulate([{"gpu": 1, "pid": 1, "memory": "8GiB"}])
    (lab.root / BIG).write_text(notebook_json(WHOLE_GPU, "Python 3 (1 GPU)"))
    size = page.viewport_size
    page.set_viewport_size({"width": 1440, "height": 900})
    try:
        open_notebook(page, BIG)
        dialog = page.locator(".jp-Dialog")
        header = dialog.locator(".jp-Dialog-header")
        expect(header).to_contain_text("Error Starting Kernel", timeout=60_000)
        view = dialog.locator(".jp-vgpu-Refusal")
        expect(view).to_be_visible(timeout=10_000)
        content = dialog.locator(".jp-Dialog-content")
        heading = view.locator(".jp-vgpu-Refusal-summary")
        wait = view.get_by_role("button", name="Wait in line (Python 3 (1 GPU, waits))")
        raw = view.locator(".jp-vgpu-Refusal-raw")
        for theme in themes(page):
            if raw.get_attribute("open") is None:
                raw.locator("summary").click()
            expect(raw.locator("pre")).to_be_visible()
            page.wait_for_timeout(300)
            for what, locator in (("JupyterLab's heading", header), ("the summary", heading), ("Wait in line", wait)):
                assert in_viewport(page, locator), (theme, what, locator.bounding_box())
                assert inside(locator, content), (theme, what, locator.bounding_box(), content.bounding_box())
            assert content.evaluate("c => c.scrollTop") == 0, theme  # nothing scrolled the heading away
            pre = raw.locator("pre")
            scroll = view.locator(".jp-vgpu-Refusal-scroll")
            a, b = pre.bounding_box(), scroll.bounding_box()
            assert b["y"] - 0.5 <= a["y"] < b["y"] + b["height"] - 20, (theme, a, b)  # scrolled into view
            assert style(pre, "overflow-y") == "auto", theme
            assert pre.evaluate("p => p.clientHeight") <= 0.5 * content.evaluate("c => c.clientHeight"), theme
            assert inside(dialog.locator(".jp-Dialog-footer"), content), theme  # JupyterLab's Ok too
            content.screenshot(path=str(ARTIFACTS / f"look-refusal-expanded-{theme}.png"))
            raw.locator("summary").click()  # closed again for the next theme
        wait.click()
        expect(dialog).to_have_count(0, timeout=10_000)
        waiting = wait_for(
            "big.ipynb waiting in line", lambda: next((w for w in waiters(lab) if w.get("path") == BIG), None)
        )
        assert waiting["kernel_display_name"] in (None, "Python 3 (1 GPU, waits)"), waiting
        expect(page.locator(".jp-vgpu-StatusItem")).to_contain_text("GPU: waiting #1 (1 GPU)")
    finally:
        page.set_viewport_size(size)
    # Out of the line again (Cancel, from this browser: no error dialog), and the tab closed so
    # that a reload does not start its kernel.
    sidebar = open_sidebar(page)
    sidebar.get_by_role("button", name="Cancel waiting for big.ipynb").click()
    wait_for("the line to be empty", lambda: waiters(lab) == [], timeout=30)
    page.wait_for_timeout(1500)
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    close_tab(page, "big.ipynb")
    lab.simulate([])


def test_a_kernel_shut_down_from_the_panel_is_not_restarted_by_a_reload(
    lab: Lab, page: Any, untitled: dict[str, dict[str, Any]]
) -> None:
    held = untitled[UNTITLED1]
    open_sidebar(page)
    row = slice_row(page, "Untitled1.ipynb")
    row.locator(".jp-vgpu-action-shutdown").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Shut down kernel?")
    dialog.get_by_role("button", name="Shut Down").click()
    expect(row).to_have_count(0)
    wait_for("the slice to be released", lambda: all(s["id"] != held["id"] for s in lab.slices()), timeout=30)
    marks = page.evaluate("() => Object.entries(localStorage).filter(([k]) => k.startsWith('jupyter-vgpu:shut-down:'))")
    assert len(marks) == 1 and UNTITLED1 in json.loads(marks[0][1]), marks
    kernels_before = {k["id"] for k in lab.api("GET", "api/kernels")[1]}

    reload(page)
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="Untitled1.ipynb")).to_have_count(
        1, timeout=60_000
    )
    activate_tab(page, "Untitled1.ipynb")
    expect(page.locator(".jp-Notification-Toast-info", has_text="Untitled1.ipynb")).to_contain_text(
        "no kernel was started", timeout=20_000
    )
    for _ in range(3):  # three of the panel's polls (each after a few of the server's 0.5 s samples)
        with page.expect_response(SAMPLE, timeout=30_000):
            pass
    assert kernel_slice(lab, UNTITLED1) is None
    assert not any(s.get("path") == UNTITLED1 for s in lab.slices())
    assert not any(w.get("path") == UNTITLED1 for w in waiters(lab))
    status, sessions = lab.api("GET", "api/sessions")
    assert status == 200 and not any(s["path"] == UNTITLED1 for s in sessions), sessions
    assert {k["id"] for k in lab.api("GET", "api/kernels")[1]} <= kernels_before  # no new kernel
    # JupyterLab may bring back the tab that was current before the reload (CI of 3de1153), and a
    # hidden notebook's toolbar folds its items away: the user looks at the notebook's own tab.
    activate_tab(page, "Untitled1.ipynb")
    tab_id = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="Untitled1.ipynb").get_attribute("data-id")
    panel = page.locator(f"#{tab_id}")
    expect(panel.locator(".jp-Toolbar-kernelName")).to_have_text("No Kernel")
    expect(page.locator(".jp-Dialog")).to_have_count(0)  # no kernel picker either
    untitled_row = slice_row(page, "Untitled.ipynb")  # the other notebook kept its kernel
    expect(untitled_row).to_be_visible()

    # The user picks a kernel: the notebook gets its slice, and the mark is forgotten.
    page.evaluate(
        """([path, name]) => {
            const widget = [...window.jupyterapp.shell.widgets('main')]
                .find(w => w.sessionContext && w.sessionContext.path === path);
            void widget.sessionContext.changeKernel({name});
        }""",
        [UNTITLED1, KERNEL_NAME],
    )
    wait_for("Untitled1.ipynb's new slice", lambda: kernel_slice(lab, UNTITLED1))
    activate_tab(page, "Untitled1.ipynb")
    expect(panel.locator(".jp-Toolbar-kernelName")).to_have_text(KERNEL_DISPLAY_NAME)
    # The toolbar shows the kernel's name while it changes, before the session has the kernel
    # (run 16 read the mark then): the mark goes when the notebook has its kernel.
    marks = "() => Object.keys(localStorage).filter(k => k.startsWith('jupyter-vgpu:shut-down:'))"
    wait_for("the mark forgotten once the notebook has its kernel", lambda: page.evaluate(marks) == [], timeout=30)
