"""Real kernels on a real GPU: kernelspecs with the vgpu provisioner, the suite's kernel driver, NVML."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import write_sliced_kernelspec
from kernels import Kernel

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.units import MiB

#: How each framework creates its CUDA context, allocates ``{n}`` bytes, and says it ran out.
FRAMEWORKS: dict[str, tuple[str, str, str]] = {
    "torch": (
        "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
        "torch.empty({n}, dtype=torch.uint8, device='cuda')",
        "torch.cuda.OutOfMemoryError",
    ),
    "jax": (
        "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()",
        "jnp.zeros(({n},), dtype=jnp.uint8).block_until_ready()",
        "Exception",
    ),
    "cupy": (
        "import cupy; cupy.zeros(1); cupy.cuda.Device().synchronize()",
        "cupy.empty({n}, dtype=cupy.uint8)",
        "cupy.cuda.memory.OutOfMemoryError",
    ),
}


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not installed(module), reason=f"{module} is not installed")


def write_kernelspec(data_dir: Path, name: str, config: dict[str, Any]) -> str:
    write_sliced_kernelspec(data_dir, config, name=name, display_name=f"Python 3 ({name})")
    return name


def fill(kernel: Kernel, framework: str, chunk: int = 256 * MiB) -> int:
    """Allocate ``chunk``-byte blocks until the framework refuses; the bytes it allowed."""
    _, allocate, oom = FRAMEWORKS[framework]
    code = (
        "_held, _total = [], 0\n"
        "while _total < 10 * 2**40:\n"
        "    try:\n"
        f"        _held.append({allocate.format(n=chunk)})\n"
        f"    except {oom}:\n"
        "        break\n"
        f"    _total += {chunk}\n"
        "print(_total)"
    )
    outcome = kernel.run(code, timeout=600)
    assert outcome.ok, outcome.error
    return int(outcome.stdout.strip().splitlines()[-1])


def nvml_used(pid: int) -> int | None:
    """Bytes NVML attributes to ``pid`` on any GPU; None when NVML lists it nowhere."""
    found = [p.used or 0 for gpu in Inventory("").snapshot().gpus for p in gpu.processes if p.pid == pid]
    return sum(found) if found else None


def require_host_pids(pid: int) -> int:
    """NVML's memory for ``pid``, skipping the test when NVML cannot see this pid namespace's pids."""
    used = nvml_used(pid)
    if used is None:
        others = [p.pid for gpu in Inventory("").snapshot().gpus for p in gpu.processes]
        pytest.skip(
            f"NVML lists no process {pid} (it lists {others or 'none'}): this runs in a pid namespace whose "
            "pids NVML cannot see, so per-process memory cannot be checked here"
        )
    return used


def gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"




CONTROL = shutil.which("nvidia-cuda-mps-control")


@contextmanager
def mps_control_daemon(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An MPS control daemon of the test's own (its pipe and log folders in ``tmp_path``; root
    and nvidia-cuda-mps-control, else the test is skipped); yields the variables its clients
    need; quit afterwards."""
    if CONTROL is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    if os.geteuid() != 0:
        pytest.skip("starting an MPS control daemon needs root")
    pipe, log = tmp_path / "mps-pipe", tmp_path / "mps-log"
    pipe.mkdir()
    log.mkdir()
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(log)}
    started = subprocess.run([CONTROL, "-d"], env=env, capture_output=True, text=True, timeout=30)
    deadline = time.monotonic() + 10
    while not (pipe / "control").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if started.returncode != 0 or not (pipe / "control").exists():
        text = (log / "control.log").read_text() if (log / "control.log").exists() else started.stderr
        pytest.skip(f"the MPS control daemon did not start: {text.strip()[-500:]}")
    try:
        yield {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(log), "JUPYTER_VGPU_MPS": "auto"}
    finally:
        subprocess.run([CONTROL], input="quit\n", env=env, text=True, capture_output=True, timeout=30)


__all__ = [
    "CONTROL",
    "FRAMEWORKS",
    "Kernel",
    "fill",
    "gib",
    "installed",
    "mib",
    "mps_control_daemon",
    "needs",
    "nvml_used",
    "require_host_pids",
    "write_kernelspec",
]
