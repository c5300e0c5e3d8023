"""The launcher lists GPU kernels by size, the plain one of equal sizes first, also after a reload
(issue 41), in a real JupyterLab on one simulated 16 GiB GPU with the kernelspecs ./scripts/lab
installs ("1 GiB", "1/4", "1/2", "1/2, 2 devices", "1 GPU"). Screenshots land in artifacts/ui/ (``launcher-reload-*``), light and dark.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ARTIFACTS, Lab
from .pages import expect, reload, screenshots, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EXTRA_KERNELSPECS = {
    "python3-vgpu-1gib": ("Python 3 (1 GiB GPU)", {"gpu_memory": "1GiB"}),
    "python3-vgpu-1-2-ld2": ("Python 3 (1/2 GPU, 2 devices)", {"gpu_fraction": 0.5, "logical_devices": 2}),
    "python3-vgpu-1-2": ("Python 3 (1/2 GPU)", {"gpu_fraction": 0.5}),
    "python3-vgpu-1": ("Python 3 (1 GPU)", {"gpu_fraction": 1}),
}
#: By size (1 GiB of 16 first), the plain one of equal sizes first: as text, "," sorts before ")".
BY_SIZE = [
    "Python 3 (1 GiB GPU)",
    "Python 3 (1/4 GPU)",
    "Python 3 (1/2 GPU)",
    "Python 3 (1/2 GPU, 2 devices)",
    "Python 3 (1 GPU)",
]


def sliced_titles(page: Any) -> list[str]:
    section = page.locator(".jp-Launcher-section", has=page.locator(".jp-Launcher-sectionTitle", has_text="Notebook"))
    titles = section.locator(".jp-LauncherCard").evaluate_all("cards => cards.map(c => c.getAttribute('title'))")
    return [t for t in titles if " GPU" in t]


def in_order(page: Any) -> bool:
    # a venv may hold a kernelspec of the same name too (./scripts/lab's, the wheel test's): twice is one size
    shown = [t for t in sliced_titles(page) if t in BY_SIZE]
    return list(dict.fromkeys(shown)) == BY_SIZE and shown == sorted(shown, key=BY_SIZE.index)


def test_the_launcher_lists_gpu_kernels_by_size_before_and_after_a_reload(lab: Lab, page: Any) -> None:
    page.goto(lab.page_url("lab"))
    launcher = page.locator(".jp-Launcher")
    expect(launcher.locator(".jp-LauncherCard", has_text="Python 3 (1 GPU)").first).to_be_visible(timeout=60_000)
    wait_for(f"the sliced cards by size: {sliced_titles(page)}", lambda: in_order(page), timeout=20)
    reload(page)
    expect(launcher.locator(".jp-LauncherCard", has_text="Python 3 (1 GPU)").first).to_be_visible(timeout=60_000)
    wait_for(f"the sliced cards by size after the reload: {sliced_titles(page)}", lambda: in_order(page), timeout=20)
    page.wait_for_timeout(3000)  # and they stay so
    assert in_order(page), sliced_titles(page)
    screenshots(page, ARTIFACTS, "launcher-reload", launcher)
