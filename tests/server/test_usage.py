"""Simulated per-process GPU usage shows up under the kernel whose process tree it belongs to."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import write_sliced_kernelspec
from prometheus_client.parser import text_string_to_metric_families

from jupyter_vgpu.slices.reports import write_report

from .conftest import GiB, get_json, until, unused_pid, usage

SIMULATED_NOTE = (
    "Simulated (JUPYTER_VGPU_SIMULATE): the memory of this kernel's GPU processes, which is what their frameworks hold "
    "in the host's memory (or the simulation file's figure)."
)


async def kernel_view(jp_fetch: Any, kernel_id: str) -> Any:
    return (await get_json(jp_fetch, "api", "vgpu", "kernels", kernel_id))["slice"]


async def wait_for(jp_fetch: Any, kernel_id: str, test: Any, what: str) -> Any:
    async def check() -> Any:
        view = await kernel_view(jp_fetch, kernel_id)
        return view if view is not None and test(view) else None

    return await until(check, what=what)


async def test_memory_of_the_kernel_process_counts_against_its_slice(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB", utilization=30)])
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["memory_used"], "the kernel's usage")
    assert view["memory_used"] == 1 * GiB
    assert view["usage_source"] == "measured"
    assert view["utilization"] == 30
    assert view["state"] == "ok"
    assert view["memory_used_by_gpu"] == {view["gpus"][0]: 1 * GiB}
    # simulated GPUs: the figure is the simulation's, and the note says only that
    assert view["usage_note"] == SIMULATED_NOTE
    devices = await get_json(jp_fetch, "api", "vgpu", "devices")
    assert devices["devices"][0]["memory_used"] == 1 * GiB
    assert devices["devices"][0]["memory_foreign"] == 0


@pytest.mark.tensorflow
async def test_on_simulated_gpus_a_kernels_tensors_are_its_use_and_the_watchdog_sees_it(
    jp_fetch: Any, jp_data_dir: Path, start_kernel: Any, simulation_file: Any
) -> None:
    """Every "used" figure of the demo read 0 B (issue 33): a TensorFlow kernel's tensors, in host
    memory on simulated GPUs, are its slice's use, the GPU's, the dashboard's and the watchdog's."""
    # TensorFlow's BFC allocator does not split a chunk that would leave less than 128 MiB: a 928 MiB
    # tensor holds a whole 1 GiB region (TensorFlow 2.21). 1432 MiB of a 1.5 GiB slice leaves more.
    write_sliced_kernelspec(jp_data_dir, {"gpu_memory": "1536MiB"}, name="python3-vgpu-1536mib", display_name="Python 3 (1.5 GiB GPU)")
    kernel = await start_kernel(name="python3-vgpu-1536mib", path="near.ipynb")
    reply, _ = await kernel.run("import tensorflow as tf\nx = tf.zeros([358, 1024, 1024])")  # 1432 MiB of 1.5 GiB
    assert reply["status"] == "ok", reply
    view = await wait_for(jp_fetch, kernel.id, lambda v: (v["memory_used"] or 0) > 1400 << 20, "the kernel's tensors as its use")
    assert view["state"] == "near" and view["usage_source"] == "measured", (view["memory_used"], view["memory_reserved"])
    assert view["usage_note"] == SIMULATED_NOTE
    devices = await get_json(jp_fetch, "api", "vgpu", "devices")
    assert devices["simulated"] is True and devices["devices"][0]["memory_used"] >= view["memory_used"]
    reply, _ = await kernel.run("y = tf.zeros([50, 1024, 1024])")  # 1632 MiB in all: over the slice
    assert reply["status"] == "ok", reply
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["watchdog"]["events"], "the watchdog's warning")
    (event,) = view["watchdog"]["events"]
    assert event["action"] == "warn" and "of GPU memory (simulated), more than the 1.5 GiB its slice" in event["message"]


    async def charted() -> bool:  # the dashboard's chart moves
        history = await get_json(jp_fetch, "api", "vgpu", "history")
        return any((p["used"] or 0) > GiB for s in history["slices"] if s["id"] == view["id"] for p in s["points"])

    await until(charted, what="the use in the dashboard's history")


async def test_a_child_process_of_the_kernel_counts_against_the_kernel(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel()
    reply, printed = await kernel.run(
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(child.pid)"
    )
    assert reply["status"] == "ok"
    child = int(printed.strip())
    assert child != kernel.pid
    simulation_file(processes=[usage(child, "3700MiB", utilization=50)])
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["memory_used"], "the child's usage under the kernel")
    assert view["memory_used"] == 3700 * 1024**2
    assert view["usage_source"] == "measured"
    assert view["utilization"] == 50
    assert view["state"] == "near"  # 90% or more of its 4 GiB slice
    await kernel.run("child.kill()")


async def test_two_kernels_are_told_apart_and_strangers_count_as_foreign(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    first, second = await start_kernel(), await start_kernel()
    simulation_file(
        processes=[
            usage(first.pid, "1GiB"),
            usage(second.pid, "2GiB"),
            usage(os.getpid(), "512MiB"),  # this test process holds no slice
        ]
    )
    one = await wait_for(jp_fetch, first.id, lambda v: v["memory_used"], "the first kernel's usage")
    two = await wait_for(jp_fetch, second.id, lambda v: v["memory_used"], "the second kernel's usage")
    assert (one["memory_used"], two["memory_used"]) == (1 * GiB, 2 * GiB)
    devices = await get_json(jp_fetch, "api", "vgpu", "devices")
    gpu = devices["devices"][0]
    assert gpu["memory_foreign"] == 512 * 1024**2
    assert gpu["memory_free"] == gpu["memory_total"] - 2 * 4 * GiB - 512 * 1024**2


async def test_unmatched_pids_fall_back_to_the_kernels_report(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any, vgpu_env: dict[str, str]
) -> None:
    # As in a container: NVML shows a process the server cannot map to any kernel.
    kernel = await start_kernel()
    slice_id = (await wait_for(jp_fetch, kernel.id, lambda v: True, "the kernel's slice"))["id"]
    await kernel.driver()  # the kernel writes its own first report as it starts: let it finish
    simulation_file(processes=[usage(unused_pid(), "2GiB")])
    frameworks = {"tensorflow": {"status": "applied", "detail": "1 logical GPU, 3.7 GiB"}}
    write_report(vgpu_env["JUPYTER_VGPU_LEDGER"], slice_id, {"frameworks": frameworks, "memory_used": 2 * GiB})
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["usage_source"] == "reported", "reported usage")
    assert view["memory_used"] == 2 * GiB
    assert view["frameworks"] == frameworks
    assert view["usage_note"].startswith("Reported by this kernel's frameworks: NVML's process ids do not match it")
    # `jupyter vgpu status` says the same (it said 0 B here: one usage computation now, issue 20)
    import subprocess
    import sys

    cli = [sys.executable, "-m", "jupyter_vgpu.cli", "status"]
    data = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, check=True).stdout)
    (row,) = [r for r in data["slices"] if r["id"] == slice_id]
    assert (row["memory_used"], row["usage_source"]) == (2 * GiB, "reported")
    text = subprocess.run(cli, capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "160"}).stdout
    assert "2.0 GiB*" in next(line for line in text.splitlines() if slice_id in line), text
    assert "* reported by the kernel's frameworks" in text


async def test_unknown_usage_is_said_to_be_unknown(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    simulation_file(processes=[usage(unused_pid(), "2GiB")])  # someone, maybe the kernel, without a report
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["usage_source"] == "none", "usage 'none'")
    assert view["memory_used"] is None and view["state"] == "unknown"
    # ... and says why, so `unknown` beside an identical kernel that is fine is not a mystery (issue 25)
    assert view["usage_note"] == (
        "Not known yet: NVML shows 1 process on GPU 0 that no slice claims, which may be this kernel's "
        "under process ids NVML cannot match (a container); its use shows once its frameworks report it."
    )
    assert view["tier"] == "cooperative" and view["watched"] is False  # the watchdog cannot watch what it cannot see


async def test_history_keeps_recent_samples(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB")])
    view = await wait_for(
        jp_fetch, kernel.id, lambda v: sum(1 for p in v["history"] if p["used"] == GiB) >= 3, "three samples"
    )
    times = [p["t"] for p in view["history"]]
    assert times == sorted(times)
    devices = await get_json(jp_fetch, "api", "vgpu", "devices")
    device = devices["devices"][0]
    assert len(device["history"]) >= 3
    assert "utilization_history" not in device  # the history once, not a second copy of its utilisation


async def test_since_returns_only_newer_history(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB")])
    await wait_for(jp_fetch, kernel.id, lambda v: len(v["history"]) >= 3, "three samples")
    first = await get_json(jp_fetch, "api", "vgpu", "slices")
    later = await until(lambda: _newer(jp_fetch, first["taken_at"]), what="a sample newer than the first answer")
    (entry,) = later["slices"]
    assert entry["history"] and all(p["t"] > first["taken_at"] for p in entry["history"])
    assert len(entry["history"]) < len(first["slices"][0]["history"])


async def _newer(jp_fetch: Any, since: float) -> Any:
    response = await jp_fetch("api", "vgpu", "slices", params={"since": repr(since)})
    data = json.loads(response.body)
    return data if data["taken_at"] > since and data["slices"][0]["history"] else None


async def test_metrics_show_gpus_and_kernels(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB", utilization=40)])
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["memory_used"], "the kernel's usage")
    text = (await jp_fetch("metrics")).body.decode()
    labels = f'kernel_id="{kernel.id}",slice="{view["id"]}"'
    assert re.search(rf"^jupyter_vgpu_slice_memory_used_bytes\{{{labels}\}} 1\.073741824e\+09$", text, re.M)
    assert re.search(rf"^jupyter_vgpu_slice_memory_reserved_bytes\{{{labels}\}} 4\.294967296e\+09$", text, re.M)
    assert re.search(rf"^jupyter_vgpu_slice_utilization_percent\{{{labels}\}} 40\.0$", text, re.M)
    uuid, host = view["gpus"][0], re.escape(socket.gethostname())
    gpu = f'UUID="{uuid}",gpu="0",hostname="{host}",uuid="{uuid}"'  # the label contract's UUID and hostname beside the old labels
    assert re.search(rf"^jupyter_vgpu_gpu_memory_total_bytes\{{{gpu}\}} 1\.7179869184e\+10$", text, re.M)
    assert re.search(rf"^jupyter_vgpu_gpu_memory_used_bytes\{{{gpu}\}} 1\.073741824e\+09$", text, re.M)
    assert re.search(rf"^jupyter_vgpu_gpu_memory_reserved_bytes\{{{gpu}\}} 4\.294967296e\+09$", text, re.M)
    assert re.search(rf"^jupyter_vgpu_gpu_utilization_percent\{{{gpu}\}} 40\.0$", text, re.M)
    # The node exporter's series, for this user's slice: one place builds both pages.
    page = {f.name: f.samples for f in text_string_to_metric_families(text)}
    (info,) = page["jupyter_vgpu_slice_info"]
    assert info.labels["slice"] == view["id"] and info.labels["kernel_id"] == kernel.id and info.labels["launcher"] == "local"
    assert info.labels["holder"].startswith(f"kernel {kernel.id[:8]}") and info.labels["tier"] == "cooperative"  # no notebook
    on_gpu = {"slice": view["id"], "UUID": uuid, "hostname": socket.gethostname()}
    figures = {name: [s.value for s in page[name] if s.labels == on_gpu] for name in page if name.startswith("jupyter_vgpu_slice_gpu_")}
    assert figures == {
        "jupyter_vgpu_slice_gpu_request_bytes": [4 * GiB],
        "jupyter_vgpu_slice_gpu_limit_bytes": [],
        "jupyter_vgpu_slice_gpu_used_bytes": [1 * GiB],
        "jupyter_vgpu_slice_gpu_burst_bytes": [],
        "jupyter_vgpu_slice_gpu_utilization_percent": [40],
        "jupyter_vgpu_slice_gpu_share_utilization_percent": [100],  # 40% of the GPU is more than its quarter
    }


async def test_free_is_one_figure_in_the_cli_and_the_api_and_counts_a_slice_over_its_share(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    import subprocess
    import sys

    from jupyter_vgpu.units import format_bytes

    kernel = await start_kernel()  # 1/4 of the 16 GiB GPU
    simulation_file(processes=[usage(kernel.pid, "5GiB")])  # 1 GiB beyond its 4 GiB
    cli = [sys.executable, "-m", "jupyter_vgpu.cli", "status"]

    async def over() -> Any:
        devices = await get_json(jp_fetch, "api", "vgpu", "devices")
        return devices if devices["devices"][0]["memory_over_use"] else None

    gpu = (await until(over, what="the kernel's use beyond its slice"))["devices"][0]
    assert gpu["memory_over_use"] == 1 * GiB
    assert gpu["memory_free"] == 16 * GiB - 4 * GiB - 1 * GiB  # what nobody else can have
    shown = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, check=True).stdout)["gpus"][0]
    assert {k: shown[k] for k in ("memory_reserved", "memory_over_use", "memory_foreign", "memory_free")} == {
        k: gpu[k] for k in ("memory_reserved", "memory_over_use", "memory_foreign", "memory_free")
    }
    text = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    assert f"free {format_bytes(gpu['memory_free'])}" in text and "free 11.0 GiB" in text
    assert "! = 1.0 GiB used beyond reservations" in text
    refused = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-m", "11.5GiB", "--", "true"], capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert "11.0 GiB free of 16.0 GiB" in refused.stderr and "1.0 GiB used beyond reservations" in refused.stderr


async def test_one_slice_reads_the_same_in_the_cli_the_api_and_vgpu(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    """The tier, what the slice shares and the GPU's free memory: the same words and figures in
    `jupyter vgpu status`, `GET /api/vgpu/...` and `%vgpu` (the sidebar test checks the UI's)."""
    import subprocess
    import sys

    from jupyter_vgpu.units import format_bytes

    kernel = await start_kernel()  # 1/4 of the 16 GiB GPU
    simulation_file(processes=[usage(kernel.pid, "3GiB")])
    view = await wait_for(jp_fetch, kernel.id, lambda v: v["memory_used"] == 3 * GiB, "the kernel's use")
    gpu = (await get_json(jp_fetch, "api", "vgpu", "devices"))["devices"][0]
    assert (view["tier"], view["watched"]) == ("cooperative", True)
    share = "memory only; compute is shared with the GPU's other users"
    assert view["share_note"] == share
    assert view["memory_peak"] == 3 * GiB

    cli = [sys.executable, "-m", "jupyter_vgpu.cli", "status"]
    data = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, check=True).stdout)
    (row,) = data["slices"]
    assert (row["tier"], row["share_note"]) == (view["tier"], share)
    assert data["gpus"][0]["memory_free"] == gpu["memory_free"]
    text = subprocess.run(cli, capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "160"}).stdout
    assert f"free {format_bytes(gpu['memory_free'])}" in text
    assert f"Slices here reserve {share} (tier: cooperative)" in text
    assert "cooperative" in next(line for line in text.splitlines() if row["id"] in line).split()

    driver = await kernel.driver()
    (sheet,) = (await asyncio.to_thread(driver.run, "%vgpu")).displays
    shown = sheet["text/plain"]
    assert "\n  tier               cooperative\n" in shown and f"\n  shares             {share}\n" in shown
    (devices,) = (await asyncio.to_thread(driver.run, "%vgpu devices")).displays
    assert f"free {format_bytes(gpu['memory_free'])}" in devices["text/plain"]


async def test_a_malformed_report_never_stops_the_monitor_for_the_others(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any, vgpu_env: dict[str, str]
) -> None:
    """Any notebook can write its own report: 1e999 (infinity) once raised OverflowError on every
    tick, and the API, the watchdog and the reaper stopped for every slice (issue 18)."""
    forger, other = await start_kernel(), await start_kernel()
    forged = (await wait_for(jp_fetch, forger.id, lambda v: True, "the forger's slice"))["id"]
    await forger.driver()  # its own first report is written: overwrite it after
    simulation_file(processes=[usage(unused_pid(), "1GiB")])  # unmatched: reports are read
    folder = os.path.dirname(os.path.abspath(vgpu_env["JUPYTER_VGPU_LEDGER"]))
    texts = ('{"memory_used": 1e999, "peak_memory_used": 1e999}', '{"memory_used": 107374182400000}', "[[[[" * 5000)
    for step, text in enumerate(texts, start=2):
        with open(os.path.join(folder, "reports", f"{forged}.json"), "w") as handle:
            handle.write(text)
        first = (await get_json(jp_fetch, "api", "vgpu", "slices"))["taken_at"]
        simulation_file(processes=[usage(unused_pid(), "1GiB"), usage(other.pid, f"{step}GiB")])
        measured = await wait_for(jp_fetch, other.id, lambda v, want=step * GiB: v["memory_used"] == want, "the other kernel's usage")
        assert measured["usage_source"] == "measured"
        reply = await get_json(jp_fetch, "api", "vgpu", "slices")
        assert reply["taken_at"] > first and not reply.get("message")  # the monitor ticks on
        view = next(s for s in reply["slices"] if s["id"] == forged)
        assert view["memory_used"] is None or 0 <= view["memory_used"] <= 16 * GiB, view["memory_used"]


async def test_the_server_frees_kernel_slices_of_kernels_it_does_not_run(jp_fetch: Any, start_kernel: Any) -> None:
    """A start that failed while the ledger still granted its slice (a broker answer lost to a
    timeout) leaves a kernel slice held by the server for a kernel id it never ran: the server
    frees it (issue 18). Its own kernels' slices and commands' slices stay."""
    from jupyter_vgpu.ledger import open_ledger
    from jupyter_vgpu.slices import Holder, SliceRequest

    kernel = await start_kernel()
    ledger = open_ledger()
    server = os.getpid()  # pytest-jupyter serves from this process
    lost = ledger.reserve_now(
        SliceRequest.parse(0.25), Holder.kernel("0c0ffee0-dead-4bad-beef-000000000000", pid=server, keeper=server)
    )
    command = ledger.reserve_now(SliceRequest.parse(0.25), Holder.command("python train.py", pid=server))

    async def gone() -> bool:
        return lost.id not in {s.id for s in ledger.slices()}

    await until(gone, what="the lost start's slice to be freed")
    held = {s.holder: s for s in ledger.slices()}
    assert kernel.id in held and command.id in {s.id for s in held.values()}
    ledger.release(command.id)


async def test_the_dashboard_keeps_each_gpus_telemetry_and_each_slices_use(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    """``GET /api/vgpu/history``: per GPU memory, reservations, utilisation, power, temperature
    and PCIe; per live slice its memory and utilisation; ``since`` returns only newer points."""
    kernel = await start_kernel()
    simulation_file(processes=[usage(kernel.pid, "1GiB", utilization=60)])

    async def with_use() -> Any:
        # A point is its step's summary: the step the use began in has the most memory seen but
        # the mean utilisation of ticks before and after (60 and 0 make 30). Wait for a step
        # wholly after it, the newest point.
        reply = await get_json(jp_fetch, "api", "vgpu", "history")
        mine = [s for s in reply["slices"] if s["kernel_id"] == kernel.id]
        return reply if mine and mine[0]["points"] and mine[0]["points"][-1]["util"] == 60 else None

    reply = await until(with_use, what="a dashboard step wholly within the kernel's use")
    assert reply["simulated"] is True and reply["step"] > 0 and reply["seconds"] == 3600
    gpu = reply["gpus"][0]
    assert gpu["power_limit"] == 400.0  # the simulated A100's board limit
    last = gpu["points"][-1]
    assert set(last) == {"t", "used", "reserved", "util", "power", "temp", "pcie_tx", "pcie_rx"}
    assert last["used"] >= GiB and last["reserved"] == 4 * GiB and last["util"] > 0
    assert 0 < last["power"] <= 400 and 25 < last["temp"] < 95 and last["pcie_rx"] > last["pcie_tx"] > 0
    (mine,) = [s for s in reply["slices"] if s["kernel_id"] == kernel.id]
    assert mine["request_text"] == "1/4 GPU" and mine["memory_reserved_total"] == 4 * GiB and mine["yours"] is True
    assert mine["points"][-1] == {"t": mine["points"][-1]["t"], "used": GiB, "util": 60}
    later = json.loads((await jp_fetch("api", "vgpu", "history", params={"since": str(reply["taken_at"])})).body)
    assert all(p["t"] > reply["taken_at"] for g in later["gpus"] for p in g["points"])


async def test_a_kernels_host_cpu_and_memory_come_with_its_slice(jp_fetch: Any, start_kernel: Any) -> None:
    """The status bar's tooltip shows the kernel's host CPU and RAM beside its GPU use."""
    kernel = await start_kernel()
    await kernel.run("x = bytearray(200 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096])")
    first = await get_json(jp_fetch, "api", "vgpu", "kernels", kernel.id)
    assert first["host"]["memory_rss"] > 200 * 1024**2 and first["host"]["memory_total"] > first["host"]["memory_rss"]
    await kernel.run("sum(i * i for i in range(3_000_000))")
    second = await get_json(jp_fetch, "api", "vgpu", "kernels", kernel.id)
    assert second["host"]["cpu_percent"] > 0  # per cent of one core since the previous reading
