"""On the real NVML ABI (NVIDIA's mock, an r550 driver) memory partitioning is absent: the call
r615 added (``nvmlDeviceGetMemoryLimits_v1``) is not in the library, so GPUs served by MPS offer
the MPS tier, even where this process could manage cgroups."""

from __future__ import annotations

from pathlib import Path

from .conftest import Node


def test_an_r550_driver_offers_mps_not_memory_partitioning(h100: Node, tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory dmem\n")  # a cgroup v2 root as detection sees one
    h100.env.update({"JUPYTER_VGPU_CGROUP_ROOT": str(root), "JUPYTER_VGPU_MPS": "on"})
    devices = h100.status()["gpus"]
    assert len(devices) == 8 and {d["tier"] for d in devices} == {"hard (MPS)"}
