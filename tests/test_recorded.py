"""The simulated NVML fed with outputs of real drivers (tests/fixtures/recorded, each citing its
source): MIG ids as drivers number them, compute instances sharing a GPU instance's memory, the
parent GPU's memory refused in a MIG container, the MPS server, and utilisation samples."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.errors import SliceUnavailable
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.gpus.simulated_nvml import NVML_ERROR_NO_PERMISSION, NVMLError, SimulatedNVML
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.slices import Holder, SliceRequest, Tier

RECORDED = Path(__file__).parent / "fixtures" / "recorded"
FIXTURES = sorted(p.name for p in RECORDED.glob("*.json"))
GiB = 1024**3
MiB = 1024**2


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((RECORDED / name).read_text()))


def copy(tmp_path: Path, name: str, **changes: Any) -> Path:
    """A fixture to change in a test (processes to add, a device to make privileged)."""
    data = load(name)
    data.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def ledger_on(tmp_path: Path, spec: Path) -> SQLiteLedger:
    return SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(str(spec)), context_allowance=300 * MiB)


@pytest.mark.parametrize("name", FIXTURES)
def test_every_recorded_layout_is_accepted_as_the_driver_showed_it(name: str) -> None:
    data = load(name)
    assert data["source"]["raw"] and (data["source"].get("url") or data["source"].get("url_note")), "cite the source"
    snapshot = Inventory(str(RECORDED / name)).snapshot()
    assert snapshot.available and len(snapshot.gpus) == len(data["devices"])
    for gpu, device in zip(snapshot.gpus, data["devices"]):
        recorded = device.get("mig")
        if recorded is None:
            assert not gpu.mig_mode
            continue
        assert gpu.mig_mode and [m.profile for m in gpu.mig_devices] == [m["profile"] for m in recorded]
        for mig, entry in zip(gpu.mig_devices, recorded):
            if "gpu_instance_id" in entry:
                assert (mig.gpu_instance_id, mig.compute_instance_id) == (entry["gpu_instance_id"], entry["compute_instance_id"])
            if "uuid" in entry:
                assert mig.uuid == entry["uuid"]
    for proc in data.get("processes", []):
        gpu = snapshot.gpus[proc["gpu"]]
        (seen,) = [p for p in gpu.processes if p.pid == proc["pid"]]
        assert seen.mig_device == proc.get("mig")
        assert seen.mps_server == (proc["name"] == "nvidia-cuda-mps-server")


def test_gpu_instance_ids_are_kept_as_the_driver_numbers_them_zero_included() -> None:
    ids = {m.gpu_instance_id for m in Inventory(str(RECORDED / "go-nvml-60-a100-pcie-gi-2-3-9.json")).snapshot().gpus[0].mig_devices}
    assert ids == {2, 3, 9}
    (vgpu,) = Inventory(str(RECORDED / "vgpu-mig-backed-gi0-a100x-2-10c.json")).snapshot().gpus
    assert [(m.gpu_instance_id, m.compute_instance_id) for m in vgpu.mig_devices] == [(0, 0)]


class _ParentListOnly(SimulatedNVML):
    """A privileged reader whose per-MIG-device process lists fail: the processes' own
    (GPU instance, compute instance) ids must find their MIG device."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Any:
        if not isinstance(handle, int):
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        return super().nvmlDeviceGetComputeRunningProcesses(handle)


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("vgpu-mig-backed-gi0-a100x-2-10c.json", 0),  # GPU instance 0 is a real one
        ("mig-guide-a100-3x1c-3g20gb-shared-gi.json", 2),  # three compute instances in GPU instance 1
    ],
)
def test_a_process_is_found_in_its_mig_device_by_gpu_and_compute_instance(tmp_path: Path, name: str, device: int) -> None:
    data = load(name)
    data["devices"][0]["privileged"] = True
    mig = data["devices"][0]["mig"][device]
    data["processes"] = [{"gpu": 0, "pid": 4242, "memory": "153MiB", "mig": mig.get("uuid", device)}]
    path = tmp_path / name
    path.write_text(json.dumps(data))
    (gpu,) = Inventory(str(path), nvml=_ParentListOnly(str(path))).snapshot().gpus
    (proc,) = gpu.processes
    assert proc.mig_device == gpu.mig_devices[device].uuid


def test_compute_instances_sharing_a_gpu_instance_never_hand_its_memory_out_twice(tmp_path: Path) -> None:
    idle = copy(tmp_path, "mig-guide-a100-3x1c-3g20gb-shared-gi.json", processes=[])  # its programs ended
    ledger = ledger_on(tmp_path, idle)
    first = ledger.reserve(SliceRequest.parse(memory="10GiB"), Holder.command("first"))
    assert first.tier is Tier.MIG
    with pytest.raises(SliceUnavailable, match="free MIG devices: none"):
        ledger.reserve(SliceRequest.parse(memory="10GiB"), Holder.command("second"))  # the other 2 CIs share GI 1
    guide = SQLiteLedger(tmp_path / "guide.sqlite", Inventory(str(RECORDED / "mig-guide-8gpu-device-names.json")), context_allowance=300 * MiB)
    six = [guide.reserve(SliceRequest.parse(memory="15GiB", gpu="4"), Holder.command(f"k{i}")) for i in range(2)]
    assert len({s.mig_devices[0] for s in six}) == 2  # 6 x 1c.3g.20gb are 2 GPU instances: 2 slices
    with pytest.raises(SliceUnavailable):
        guide.reserve(SliceRequest.parse(memory="15GiB", gpu="4"), Holder.command("third"))


def test_the_processes_of_a_busy_compute_instance_take_its_whole_gpu_instance(tmp_path: Path) -> None:
    # The guide's recording: BlackScholes runs in all three compute instances of GPU instance 1.
    ledger = ledger_on(tmp_path, RECORDED / "mig-guide-a100-3x1c-3g20gb-shared-gi.json")
    (gpu,) = ledger.occupancy().gpus
    assert all(m.in_use_without_slice for m in gpu.mig) and gpu.free == 0


def test_a_gpu_whose_memory_query_is_refused_is_sized_by_its_mig_devices(tmp_path: Path) -> None:
    name = "nvidia-container-toolkit-842-mig-parent-memory-no-permission.json"
    (gpu,) = Inventory(str(RECORDED / name)).snapshot().gpus
    assert gpu.memory_total == 40448 * MiB and gpu.mig_mode
    held = ledger_on(tmp_path, RECORDED / name).reserve(SliceRequest.parse(memory="20GiB"), Holder.command("in the container"))
    assert held.mig_profiles == ("3g.40gb",)


def test_the_parent_process_list_needs_privileges_in_mig_mode() -> None:
    nvml = SimulatedNVML(str(RECORDED / "mig-guide-a100-3x1c-3g20gb-shared-gi.json"))
    with pytest.raises(NVMLError) as refused:
        nvml.nvmlDeviceGetComputeRunningProcesses(0)
    assert refused.value.value == NVML_ERROR_NO_PERMISSION


@pytest.mark.parametrize("name", ["mps-t4-azure-stack-edge.json", "mps-polaris-one-server-four-a100.json"])
def test_the_mps_server_is_never_memory_used_outside_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    data = load(name)
    ledger = ledger_on(tmp_path, RECORDED / name)
    gpus = ledger.occupancy().gpus
    clients: dict[int, int] = {}
    for proc in data["processes"]:
        if proc["name"] != "nvidia-cuda-mps-server":
            clients[proc["gpu"]] = clients.get(proc["gpu"], 0) + int(proc["memory"].removesuffix("MiB")) * MiB
    for index, gpu in enumerate(gpus):
        servers = [p for p in gpu.gpu.processes if p.mps_server]
        assert len(servers) == 1 and 25 * MiB <= (servers[0].used or 0) <= 30 * MiB
        assert gpu.foreign == clients.get(index, 0)  # the clients belong to nobody here; the server never counts
    assert ledger.reserve(SliceRequest.parse("1/4"), Holder.command("x")).tier is Tier.MPS


def test_utilisation_is_the_newest_sample_not_a_stale_peak(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({
        "devices": [{"memory": "16GiB"}],
        "processes": [{"gpu": 0, "pid": os.getpid(), "memory": "1GiB", "utilization": 5,
                       "utilization_history": [[1.5, 100], [0.5, 90]]}],
    }))  # fmt: skip
    inventory = Inventory(str(spec))
    (proc,) = inventory.snapshot().gpus[0].processes
    assert proc.utilization == 5  # NVML's buffer also holds 100 and 90 from moments ago
    spec.write_text(spec.read_text().replace('"utilization": 5', '"utilization": 0'))
    os.utime(spec, (1, 1))
    (proc,) = inventory.snapshot().gpus[0].processes
    assert proc.utilization == 0  # no newer sample: idle, not the old peak


def test_driver_reserved_memory_is_nobodys(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"memory": "80GiB", "reserved": "1GiB", "compute_capability": "9.0"}]}))
    ledger = SQLiteLedger(tmp_path / "l.sqlite", Inventory(str(spec)))  # allowance by compute capability
    (gpu,) = ledger.occupancy().gpus
    assert (gpu.free, gpu.gpu.compute_capability) == (79 * GiB, (9, 0))
    quarter = ledger.reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    assert quarter.memory == (79 * GiB // 4,) and quarter.context_allowance == 480 * MiB
    assert ledger.reserve(SliceRequest.parse("3/4"), Holder.command("the rest"))

