"""The extension in kernels started through a kernelspec that names ``vgpu-provisioner``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, Outcome

from jupyter_vgpu.ledger import open_ledger
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
def kernel(kernelspec: str) -> Iterator[Kernel]:
    """A kernel of the sliced kernelspec, started through its provisioner."""
    started = Kernel.start(kernelspec)
    try:
        yield started
    finally:
        started.stop()


def text(outcome: Outcome) -> str:
    """What the cell showed: its printed text and the plain text of its displays."""
    return outcome.stdout + "".join(bundle.get("text/plain", "") for bundle in outcome.displays)


def test_provisioned_kernel_loads_the_extension_with_its_slice(kernel: Kernel) -> None:
    ledger = open_ledger()
    [slice_] = ledger.slices()
    status = text(kernel.run("%vgpu"))
    assert status.startswith(f"jupyter-vgpu · slice {slice_.id}  [simulated GPUs]")
    assert "\n  share              1/4 GPU\n" in status
    pid = kernel.pid
    assert slice_.pid == pid
    report = read_report(ledger.path, slice_.id)
    assert report is not None and report["pid"] == pid


def test_a_resize_survives_a_kernel_restart(kernel: Kernel) -> None:
    resized = text(kernel.run("%vgpu resize 0.5"))
    assert "resized from 1/4 GPU (4.0 GiB per GPU) to 1/2 GPU (8.0 GiB per GPU)" in resized
    assert kernel.manager is not None
    kernel.manager.restart_kernel(now=True)
    kernel.client.wait_for_ready(timeout=60)
    assert int(kernel.env("JUPYTER_VGPU_MEMORY_RESERVED")) == 8 * GiB
    assert "\n  share              1/2 GPU\n" in text(kernel.run("%vgpu"))
