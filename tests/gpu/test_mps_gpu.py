"""The MPS tier on a real GPU: a control daemon started for the test (root, and only where
``nvidia-cuda-mps-control`` exists), slices placed with the MPS tier, a kernel that lifts its
framework limit stopped by the pinned memory limit, and the MPS server never counted as foreign."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.holders import attribute

from .harness import Kernel, fill, gib, installed, mps_control_daemon, write_kernelspec


@pytest.fixture
def mps_daemon(real_gpu: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An MPS control daemon (harness.mps_control_daemon) whose variables this test's processes have."""
    if any(g.mig_mode for g in Inventory("").snapshot().gpus):
        pytest.skip("a GPU is in MIG mode; MIG slices take precedence over MPS")
    with mps_control_daemon(tmp_path) as variables:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        yield Path(variables["CUDA_MPS_PIPE_DIRECTORY"])


@pytest.mark.skipif(not installed("torch"), reason="the kernel uses torch")
def test_mps_slices_get_a_pinned_limit_that_user_code_cannot_lift(
    mps_daemon: Path, real_gpu: Path, figures: dict[str, Any]
) -> None:
    snapshot = Inventory("").snapshot()
    assert snapshot.gpus[0].mps, "the daemon was not detected"
    name = write_kernelspec(real_gpu, "vgpu-quarter-mps", {"gpu_fraction": 0.25, "gpu": "0"})
    kernel = Kernel.start(name)
    try:
        assert kernel.env("JUPYTER_VGPU_TIER") == "mps"
        reserved = int(kernel.env("JUPYTER_VGPU_MEMORY_RESERVED"))
        assert kernel.env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == f"0={reserved // 2**20}M"
        outcome = kernel.run(
            "import torch; torch.zeros(1, device='cuda'); torch.cuda.set_per_process_memory_fraction(1.0)"
        )
        assert outcome.ok, outcome.error
        allowed = fill(kernel, "torch", chunk=128 * 2**20)
        # The pinned limit holds although the framework limit was lifted.
        assert allowed <= reserved
        snapshot = Inventory("").snapshot()
        gpu = snapshot.gpus[0]
        servers = [p for p in gpu.processes if p.mps_server]
        ledger = open_ledger()
        try:
            slices = ledger.slices()
            foreign = attribute(snapshot, {s.id: s.pid for s in slices}).foreign
        finally:
            ledger.close()
        figures["MPS tier"] = (
            f"slice {gib(reserved)}, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={kernel.env('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')}; "
            f"torch limit lifted, then allocated {gib(allowed)} ({allowed / reserved:.0%} of the slice); "
            f"MPS server pids {[p.pid for p in servers]} ({gib(sum(p.used or 0 for p in servers))}) not foreign; "
            f"foreign on GPU 0: {gib(foreign.get(gpu.uuid, 0))}"
        )
        assert foreign.get(gpu.uuid, 0) == 0 or not servers
    finally:
        kernel.stop()


def test_mps_tier_is_recorded_with_the_slice(mps_daemon: Path) -> None:
    ledger = open_ledger()
    try:
        slice_ = ledger.reserve(SliceRequest.parse("1/4", gpu="0"), Holder("command", "tests/gpu mps"))
        assert slice_.tier == "mps" and slice_.tier_text == "hard (MPS)"
        ledger.release(slice_.id)
    finally:
        ledger.close()
