"""GPU inventory from the simulated NVML (the real one is exercised in tests/gpu)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_vgpu.errors import InvalidConfig
from jupyter_vgpu.gpus import Inventory, SimulatedNVML
from jupyter_vgpu.units import GiB


def test_short_spec_gives_identical_idle_gpus_with_stable_uuids() -> None:
    first = Inventory("2x16GiB").snapshot()
    again = Inventory("2x16GiB").snapshot()
    assert first.simulated and first.available
    assert [g.memory_total for g in first.gpus] == [16 * GiB, 16 * GiB]
    assert [g.uuid for g in first.gpus] == [g.uuid for g in again.gpus]
    assert len({g.uuid for g in first.gpus}) == 2
    assert all(g.uuid.startswith("GPU-") for g in first.gpus)


def test_json_spec_gives_devices_and_per_process_usage(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(
        json.dumps(
            {
                "devices": [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", "utilization": 35}, {"memory": "16GiB"}],
                "processes": [{"gpu": 0, "pid": 4242, "memory": "3GiB", "utilization": 20}, {"gpu": 1, "pid": 7}],
            }
        )
    )
    snap = Inventory(str(path)).snapshot()
    a100, small = snap.gpus
    assert a100.name == "NVIDIA A100-SXM4-40GB" and a100.utilization == 35
    assert a100.memory_used == 3 * GiB
    assert [(p.pid, p.used, p.utilization) for p in a100.processes] == [(4242, 3 * GiB, 20)]
    assert [(p.pid, p.used) for p in small.processes] == [(7, None)]  # NVML may not know a process's memory


def test_json_file_changes_are_seen_without_restarting(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"devices": [{"memory": "16GiB"}]}))
    inventory = Inventory(str(path))
    assert inventory.snapshot().gpus[0].memory_used == 0
    path.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": 1, "memory": "5GiB"}]}))
    assert inventory.snapshot().gpus[0].memory_used == 5 * GiB


@pytest.mark.parametrize(
    ("spec", "message"),
    [("banana", "not a device spec"), ("0x16GiB", "asks for 0 GPUs"), ("2x16XB", "not a device spec")],
)
def test_bad_simulation_specs_say_what_is_allowed(spec: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        Inventory(spec).snapshot()


def test_bad_simulation_files_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(InvalidConfig, match="broken.json cannot be read as JSON"):
        Inventory(str(path)).snapshot()
    path.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 5, "pid": 1}]}))
    with pytest.raises(InvalidConfig, match="names gpu 5, which is not listed"):
        Inventory(str(path)).snapshot()


def test_an_endless_simulation_file_is_refused_after_a_bounded_read() -> None:
    """JUPYTER_VGPU_SIMULATE=/dev/zero grew the process to 7 GB in 3 s (issue 19)."""
    with pytest.raises(InvalidConfig, match="/dev/zero is larger than 4 MiB"):
        Inventory("/dev/zero").snapshot()


def test_failing_nvml_queries_become_not_available() -> None:
    class Flaky(SimulatedNVML):
        def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
            raise self.NVMLError(3)

        def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[object]:
            raise self.NVMLError(3)

    gpu = Inventory("1x16GiB", nvml=Flaky("1x16GiB")).snapshot().gpus[0]
    assert gpu.utilization is None
    assert gpu.processes == ()
    assert gpu.memory_total == 16 * GiB


def test_a_refusal_from_nvidia_ml_py_reads_as_not_available() -> None:
    import pynvml

    class Refusing(SimulatedNVML):
        def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # NVMLError_NotSupported

    gpu = Inventory("1x16GiB", nvml=Refusing("1x16GiB")).snapshot().gpus[0]
    assert gpu.utilization is None
    assert gpu.memory_total == 16 * GiB


@pytest.mark.parametrize("bug", [TypeError("bad argument"), AttributeError("no such field"), KeyError("pid")])
def test_a_bug_inside_an_nvml_query_is_not_read_as_not_available(bug: Exception) -> None:
    class Broken(SimulatedNVML):
        def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
            raise bug

    with pytest.raises(type(bug)):
        Inventory("1x16GiB", nvml=Broken("1x16GiB")).snapshot()


def test_no_driver_is_a_clear_no_gpu_state() -> None:
    snapshot = Inventory("").snapshot()  # this machine has no NVIDIA driver
    assert not snapshot.available
    assert not snapshot.simulated
    assert snapshot.gpus == ()
    assert "GPU" in (snapshot.message or "")


def test_telemetry_is_read_only_when_asked_and_follows_the_load(tmp_path: Path) -> None:
    """Power, temperature and PCIe throughput (the dashboard's series): the simulated board
    draws more and runs hotter as its utilisation rises, within its datasheet limit."""
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", "utilization": 0}]}))
    inventory = Inventory(str(spec))
    plain = inventory.snapshot().gpus[0]
    assert (plain.power_draw, plain.temperature, plain.pcie_rx) == (None, None, None)  # not asked: not read
    idle = inventory.snapshot(telemetry=True).gpus[0]
    spec.write_text(json.dumps({"devices": [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", "utilization": 90}]}))
    busy = Inventory(str(spec)).snapshot(telemetry=True).gpus[0]
    assert idle.power_limit == busy.power_limit == 400.0
    assert idle.power_draw is not None and busy.power_draw is not None
    assert 0 < idle.power_draw < 100 < busy.power_draw <= 400
    assert idle.temperature is not None and busy.temperature is not None and idle.temperature + 30 < busy.temperature
    assert idle.pcie_rx is not None and busy.pcie_rx is not None and busy.pcie_rx > 100 * idle.pcie_rx


def test_a_simulation_file_caught_half_written_is_read_again_at_the_next_snapshot(tmp_path: Path) -> None:
    """A server that started while the file was being written kept 'no GPU' for ever."""
    spec = tmp_path / "gpus.json"
    spec.write_text('{"devices": [')  # half-written
    inventory = Inventory(str(spec))
    with pytest.raises(InvalidConfig):
        inventory.snapshot()
    spec.write_text(json.dumps({"devices": [{"name": "Simulated T4", "memory": "4GiB"}]}))
    snapshot = inventory.snapshot()
    assert snapshot.available and snapshot.gpus[0].memory_total == 4 * GiB


def test_processes_that_say_what_they_hold_on_simulated_gpus_are_listed_there(tmp_path: Path) -> None:
    """What a sliced process's frameworks hold in host memory, written beside the ledger, is its
    GPU memory in the simulated NVML (issue 33); a file of an ended process counts for nothing."""
    import os
    import subprocess
    import sys

    from jupyter_vgpu.gpus.simulated_use import use_folder, write_use

    folder = use_folder(tmp_path)
    inventory = Inventory("2x16GiB", use_folder=folder)
    first, second = inventory.snapshot().gpus
    write_use(folder, {second.uuid: 3 << 30}, {second.uuid: 40})
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(ended.stdout)
    (folder / f"{gone}.json").write_text(json.dumps({"pid": gone, "stamp": "1.00", "used": {first.uuid: 1 << 30}}))
    fresh = Inventory("2x16GiB", use_folder=folder).snapshot()
    assert [(p.pid, p.used) for p in fresh.gpus[1].processes] == [(os.getpid(), 3 << 30)]
    assert fresh.gpus[1].memory_used == 3 << 30 and fresh.gpus[1].utilization == 40
    assert fresh.gpus[0].processes == () and fresh.gpus[0].memory_used == 0
    assert not (folder / f"{gone}.json").exists()
    assert Inventory("2x16GiB").snapshot().gpus[1].memory_used == 0  # no folder: the spec alone


def test_simulated_machines_with_names_have_gpus_of_their_own(tmp_path: Path) -> None:
    """Two simulated nodes on one machine (the cluster tests): their GPUs' UUIDs differ, as real
    GPUs' do, every process of a node agrees on them, and the unnamed keep the UUIDs they had."""
    from jupyter_vgpu.gpus.simulate_spec import describe, simulated_node
    from jupyter_vgpu.metrics.series import machine_name

    unnamed = [g.uuid for g in Inventory("2x16GiB").snapshot().gpus]
    node_a = [g.uuid for g in Inventory("2x16GiB@node-a").snapshot().gpus]
    node_b = [g.uuid for g in Inventory("2x16GiB@node-b").snapshot().gpus]
    assert len(set(unnamed) | set(node_a) | set(node_b)) == 6
    assert node_a == [g.uuid for g in Inventory(" 2x16GiB@node-a ").snapshot().gpus]
    assert simulated_node("2x16GiB@node-a") == "node-a" and simulated_node("2x16GiB") is None
    assert describe("2x16GiB@node-a") == "2 x 16 GiB on node-a"
    assert machine_name("2x16GiB@node-a") == "node-a" and machine_name("2x16GiB") == machine_name()
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"node": "node-c", "devices": [{"memory": "16GiB"}, {"memory": "16GiB"}]}))
    from_file = [g.uuid for g in Inventory(str(path)).snapshot().gpus]
    assert simulated_node(str(path)) == "node-c" and not set(from_file) & set(node_a + unnamed)
    for spec in ("2x16GiB@", "2x16GiB@-a", "2x16GiB@a:b", "2x16GiB@" + "n" * 64):
        with pytest.raises(InvalidConfig, match=r"names the machine .*; a machine's name is 1 to 63 letters, digits"):
            Inventory(spec).snapshot()
