"""jupyter-vgpu on NVIDIA's mock NVML: inventory, status, placement, run, kernels, the server."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import KERNEL_NAME, JupyterProcess, start_jupyter, wait_for, write_sliced_kernelspec

from .conftest import GiB, MiB, Node, process

pytestmark = pytest.mark.slow

def test_the_h100_node_is_read_through_nvml(h100: Node) -> None:
    data = h100.status()
    assert data["simulated"] is False and data["available"] is True
    assert data["gpus_source"] == "NVML"
    gpus = data["gpus"]
    assert len(gpus) == 8
    first = gpus[0]
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["uuid"] == "GPU-01000100-0000-0000-0000-000000000000"
    assert first["memory_total"] == 80 * GiB and first["memory_reserved_by_driver"] == 1 * GiB
    assert first["compute_capability"] == "9.0" and first["mig_mode"] is False
    assert first["memory_free"] == 79 * GiB  # what the driver keeps is nobody's
    assert len({g["uuid"] for g in gpus}) == 8


def test_the_a100_node_is_read_through_nvml(a100: Node) -> None:
    gpus = a100.status()["gpus"]
    assert len(gpus) == 8 and {g["name"] for g in gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert gpus[0]["compute_capability"] == "8.0"
    assert gpus[0]["memory_free"] == 40 * GiB - 611319808


def test_run_gets_a_slice_of_a_real_gpu_with_the_allowance_of_its_compute_capability(h100: Node) -> None:
    shown = h100.vgpu(
        "run", "-q", "-p", "1/4", "--", sys.executable, "-c",
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['JUPYTER_VGPU_CONTEXT_ALLOWANCE'],"
        " os.environ['JUPYTER_VGPU_MEMORY_RESERVED'])",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    device, allowance, reserved = shown.stdout.split()
    assert device == "GPU-01000100-0000-0000-0000-000000000000"
    assert int(allowance) == 480 * MiB  # compute capability 9.0
    assert int(reserved) == int(79 * GiB / 4)
    by_index = h100.vgpu("run", "-q", "--gpu", "3", "--device-names", "index", "-p", "1/2", "--", "printenv", "CUDA_VISIBLE_DEVICES")
    assert by_index.stdout.strip() == "3", by_index.stderr


def test_memory_no_visible_process_accounts_for_is_not_handed_out(h100: Node) -> None:
    # 40 GiB in use on GPU 0 and an empty process list: what a container sees of its neighbours.
    h100.set({0: {"memory": {"used_bytes": 40 * GiB}}})
    time.sleep(0.3)
    refused = h100.vgpu("run", "--gpu", "0", "-p", "0.75", "--", "true")
    assert refused.returncode != 0
    assert "39.0 GiB free of 80.0 GiB; 1.0 GiB kept by the driver; 40.0 GiB used by processes without a slice" in refused.stderr
    assert h100.vgpu("run", "--gpu", "0", "-p", "0.45", "--", "true").returncode == 0
    assert h100.status()["gpus"][0]["memory_foreign"] == 40 * GiB


def test_a_commands_child_process_counts_against_its_slice(h100: Node) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-q", "-p", "1/4", "--", sys.executable, "-c",
         "import subprocess, sys, time\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
         "print(child.pid, flush=True)\ntime.sleep(60)"],
        env=h100.env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        child = int(holder.stdout.readline())
        h100.set({0: {"processes": [process(child, 3000, sm=40)], "memory": {"used_bytes": 3000 * MiB}}})
        deadline = time.monotonic() + 10
        while True:
            data = h100.status()
            (row,) = data["slices"]
            if row["memory_used"]:
                break
            assert time.monotonic() < deadline, data
            time.sleep(0.3)
        assert row["memory_used"] == 3000 * MiB
        assert data["gpus"][0]["memory_foreign"] == 0  # the child is the slice's, not a stranger
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=20)


@pytest.fixture
def server(h100: Node, tmp_path: Path) -> Any:
    write_sliced_kernelspec(Path(h100.env["JUPYTER_DATA_DIR"]))
    running = start_jupyter(
        tmp_path,
        env=h100.env,
        args=["--VGPUServer.monitor_interval=0.2", "--VGPUServer.over_limit_action=interrupt", "--VGPUServer.over_limit_grace=0"],
    )
    yield running
    running.stop(timeout=20)


def test_a_sliced_kernel_on_the_mock_is_measured_watched_and_exported(h100: Node, server: JupyterProcess) -> None:
    status, kernel = server.api("POST", "api/kernels", {"name": KERNEL_NAME})
    assert status == 201, kernel

    def view() -> dict[str, Any] | None:
        code, reply = server.api("GET", f"api/vgpu/kernels/{kernel['id']}")
        return reply["slice"] if code == 200 and reply["slice"] and reply["slice"]["pid"] else None

    def kernels_own() -> dict[str, Any] | None:
        # Until the kernel's process is attached (post_launch) the slice's pid is the server's: the
        # mock's process entry must name the kernel's, or NVML's figure is never the slice's (a
        # loaded CI machine read it in that window and waited 60 s for a figure that never came).
        held = view()
        return held if held and _is_kernel(held["pid"]) else None

    held = wait_for(kernels_own, "the kernel's slice, attached to the kernel's process")
    assert held["gpus"] == ["GPU-01000100-0000-0000-0000-000000000000"] and held["context_allowance"] == 480 * MiB
    reserved = held["memory_reserved"]
    over = reserved // MiB + 4096  # 4 GiB beyond its slice
    h100.set({0: {"processes": [process(held["pid"], over, sm=70)], "memory": {"used_bytes": over * MiB}}})
    measured = wait_for(lambda: (v := view()) and v["memory_used"] and v, "NVML's figure for the kernel")
    assert measured["usage_source"] == "measured" and measured["memory_used"] == over * MiB
    assert measured["state"] == "over"
    events = wait_for(lambda: (v := view()) and v["watchdog"]["events"], "the watchdog's action")
    assert events[0]["action"] == "interrupt" and events[0]["ok"], events
    status, devices = server.api("GET", "api/vgpu/devices")
    gpu = devices["devices"][0]
    assert gpu["memory_over_use"] == over * MiB - reserved and gpu["memory_free"] == 79 * GiB - over * MiB
    metrics = _metrics(server)
    assert metrics[f'jupyter_vgpu_slice_memory_used_bytes{{kernel_id="{kernel["id"]}",slice="{held["id"]}"}}'] == over * MiB
    assert metrics[f"jupyter_vgpu_gpu_memory_free_bytes{{{_gpu0()}}}"] == gpu["memory_free"]
    server.api("DELETE", f"api/kernels/{kernel['id']}")


def test_the_dashboard_reads_power_temperature_and_pcie_through_nvml(h100: Node, server: JupyterProcess) -> None:
    """The H100 profile's board: 95 W of a 700 W limit, 34 °C, an idle PCIe link."""

    def history() -> dict[str, Any] | None:
        code, reply = server.api("GET", "api/vgpu/history")
        return reply if code == 200 and reply["gpus"] and reply["gpus"][0]["points"] else None

    reply = wait_for(history, "the dashboard's first point")
    assert reply["simulated"] is False and len(reply["gpus"]) == 8
    gpu = reply["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["power_limit"] == 700.0
    point = gpu["points"][-1]
    assert (point["power"], point["temp"], point["pcie_tx"], point["pcie_rx"]) == (95, 34, 0, 0)
    assert point["used"] == 0 and point["reserved"] == 0
    metrics = _metrics(server)
    gpu0 = _gpu0()
    assert metrics[f"jupyter_vgpu_gpu_power_watts{{{gpu0}}}"] == 95.0
    assert metrics[f"jupyter_vgpu_gpu_temperature_celsius{{{gpu0}}}"] == 34.0
    assert metrics[f"jupyter_vgpu_gpu_pcie_rx_bytes_per_second{{{gpu0}}}"] == 0.0


def _is_kernel(pid: int) -> bool:
    import psutil

    try:
        return any("ipykernel" in part for part in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def _gpu0() -> str:
    """The labels of GPU 0's figures: the label contract's UUID and hostname, and the old gpu and uuid."""
    uuid = "GPU-01000100-0000-0000-0000-000000000000"
    return f'UUID="{uuid}",gpu="0",hostname="{socket.gethostname()}",uuid="{uuid}"'


def _metrics(server: JupyterProcess) -> dict[str, float]:
    """The server's ``/metrics``: each sample line's name and labels -> its value."""
    import urllib.request

    from jupyter_process import TOKEN

    request = urllib.request.Request(server.url + "metrics", headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples
