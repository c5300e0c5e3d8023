"""PyTorch, JAX and CuPy kernels at 1/4 of one card each, started through the real provisioner
(a ``vgpu-provisioner`` kernelspec and jupyter_client): each stays inside its slice plus its
CUDA context, and four kernels sharing the card slow a matmul loop down by a measured factor."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.units import MiB

from .harness import FRAMEWORKS, Kernel, fill, gib, installed, mib, require_host_pids, write_kernelspec

#: NVML's figure may exceed framework allocations by allocator rounding and library workspaces.
TOLERANCE = 64 * MiB

BENCH = """
def _bench(steps={steps}):
    import time, torch
    a = torch.randn(4096, 4096, device='cuda'); b = torch.randn(4096, 4096, device='cuda')
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        a @ b
    torch.cuda.synchronize()
    return time.perf_counter() - start
"""


@pytest.fixture
def quarter_kernels(real_gpu: Path) -> Iterator[Any]:
    """``quarter_kernels(n)`` -> n kernels of a "1/4 GPU" kernelspec on GPU 0."""
    name = write_kernelspec(real_gpu, "vgpu-quarter", {"gpu_fraction": 0.25, "gpu": "0"})
    started: list[Kernel] = []

    def start(count: int) -> list[Kernel]:
        for _ in range(count):
            started.append(Kernel.start(name))
        return started[-count:]

    yield start
    for kernel in started:
        kernel.stop()


def test_torch_jax_and_cupy_kernels_share_one_gpu_each_inside_its_slice(
    quarter_kernels: Any, figures: dict[str, Any]
) -> None:
    present = [name for name in FRAMEWORKS if installed(name)]
    if len(present) < 2:
        pytest.skip("needs at least two of torch, jax, cupy")
    kernels = dict(zip(present, quarter_kernels(len(present))))
    results: dict[str, str] = {}
    for name, kernel in kernels.items():
        assert kernel.env("JUPYTER_VGPU_SLICE_ID"), f"{name}: the provisioner gave the kernel no slice"
        assert kernel.env("JUPYTER_VGPU_FRACTION") == "0.25"
        outcome = kernel.run(FRAMEWORKS[name][0])
        ok, error = outcome.ok, outcome.error
        assert ok, error
    contexts = {name: require_host_pids(kernel.pid) for name, kernel in kernels.items()}
    for name, kernel in kernels.items():
        limit = int(kernel.env("JUPYTER_VGPU_MEMORY_LIMIT"))
        reserved = int(kernel.env("JUPYTER_VGPU_MEMORY_RESERVED"))
        allowed = fill(kernel, name)
        used = require_host_pids(kernel.pid)
        context = contexts[name]
        tier = kernel.env("JUPYTER_VGPU_TIER")
        results[name] = (
            f"limit {gib(limit)}, framework allowed {gib(allowed)} ({allowed / limit:.0%}), NVML {gib(used)} = "
            f"context {mib(context)} + {gib(used - context)} ({(used - context) / limit:.1%} of limit); "
            f"slice {gib(reserved)}; tier {tier}"
        )
        assert allowed <= limit, f"{name} allocated past its framework limit"
        assert used - context <= limit + TOLERANCE, f"{name}: {results[name]}"
    figures["memory accuracy per kernel (1/4 slices, side by side)"] = results
    figures["context size per framework"] = {name: mib(size) for name, size in contexts.items()}


@pytest.mark.skipif(not installed("torch"), reason="the matmul loop uses torch")
def test_four_sharing_kernels_slow_a_matmul_loop(quarter_kernels: Any, figures: dict[str, Any]) -> None:
    kernels = quarter_kernels(4)
    for kernel in kernels:
        outcome = kernel.run(BENCH.format(steps=200) + "\n_bench(20)", timeout=600)  # define, warm up
        assert outcome.ok, outcome.error
    alone = min(float(kernels[0].eval("_bench()")) for _ in range(2))
    started = time.perf_counter()
    pending = [(kernel, kernel.submit("print(_bench())")) for kernel in kernels]
    shared = []
    for kernel, msg_id in pending:
        outcome = kernel.collect(msg_id, timeout=600)
        ok, out, error = outcome.ok, outcome.stdout, outcome.error
        assert ok, error
        shared.append(float(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - started
    slowdown = sum(shared) / len(shared) / alone
    figures["slowdown, 4 sharing kernels vs 1 alone"] = (
        f"{slowdown:.2f}x per kernel (alone {alone:.2f} s for 200 4096^2 matmuls; together "
        f"{', '.join(f'{s:.2f}' for s in shared)} s; wall {wall:.2f} s; tier {kernels[0].env('JUPYTER_VGPU_TIER')})"
    )
    assert slowdown > 1.0  # the card is shared, not multiplied
