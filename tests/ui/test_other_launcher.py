"""A launcher another package adds (tests/fixtures/faraway, registered through the entry point group)
in a real JupyterLab: its kernels get a card of their own in the GPUs panel, with its title and its
words, a waiting one with its reason, its place and a Cancel that takes it out of its line, and the
status bar says where the notebook's kernel runs; nothing in the server, the CLI or the UI names it
(issue 40). Screenshots land in artifacts/ui/ (``other-launcher-*``), light and dark."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import isolated_env, start_jupyter, write_sliced_kernelspec

from ui.conftest import ARTIFACTS, CHROMIUM, Lab, _write_user_settings, notebook_json
from ui.pages import SIDEBAR, expect, open_sidebar, screenshots, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FARAWAY = Path(__file__).parents[1] / "fixtures" / "faraway"
NAME, DISPLAY = "python3-vgpu-far", "Python 3 (1/4 GPU, far)"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("faraway-lab")
    (tmp / "root" / "work").mkdir(parents=True)
    (tmp / "root" / "work" / "far.ipynb").write_text(notebook_json(NAME, DISPLAY))
    _write_user_settings(tmp / "config")
    write_sliced_kernelspec(tmp / "data", {"gpu_fraction": 0.25, "launcher": "faraway"}, name=NAME, display_name=DISPLAY)
    state = tmp / "faraway.json"
    state.write_text(json.dumps({"kernels": {}, "line": [{"kernel_id": "0f0f0f0f-aaaa", "path": "work/queued.ipynb"}]}))
    env = isolated_env(tmp, JUPYTER_VGPU_SIMULATE="1x16GiB", PYTHONPATH=str(FARAWAY), FARAWAY_STATE=str(state))
    started = start_jupyter(tmp, app="lab", env=env, args=["--VGPUServer.monitor_interval=0.5", "--LabApp.expose_app_in_browser=True"])
    server = Lab(**vars(started))
    try:
        yield server
    finally:
        server.stop(timeout=30)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.log, ARTIFACTS / "server-test_other_launcher.log")


def test_another_packages_launcher_gets_a_card_of_its_own_with_its_words(lab: Lab, page: Any) -> None:
    page.goto(lab.page_url("lab/tree/work/far.ipynb"))
    sidebar = open_sidebar(page)
    row = wait_for("the faraway kernel in /api/vgpu/slices", lambda: next((s for s in lab.slices() if s.get("elsewhere")), None))
    card = sidebar.locator('.jp-vgpu-Elsewhere[data-launcher="faraway"]')
    expect(card.locator(".jp-vgpu-Elsewhere-title")).to_contain_text("Faraway hosts 2")
    shown = card.locator(f'.jp-vgpu-ElsewhereRow.jp-vgpu-mod-running[data-kernel-id="{row["kernel_id"]}"]')
    expect(shown.locator(".jp-vgpu-SliceRow-holder")).to_have_text("far.ipynb")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-job")).to_have_text("Faraway host far1 · slot 3 · 2 of 8 slots")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-use")).to_contain_text("1.0 / 4.0 GiB")
    waiting = card.locator('.jp-vgpu-ElsewhereRow.jp-vgpu-mod-pending[data-ticket="faraway-0f0f0f0f"]')
    expect(waiting).to_contain_text("queued.ipynb")
    expect(waiting.locator(".jp-vgpu-ElsewhereRow-reason")).to_contain_text("Busy: every faraway host is busy")
    expect(waiting).to_contain_text("Place 1 in the faraway line")
    expect(sidebar).not_to_contain_text("Slurm")
    expect(page.locator(".jp-vgpu-StatusItem")).to_contain_text("Faraway host far1")
    screenshots(page, ARTIFACTS, "other-launcher-card", page.locator(SIDEBAR))
    waiting.locator(".jp-vgpu-Waiting-cancel").click()  # its launcher takes it out of its line
    expect(card.locator(".jp-vgpu-Elsewhere-title")).to_contain_text("Faraway hosts 1")
    assert json.loads(Path(lab.env["FARAWAY_STATE"]).read_text())["line"] == []
