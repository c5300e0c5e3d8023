"""A real JupyterLab on simulated GPUs, driven by Debian's Chromium through Playwright.

Everything lives in a temporary directory: Jupyter's config, data and runtime dirs, the ledger,
the notebooks and the simulation file (which tests rewrite to give processes GPU memory).
The server runs under a non-root base URL, as JupyterHub would run it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("JUPYTER_VGPU_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BASE_URL = "/vgpu-test/"
TOKEN = "vgpu-ui-test-token"
KERNEL_NAME = "python3-vgpu-1-4"
KERNEL_DISPLAY_NAME = "Python 3 (1/4 GPU)"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "ui"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(reason=f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@dataclass
class Lab:
    """A running `jupyter lab` and the knobs a test turns."""

    url: str  # http://127.0.0.1:PORT/vgpu-test/
    root: Path
    simulation: Path
    env: dict[str, str]
    log: Path
    devices: list[dict[str, Any]] = field(default_factory=list)

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Call the server's REST API with the token; returns (status, parsed JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path.lstrip("/"),
            data=data,
            method=method,
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            try:
                return error.code, json.loads(text)
            except ValueError:
                return error.code, text

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

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_user_settings(config_dir: Path) -> None:
    # No news or update toasts over the panels we look at.
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


def _write_kernelspec(data_dir: Path) -> None:
    spec = data_dir / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": KERNEL_DISPLAY_NAME,
                "language": "python",
                "metadata": {
                    "kernel_provisioner": {
                        "provisioner_name": "vgpu-provisioner",
                        "config": {"gpu_fraction": 0.25},
                    }
                },
            }
        )
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


@pytest.fixture
def jp_asyncio_loop() -> None:
    """Replaces pytest-jupyter's autouse loop fixture (and the cleanup that uses it) here.

    These tests run their server as a subprocess, and the event loop pytest-jupyter would
    close after each test is the one Playwright's sync API keeps running.
    """


@pytest.fixture
def jp_server_cleanup() -> None:
    """See `jp_asyncio_loop`."""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """`jupyter lab` on one simulated 16 GiB GPU with a "Python 3 (1/4 GPU)" kernelspec."""
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    (root / "work").mkdir(parents=True)
    (root / "work" / "train.ipynb").write_text(notebook_json(KERNEL_NAME, KERNEL_DISPLAY_NAME))
    config_dir, data_dir, runtime_dir = tmp / "config", tmp / "data", tmp / "runtime"
    _write_user_settings(config_dir)
    _write_kernelspec(data_dir)
    simulation = tmp / "gpus.json"
    devices = [{"name": "NVIDIA A100-SXM4-16GB (simulated)", "memory": "16GiB", "utilization": 35}]
    simulation.write_text(json.dumps({"devices": devices, "processes": []}))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update(
        {
            "JUPYTER_CONFIG_DIR": str(config_dir),
            "JUPYTER_DATA_DIR": str(data_dir),
            "JUPYTER_RUNTIME_DIR": str(runtime_dir),
            "IPYTHONDIR": str(tmp / "ipython"),
            "JUPYTER_VGPU_SIMULATE": str(simulation),
            "JUPYTER_VGPU_LEDGER": str(tmp / "ledger.sqlite"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    port = _free_port()
    log = tmp / "server.log"
    url = f"http://127.0.0.1:{port}{BASE_URL}"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab",
                "--no-browser", "--allow-root",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                f"--ServerApp.token={TOKEN}", f"--ServerApp.base_url={BASE_URL}",
                f"--ServerApp.root_dir={root}",
                "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = Lab(url=url, root=root, simulation=simulation, env=env, log=log, devices=devices)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"jupyter lab exited with {process.returncode}:\n{server.log_tail()}")
            try:
                if server.api("GET", "api/status")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within 90 s:\n{server.log_tail()}")
            time.sleep(0.5)
        status, reply = server.api("GET", "api/vgpu/devices")
        if status != 200:
            pytest.fail(f"GET api/vgpu/devices answered {status} {reply}:\n{server.log_tail()}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, ARTIFACTS / "server.log")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def page(browser: Any, lab: Lab) -> Iterator[Any]:
    """One browser tab on the lab, shared by a module's tests (they run in file order)."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, permissions=["clipboard-read", "clipboard-write"]
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            page.screenshot(path=str(ARTIFACTS / "last-page.png"))
        except Exception:
            pass
        context.close()
