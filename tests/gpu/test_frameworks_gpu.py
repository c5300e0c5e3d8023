"""On a real NVIDIA GPU: PyTorch, JAX, CuPy (and a GPU TensorFlow) stay inside their slices.

Skipped without a GPU that NVML can see (tests/gpu/conftest.py), and per framework when it is not installed. Each
kernel is a real ipykernel with ``--ext=jupyter_vgpu`` and the environment the provisioner
gives a 1/4 slice; NVML's per-process memory is the judge: what a kernel holds minus its CUDA
context (measured, not assumed) stays within the slice's framework limit.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, Slice, SliceRequest, slice_environment
from jupyter_vgpu.units import MiB

from .harness import FRAMEWORKS, Kernel, fill, installed, needs

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class GPUKernel(Kernel):
    """A kernel holding a slice of the real GPU."""

    def __init__(self, slice_: Slice, env: dict[str, str]) -> None:
        self.slice = slice_
        manager = KernelManager(kernel_name="python3")
        manager.start_kernel(env=env, extra_arguments=["--ext=jupyter_vgpu"])
        super().__init__(manager.client(), manager)

    def nvml_used(self) -> int:
        """Bytes NVML attributes to this kernel's process on its GPU (0 when it holds no context)."""
        snapshot = Inventory("").snapshot()
        gpu = snapshot.find(self.slice.gpus[0])
        assert gpu is not None
        return sum(p.used or 0 for p in gpu.processes if p.pid == self.pid)

    def record(self, name: str) -> dict[str, Any]:
        record: dict[str, Any] = self.eval(
            f"__import__('jupyter_vgpu.kernel.state').kernel.state.current().records[{name!r}].to_dict()"
        )
        return record


@pytest.fixture
def gpu_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``gpu_kernel(fraction=0.25, logical_devices=1)`` -> a :class:`GPUKernel` on GPU 0."""
    monkeypatch.delenv("JUPYTER_VGPU_SIMULATE", raising=False)
    monkeypatch.setenv("JUPYTER_VGPU_LEDGER", str(tmp_path / "ledger.sqlite"))
    ledger = open_ledger()
    started: list[GPUKernel] = []

    def start(fraction: float = 0.25, logical_devices: int = 1, **extra: str) -> GPUKernel:
        request = SliceRequest.parse(fraction=fraction, gpu="0", logical_devices=logical_devices)
        slice_ = ledger.reserve(request, Holder("kernel", "tests/gpu"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "XLA_", "CUPY_", "JUPYTER_VGPU_SIM"))}
        env.update(slice_environment(slice_, ledger_path=str(ledger.path)))
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        env.update(extra)  # what the user's environment adds (the slice's guard then applies)
        kernel = GPUKernel(slice_, env)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.stop()
    ledger.close()


@needs("torch")
def test_importing_torch_creates_no_cuda_context(gpu_kernel: Any) -> None:
    kernel = gpu_kernel()
    assert kernel.run("import torch").ok
    assert kernel.nvml_used() == 0
    assert kernel.record("torch")["status"] == "pending"
    assert kernel.run("torch.zeros(1, device='cuda')").ok
    assert kernel.nvml_used() > 0
    assert kernel.record("torch")["status"] == "applied"


@needs("torch")
def test_torch_allocations_stay_inside_the_slice(gpu_kernel: Any) -> None:
    kernel = gpu_kernel()
    assert kernel.run("import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()").ok
    context = kernel.nvml_used()
    limit = kernel.slice.memory_limit
    allowed = fill(kernel, "torch")
    assert 0.8 * limit <= allowed <= limit
    assert kernel.nvml_used() - context <= limit
    outcome = kernel.run(f"torch.empty({2 * limit}, dtype=torch.uint8, device='cuda')")
    ok, error = outcome.ok, outcome.error
    assert not ok and error is not None
    assert "jupyter-vgpu: PyTorch ran out of GPU memory in this kernel's slice." in ANSI.sub("", "\n".join(error["traceback"]))


@needs("cupy")
def test_cupy_pool_is_limited_to_the_slice(gpu_kernel: Any) -> None:
    kernel = gpu_kernel()
    assert kernel.run("import cupy").ok
    assert kernel.eval("cupy.get_default_memory_pool().get_limit()") == kernel.slice.memory_limit
    assert kernel.run("cupy.zeros(1); cupy.cuda.Device().synchronize()").ok
    context = kernel.nvml_used()
    allowed = fill(kernel, "cupy")
    assert 0.8 * kernel.slice.memory_limit <= allowed <= kernel.slice.memory_limit
    assert kernel.nvml_used() - context <= kernel.slice.memory_limit


@needs("jax")
def test_jax_stays_inside_its_memory_fraction(gpu_kernel: Any) -> None:
    kernel = gpu_kernel()
    assert kernel.run("import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()").ok
    assert kernel.record("jax")["status"] in ("recorded", "applied")
    context = kernel.nvml_used()
    allowed = fill(kernel, "jax")
    assert allowed <= kernel.slice.memory_limit
    assert kernel.nvml_used() - context <= kernel.slice.memory_limit * 1.02  # XLA rounds its fraction


@needs("jax")
def test_jax_async_allocator_set_by_the_user_is_guarded_and_the_fraction_holds(gpu_kernel: Any) -> None:
    """Issue 24: XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async bypasses JAX's memory fraction; in a slice
    it is unset, so the allocations stop at the slice's limit."""
    kernel = gpu_kernel(XLA_PYTHON_CLIENT_ALLOCATOR="cuda_async")
    assert kernel.eval("__import__('os').environ.get('XLA_PYTHON_CLIENT_ALLOCATOR')") is None
    assert kernel.run("import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()").ok
    context = kernel.nvml_used()
    fill(kernel, "jax")
    assert kernel.nvml_used() - context <= kernel.slice.memory_limit * 1.02


def test_tensorflow_gpu_gets_logical_devices_with_the_slices_limit(gpu_kernel: Any) -> None:
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    kernel = gpu_kernel(logical_devices=2)
    assert kernel.run("import tensorflow as tf").ok
    if not kernel.eval("len(tf.config.list_physical_devices('GPU'))"):
        pytest.skip("this TensorFlow build sees no GPU")
    assert kernel.record("tensorflow")["status"] == "applied"
    assert kernel.eval("len(tf.config.list_logical_devices('GPU'))") == 2
    assert kernel.eval("tf.distribute.MirroredStrategy().num_replicas_in_sync") == 2


def test_three_frameworks_side_by_side_on_one_gpu(gpu_kernel: Any) -> None:
    present = {name: (setup, allocate) for name, (setup, allocate, _) in FRAMEWORKS.items() if installed(name)}
    if len(present) < 2:
        pytest.skip("needs at least two of torch, cupy, jax")
    kernels = {name: gpu_kernel(fraction=0.25) for name in present}
    for name, (setup, allocate) in present.items():
        kernel = kernels[name]
        block = int(kernel.slice.memory_limit * 0.85)
        outcome = kernel.run(f"{setup}\n_block = {allocate.format(n=block)}")
        ok, error = outcome.ok, outcome.error
        assert ok, f"{name} could not allocate 85% of its slice next to the others: {error}"
    for name, kernel in kernels.items():
        assert kernel.nvml_used() <= kernel.slice.memory_per_gpu + 512 * MiB, f"{name} is over its slice"
    print({name: kernel.nvml_used() for name, kernel in kernels.items()}, file=sys.stderr)
