"""Kernels on simulated GPUs: a :class:`Workspace` holds a simulation file, a ledger and an
isolated IPython/Jupyter configuration, and starts kernels with a slice's environment (what the
provisioner does) through the suite's one driver, :class:`kernels.Kernel`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernels import Kernel, Outcome

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import Ledger, SQLiteLedger
from jupyter_vgpu.slices import Holder, Slice, SliceRequest, cpu_environment, slice_environment

_STRIP = ("JUPYTER_VGPU_", "CUDA_", "XLA_", "CUPY_", "TF_", "IPYTHONDIR", "JUPYTER_CONFIG", "JUPYTER_PATH")


class Workspace:
    """A simulated 16 GiB GPU (JSON file), a ledger, and isolated IPython/Jupyter config dirs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.simulation = root / "gpus.json"
        self.ledger_path = root / "vgpu" / "ledger.sqlite"
        self.ipython_dir = root / "ipython"
        self.config_dir = root / "jupyter-config"
        for folder in (self.ipython_dir, self.config_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.set_usage([])

    def set_usage(self, processes: list[dict[str, Any]]) -> None:
        """Rewrite the simulated GPU's per-process usage (e.g. the kernel's pid and memory)."""
        devices = [{"name": "Simulated A100", "memory": "16GiB", "uuid": "GPU-5e1a0000-0000-4000-8000-00000000a100"}]
        tmp = self.simulation.with_suffix(".tmp")
        tmp.write_text(json.dumps({"devices": devices, "processes": processes}))
        os.replace(tmp, self.simulation)
        time.sleep(0.02)  # a new mtime even on coarse clocks

    def ledger(self) -> Ledger:
        return SQLiteLedger(self.ledger_path, Inventory(str(self.simulation)))  # the allowance by compute capability

    def reserve(self, fraction: float | None = 0.25, *, memory: str | None = None, logical_devices: int = 1) -> Slice:
        request = SliceRequest.parse(fraction=None if memory else fraction, memory=memory, logical_devices=logical_devices)
        ledger = self.ledger()
        try:
            return ledger.reserve(request, Holder("kernel", "tests/kernel"))
        finally:
            ledger.close()

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP)}
        env.update(
            {
                "JUPYTER_VGPU_SIMULATE": str(self.simulation),
                "JUPYTER_VGPU_LEDGER": str(self.ledger_path),
                "IPYTHONDIR": str(self.ipython_dir),
                "JUPYTER_CONFIG_DIR": str(self.config_dir),
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            }
        )
        return env

    def slice_env(self, slice_: Slice) -> dict[str, str]:
        """What the provisioner gives a kernel holding ``slice_``."""
        env = self.base_env()
        env.update(slice_environment(slice_, ledger_path=str(self.ledger_path), simulate=str(self.simulation)))
        return env

    def cpu_env(self, *, logical_devices: int = 1, reason: str = "No NVIDIA GPU is available here.") -> dict[str, str]:
        env = self.base_env()
        env.update(cpu_environment(logical_devices=logical_devices, reason=reason))
        return env


def start(env: dict[str, str], *, extension: bool = True) -> Kernel:
    """``python -m ipykernel_launcher [--ext=jupyter_vgpu]`` with ``env``."""
    return Kernel.start("python3", env, extension=extension)


def module_kernel(tmp_path_factory: pytest.TempPathFactory, name: str, **reserve: Any) -> Iterator[tuple[Workspace, Slice, Kernel]]:
    """A workspace, a slice and a kernel shared by one test module."""
    workspace = Workspace(tmp_path_factory.mktemp(name))
    slice_ = workspace.reserve(**reserve)
    kernel = start(workspace.slice_env(slice_))
    try:
        yield workspace, slice_, kernel
    finally:
        kernel.stop()


__all__ = ["Kernel", "Outcome", "Workspace", "module_kernel", "start"]
