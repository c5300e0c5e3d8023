"""The extension in kernels started through a kernelspec that names ``vgpu-provisioner``."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_vgpu.slices import open_ledger
from jupyter_vgpu.slices.reports import read_report
from jupyter_vgpu.units import GiB


@pytest.fixture
def kernelspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vgpu_env: dict[str, str]) -> str:
    """A "Python 3 (1/4 GPU)" kernelspec in an isolated Jupyter path."""
    root = tmp_path / "jupyter-path"
    folder = root / "kernels" / "python3-quarter-gpu"
    folder.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (1/4 GPU)",
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": {"gpu_fraction": 0.25}}},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "python3-quarter-gpu"


@pytest.fixture
async def manager(kernelspec: str) -> AsyncIterator[AsyncKernelManager]:
    km = AsyncKernelManager(kernel_name=kernelspec)
    await km.start_kernel()
    try:
        yield km
    finally:
        if await km.is_alive():
            await km.shutdown_kernel(now=True)


async def execute(km: AsyncKernelManager, code: str) -> list[dict[str, Any]]:
    """The iopub messages of one cell."""
    client = km.client()
    client.start_channels()
    messages: list[dict[str, Any]] = []
    try:
        await client.wait_for_ready(timeout=60)
        await client.execute_interactive(code, output_hook=messages.append, timeout=60)
    finally:
        client.stop_channels()
    return messages


def text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        if m["msg_type"] == "stream":
            parts.append(m["content"]["text"])
        elif m["msg_type"] in ("display_data", "execute_result"):
            parts.append(m["content"]["data"]["text/plain"])
    return "".join(parts)


async def test_provisioned_kernel_loads_the_extension_with_its_slice(manager: AsyncKernelManager) -> None:
    ledger = open_ledger()
    [slice_] = ledger.slices()
    status = text(await execute(manager, "%vgpu"))
    assert status.startswith(f"jupyter-vgpu · slice {slice_.id}  [simulated GPUs]")
    assert "\n  share              1/4 GPU\n" in status
    pid = int(text(await execute(manager, "import os; print(os.getpid())")))
    assert slice_.pid == pid
    report = read_report(ledger.path, slice_.id)
    assert report is not None and report["pid"] == pid


async def test_a_resize_survives_a_kernel_restart(manager: AsyncKernelManager) -> None:
    resized = text(await execute(manager, "%vgpu resize 0.5"))
    assert "resized from 1/4 GPU (4.0 GiB per GPU) to 1/2 GPU (8.0 GiB per GPU)" in resized
    await manager.restart_kernel(now=True)
    after = text(await execute(manager, "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'])"))
    assert int(after) == 8 * GiB
    assert "\n  share              1/2 GPU\n" in text(await execute(manager, "%vgpu"))
