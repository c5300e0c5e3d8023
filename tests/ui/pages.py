"""What the browser tests do to a page: wait, open the GPUs panel, take screenshots."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_process import wait_for as poll

SIDEBAR = "#jupyter-vgpu-sidebar"
SIDEBAR_TAB = '.lm-TabBar-tab[data-id="jupyter-vgpu-sidebar"]'
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}


# Playwright's own default (5 s) is a deadline for an idle machine: on two loaded cores a kernel's
# shutdown, a sample (0.5 s) and the panel's refresh (2 s) took longer (a row still listed after
# its kernel's "Shut Down", run 8 of issue 45). An assertion waits for what it names, so a longer
# deadline costs only a failing test its time.
EXPECT_TIMEOUT_MS = 20_000


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    playwright_expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    return playwright_expect(locator)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    return poll(check, what, timeout)


def kernel_slice(lab: Any, path: str) -> dict[str, Any] | None:
    """The slice of the kernel of the notebook at ``path``, once the kernel holds it: the server
    reserves it (and holds it) before it launches the kernel, and tests simulate GPU memory for
    the kernel's pid."""
    for s in lab.slices():
        if s["holder_kind"] == "kernel" and s.get("path") == path and s["pid"] not in (None, lab.process.pid):
            return s
    return None


def open_sidebar(page: Any) -> Any:
    """Show the GPUs panel (JupyterLab may be restoring it as open or closed meanwhile)."""
    sidebar = page.locator(SIDEBAR)
    tab = page.locator(SIDEBAR_TAB)
    expect(tab).to_be_visible()
    expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")).to_be_visible()  # the layout is restored
    for _ in range(3):
        if sidebar.is_visible():
            break
        if "lm-mod-current" not in (tab.get_attribute("class") or ""):
            tab.click()
        page.wait_for_timeout(500)
    expect(sidebar).to_be_visible()
    return sidebar


def reload(page: Any) -> None:
    """Reload the page and wait until JupyterLab has restored its layout: the tabs it reopens
    are activated one by one meanwhile and would take the focus from a tab a test opens next
    (needs ``window.jupyterapp``, which the ``lab`` fixture exposes)."""
    page.reload()
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")


def activate_tab(page: Any, name: str) -> None:
    """Click the main area's tab of ``name`` and wait until it is the current one."""
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name).first.click()
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text(name)


def lab_screenshot(page: Any, path: Any) -> None:
    """The whole lab at a README-friendly size: sidebar, notebook and status bar."""
    size = page.viewport_size
    page.set_viewport_size({"width": 960, "height": 540})
    try:
        page.wait_for_timeout(300)
        page.screenshot(path=str(path))
    finally:
        page.set_viewport_size(size)


def set_theme_live(page: Any, theme: str) -> None:
    """Switch the theme without reloading (needs `--LabApp.expose_app_in_browser=True`), so
    what is on screen (a dialog, a notification) stays."""
    page.evaluate("theme => window.jupyterapp.commands.execute('apputils:change-theme', {theme})", THEMES[theme])
    expect(page.locator(f'body[data-jp-theme-light="{str(theme == "light").lower()}"]')).to_have_count(1)
    page.wait_for_timeout(400)  # the theme's stylesheet applies


def themes(page: Any) -> Any:
    """Run the block after each of ``light`` and ``dark`` (the page goes back to light)."""
    for theme in ("light", "dark"):
        set_theme_live(page, theme)
        yield theme
    set_theme_live(page, "light")


def screenshots(page: Any, folder: Path, name: str, target: Any = None) -> None:
    """``<name>-light.png`` and ``<name>-dark.png`` of ``target`` (a locator, or the page)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for theme in ("light", "dark"):
            set_theme_live(page, theme)
            (target if target is not None else page).screenshot(path=str(folder / f"{name}-{theme}.png"))
    finally:
        set_theme_live(page, "light")


def route_json(page: Any, pattern: str, change: Any) -> None:
    """Answer requests matching ``pattern`` with the server's JSON reply, changed by ``change``."""

    def handle(route: Any) -> None:
        response = route.fetch()
        try:
            body = change(response.json())
        except ValueError:
            route.fulfill(response=response)
            return
        route.fulfill(response=response, json=body)

    page.route(pattern, handle)


#: The UI's one request per tick (the sidebar's, the status bar's and the dashboard's data).
SAMPLE = "**/api/vgpu/sample*"


def route_sample(page: Any, part: str, change: Any) -> None:
    """Answer the UI's poll (``GET /api/vgpu/sample``) with the server's reply, its ``part``
    ("slices", "devices" or "history": what ``/api/vgpu/<part>`` would answer) changed by ``change``
    where the poll asked for it."""
    route_json(page, SAMPLE, lambda body: {**body, part: change(body[part])} if part in body else body)


def unroute(page: Any) -> None:
    """Take the routes away, without failing a reply still on its way through one."""
    page.unroute_all(behavior="ignoreErrors")


@contextmanager
def one_tab(browser: Any, module: str, *, height: int = 800, **options: Any) -> Iterator[Any]:
    """A browser tab a module's tests share (in file order); at the end its last look lands in
    artifacts/ui/last-page-<module>.png, whatever happened."""
    from .conftest import ARTIFACTS

    context = browser.new_context(viewport={"width": 1280, "height": height}, **options)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            page.screenshot(path=str(ARTIFACTS / f"last-page-{module.rsplit('.', 1)[-1]}.png"))
        except Exception:
            pass  # a page that crashed takes no picture; the test's own failure says what happened
        context.close()
