"""The real NVML: the inventory, and a real CUDA process's memory under its own pid."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.units import MiB

from .harness import installed, mib, nvml_used

CHILD = """
import sys, time
{setup}
print("context", flush=True)
sys.stdin.readline()
block = {allocate}
{sync}
print("allocated", flush=True)
sys.stdin.readline()
"""


def test_the_real_inventory_names_and_sizes_every_gpu(figures: dict[str, Any]) -> None:
    snapshot = Inventory("").snapshot()
    assert snapshot.available and not snapshot.simulated
    assert snapshot.driver
    for gpu in snapshot.gpus:
        assert gpu.uuid.startswith("GPU-") and gpu.memory_total > 0
        assert gpu.memory_used is not None and 0 <= gpu.memory_used <= gpu.memory_total
    figures["GPUs"] = {
        f"GPU {g.index}": f"{g.name}, {g.memory_total / 2**30:.1f} GiB, MIG {'on' if g.mig_mode else 'off'}, "
        f"MPS {'on' if g.mps else 'off'}"
        for g in snapshot.gpus
    }
    figures["driver"] = snapshot.driver


@pytest.mark.skipif(not (installed("torch") or installed("cupy")), reason="needs torch or cupy to create a context")
def test_a_cuda_process_appears_under_its_pid_with_its_memory(figures: dict[str, Any]) -> None:
    if installed("torch"):
        setup = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
        allocate, sync = "torch.empty(1024 * 2**20, dtype=torch.uint8, device='cuda')", "torch.cuda.synchronize()"
    else:
        setup = "import cupy; cupy.zeros(1); cupy.cuda.Device().synchronize()"
        allocate, sync = "cupy.empty(1024 * 2**20, dtype=cupy.uint8)", "cupy.cuda.Device().synchronize()"
    code = CHILD.format(setup=setup, allocate=allocate, sync=sync)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "context"
        context = _settled(child.pid)
        if context is None:
            pytest.skip(f"NVML does not list pid {child.pid}: this runs in a pid namespace NVML cannot see")
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "allocated"
        after = _settled(child.pid)
        assert after is not None
        grown = after - context
        # The framework's allocator rounds up to its block size: a few MiB, never a second GiB.
        assert 1024 * MiB <= grown <= 1024 * MiB + 64 * MiB
        figures["context size (measured)"] = f"{mib(context)} ({'PyTorch' if installed('torch') else 'CuPy'}, one tiny tensor)"
        figures["NVML per-process accuracy"] = f"1024 MiB allocated -> NVML grew by {mib(grown)}"
    finally:
        child.kill()
        child.wait()


def _settled(pid: int, timeout: float = 10.0) -> int | None:
    """NVML's figure for ``pid`` once two readings agree (the driver updates it lazily)."""
    deadline = time.monotonic() + timeout
    last = nvml_used(pid)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = nvml_used(pid)
        if now == last and now is not None:
            return now
        last = now
    return last
