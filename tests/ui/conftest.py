"""A real JupyterLab on simulated GPUs, driven by Debian's Chromium through Playwright.

Everything lives in a temporary directory: Jupyter's config, data and runtime dirs, the ledger,
the notebooks and the simulation file (which tests rewrite to give processes GPU memory).
The server runs under a non-root base URL, as JupyterHub would run it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import (
    KERNEL_DISPLAY_NAME,
    KERNEL_NAME,
    TOKEN,
    JupyterProcess,
    isolated_env,
    start_jupyter,
    write_sliced_kernelspec,
)

CHROMIUM = Path(os.environ.get("JUPYTER_VGPU_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "ui"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(reason=f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@dataclass
class Lab(JupyterProcess):
    """A running `jupyter lab` and the knobs a test turns."""

    simulation: Path = Path()
    devices: list[dict[str, Any]] = field(default_factory=list)

    def slices(self) -> list[dict[str, Any]]:
        status, reply = self.api("GET", "api/vgpu/slices")
        assert status == 200, reply
        return list(reply["slices"])

    def simulate(self, processes: list[dict[str, Any]]) -> None:
        """Give processes GPU memory on the simulated GPUs (the server re-reads the file)."""
        tmp = self.simulation.with_suffix(".tmp")
        tmp.write_text(json.dumps({"devices": self.devices, "processes": processes}))
        tmp.replace(self.simulation)

    def page_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={TOKEN}"

    def set_theme(self, theme: str) -> None:
        status, reply = self.api(
            "PUT",
            "lab/api/settings/@jupyterlab/apputils-extension:themes",
            {"raw": json.dumps({"theme": theme})},
        )
        assert status in (200, 204), reply


def _write_user_settings(config_dir: Path) -> None:
    # No news or update toasts over the panels we look at.
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


def notebook_json(kernel_name: str, display_name: str, source: str = "x = 1") -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": "a1",
                    "metadata": {},
                    "outputs": [],
                    "source": source,
                }
            ],
            "metadata": {
                "kernelspec": {"name": kernel_name, "display_name": display_name, "language": "python"},
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """`jupyter lab` on one simulated 16 GiB GPU with a "Python 3 (1/4 GPU)" kernelspec.

    A test module may add to it: ``EXTRA_KERNELSPECS`` ({name: (display name, provisioner
    config)}), ``SERVER_CONFIG`` (written to jupyter_server_config.json, e.g. a faster
    watchdog), ``LAB_ARGS`` (more command-line arguments) and ``DEVICES`` (the simulated GPUs,
    instead of one 16 GiB GPU)."""
    tmp = tmp_path_factory.mktemp("lab")
    (tmp / "root" / "work").mkdir(parents=True)
    (tmp / "root" / "work" / "train.ipynb").write_text(notebook_json(KERNEL_NAME, KERNEL_DISPLAY_NAME))
    _write_user_settings(tmp / "config")
    write_sliced_kernelspec(tmp / "data")
    for name, (display_name, config) in getattr(request.module, "EXTRA_KERNELSPECS", {}).items():
        write_sliced_kernelspec(tmp / "data", config, name=name, display_name=display_name)
    server_config = getattr(request.module, "SERVER_CONFIG", None)
    if server_config:
        (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(server_config))
    simulation = tmp / "gpus.json"
    devices = list(
        getattr(request.module, "DEVICES", None)
        or [{"name": "NVIDIA A100-SXM4-16GB (simulated)", "memory": "16GiB", "utilization": 35}]
    )
    simulation.write_text(json.dumps({"devices": devices, "processes": []}))
    started = start_jupyter(
        tmp,
        app="lab",
        env=isolated_env(tmp, JUPYTER_VGPU_SIMULATE=str(simulation)),
        # window.jupyterapp: tests switch themes live, open files and wait for a reload's restore
        args=["--LabApp.expose_app_in_browser=True", *getattr(request.module, "LAB_ARGS", ())],
    )
    server = Lab(**vars(started), simulation=simulation, devices=devices)
    try:
        status, reply = server.api("GET", "api/vgpu/devices")
        if status != 200:
            pytest.fail(f"GET api/vgpu/devices answered {status} {reply}:\n{server.log_tail()}")
        yield server
    finally:
        server.stop(timeout=20)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.log, ARTIFACTS / f"server-{request.module.__name__.rsplit('.', 1)[-1]}.log")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for a module's tests. Not one per process of the run: while Playwright's sync API
    is open, its event loop runs in the test's thread, and the next module's asyncio tests could
    not start theirs."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def page(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[Any]:
    """One browser tab on the lab, shared by a module's tests (they run in file order)."""
    from .pages import one_tab

    with one_tab(browser, request.module.__name__, permissions=["clipboard-read", "clipboard-write"]) as page:
        yield page
