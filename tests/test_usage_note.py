"""How a slice's use was found, in one sentence that says only what is true: measured by NVML on
real GPUs, the simulation's on simulated ones (issue 33: the status tooltip said both)."""

from __future__ import annotations

import pytest

from jupyter_vgpu.gpus.model import GPU, Snapshot
from jupyter_vgpu.slices import Slice
from jupyter_vgpu.slices.holders import Attribution
from jupyter_vgpu.slices.request import SliceRequest
from jupyter_vgpu.slices.usage import MEASURED, usage_note

GiB = 1024**3


def one_slice() -> Slice:
    return Slice(
        id="abc123", owner="ada", uid=1000, holder_kind="kernel", holder="k1", pid=42, pid_start=None,
        gpus=("GPU-0",), gpu_indices=(0,), memory=(4 * GiB,), memory_total=(16 * GiB,),
        context_allowance=0, logical_devices=1, request=SliceRequest(fraction=0.25),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("simulated", "note"),
    [
        (False, "Measured by NVML: the memory of this kernel's GPU processes."),
        (True, "Simulated (JUPYTER_VGPU_SIMULATE): the memory of this kernel's GPU processes, which is what their "
               "frameworks hold in the host's memory (or the simulation file's figure)."),
    ],
)
def test_a_measured_use_names_where_it_comes_from(simulated: bool, note: str) -> None:
    gpu = GPU(index=0, uuid="GPU-0", name="A100", memory_total=16 * GiB, memory_used=GiB, utilization=0, mig_mode=False)
    snapshot = Snapshot(gpus=(gpu,), simulated=simulated, available=True)
    attribution = Attribution(used={"abc123": {"GPU-0": GiB}})
    assert usage_note(one_slice(), MEASURED, attribution, snapshot) == note
    assert ("NVML" in usage_note(one_slice(), MEASURED, Attribution(), snapshot)) is not simulated
