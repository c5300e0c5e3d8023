"""On simulated GPUs, what a sliced kernel's frameworks hold (in host memory) is its GPU use, in
every view, labelled simulated (issue 33: every "used" figure of the demo read 0 B)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.gpus.simulated_use import use_folder
from jupyter_vgpu.kernel.simulated import Cells
from jupyter_vgpu.units import GiB, MiB

from .harness import Kernel, Workspace

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


def simulated_use(workspace: Workspace, pid: int) -> int:
    """What the simulated driver says process ``pid`` holds on the GPU, as every view reads it."""
    snapshot = Inventory(str(workspace.simulation), use_folder=use_folder(workspace.ledger_path.parent)).snapshot()
    return sum(p.used or 0 for gpu in snapshot.gpus for p in gpu.processes if p.pid == pid)


def settles(read: Any, near: int, timeout: float = 20) -> int:
    """``read()`` once it is within 64 MiB of ``near`` (the kernel says it every second)."""
    deadline = time.monotonic() + timeout
    while abs((value := read()) - near) > 64 * MiB:
        assert time.monotonic() < deadline, f"{value} bytes, not about {near}"
        time.sleep(0.2)
    return int(value)


def status(workspace: Workspace, *args: str) -> str:
    shown = subprocess.run([JUPYTER_VGPU, "status", *args], env=workspace.base_env(), capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.mark.tensorflow
def test_tensorflow_tensors_are_the_kernels_simulated_gpu_use_in_every_view(workspace: Workspace, start: Any) -> None:
    kernel: Kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    assert kernel.run("import tensorflow as tf\nx = tf.zeros([256, 1024, 1024])").ok  # 1 GiB
    settles(lambda: simulated_use(workspace, kernel.pid), GiB)
    data = json.loads(status(workspace, "--json"))
    (row,) = data["slices"]
    assert abs(row["memory_used"] - GiB) < 64 * MiB and row["usage_source"] == "measured"
    assert data["gpus"][0]["memory_used"] >= row["memory_used"]  # the GPU's figure too
    assert "USED, on simulated GPUs: what each slice's frameworks hold in the host's memory." in status(workspace)
    [bundle] = kernel.run("%vgpu").displays
    assert "used now           1.0 GiB of 4.0 GiB, 25% (simulated: what its frameworks hold in the host's memory, or the simulation file's figure)" in bundle["text/plain"]
    assert kernel.run("del x").ok
    settles(lambda: simulated_use(workspace, kernel.pid), 0)


def test_jax_arrays_are_the_kernels_simulated_gpu_use(workspace: Workspace, start: Any) -> None:
    pytest.importorskip("jax")
    kernel: Kernel = start({**workspace.slice_env(workspace.reserve(0.25)), "JAX_PLATFORMS": "cpu"})
    assert kernel.run("import jax.numpy as jnp\nx = jnp.zeros((128, 1024, 1024))").ok  # 512 MiB
    settles(lambda: simulated_use(workspace, kernel.pid), 512 * MiB)


def test_a_kernel_that_imports_no_framework_uses_nothing_and_writes_nothing(workspace: Workspace, start: Any) -> None:
    kernel: Kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    assert kernel.run("x = bytearray(256 << 20)").ok  # host memory, not a framework's tensor
    time.sleep(1.5)
    assert simulated_use(workspace, kernel.pid) == 0
    assert not use_folder(workspace.ledger_path.parent).exists()


class _Events:
    """IPython's cell events, as far as :class:`Cells` uses them."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Any]] = {}

    def register(self, event: str, callback: Any) -> None:
        self.callbacks.setdefault(event, []).append(callback)

    def fire(self, event: str) -> None:
        for callback in self.callbacks.get(event, []):
            callback(None)


def test_a_kernels_cpu_load_counts_only_while_a_cell_runs_or_ran_since_the_last_look(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _Events()
    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda: SimpleNamespace(events=events)))
    cells = Cells()
    cells.attach()
    assert cells.at_work()  # started by a framework's import, in a cell
    events.fire("post_run_cell")
    assert cells.at_work()  # the cell ran since the last look
    assert not cells.at_work() and not cells.at_work()  # idle: its threads' load is not GPU work
    events.fire("pre_run_cell")
    assert cells.at_work() and cells.at_work()  # a long cell
    events.fire("post_run_cell")
    assert cells.at_work() and not cells.at_work()


def test_a_process_without_cells_is_always_at_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # `jupyter vgpu run python train.py`
    cells = Cells()
    cells.attach()
    assert cells.at_work() and cells.at_work()
