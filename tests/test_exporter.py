"""`jupyter vgpu exporter` as an admin runs it: a real exporter process per simulated node, each with
its own ledger and hostname, scraped over HTTP and read with prometheus_client's own parser."""

from __future__ import annotations

import os
import pwd
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from exporter_process import JUPYTER_VGPU, Node, listening, scrape, start_exporter
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from jupyter_vgpu.gpus import Inventory

GiB = 1024**3
T = TypeVar("T")


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, Node]]:
    """Two simulated nodes, started together: node-a with one 16 GiB GPU (its hostname label from
    the simulated machine's name), node-b with two of 8 GiB (from --hostname)."""
    started = {
        "node-a": start_exporter(tmp_path / "a", "node-a", "1x16GiB@node-a", named=False),
        "node-b": start_exporter(tmp_path / "b", "node-b", "2x8GiB"),
    }
    try:
        for node in started.values():
            listening(node)
        yield started
    finally:
        for node in started.values():
            node.process.terminate()
        for node in started.values():
            assert node.process.wait(timeout=30) == 0  # SIGTERM ends it cleanly


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    """``check``'s first answer that is not empty or false, asked until ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen in {timeout} s: {what}")
        time.sleep(0.05)
    return found


def one(samples: list[Sample], **labels: str) -> Sample:
    found = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, samples)
    return found[0]


def test_an_admin_sees_each_nodes_gpus_slices_and_line_until_the_slice_ends(nodes: dict[str, Node]) -> None:
    a, b = nodes["node-a"], nodes["node-b"]
    uuid = Inventory("1x16GiB@node-a").snapshot().gpus[0].uuid
    user = pwd.getpwuid(os.getuid()).pw_name
    command = ["cat"]  # holds its slice until its stdin closes
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1/4", "--", *command], env=a.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    waiter: subprocess.Popen[bytes] | None = None
    try:
        page = wait_for(lambda: (p := scrape(a.url))["jupyter_vgpu_slice_info"] and p, "the slice on node-a's page")
        gpu = one(page["jupyter_vgpu_gpu_info"], UUID=uuid)
        assert gpu.labels == {"UUID": uuid, "gpu": "0", "hostname": "node-a", "modelName": "Simulated GPU 16GiB"} and gpu.value == 1
        info = one(page["jupyter_vgpu_slice_info"])
        slice_id = info.labels["slice"]
        assert info.labels == {
            "slice": slice_id, "hostname": "node-a", "user": user, "kernel_id": "",
            "holder": shlex.join(command), "launcher": "local", "tier": "cooperative",
        }  # fmt: skip
        on_gpu = {"slice": slice_id, "UUID": uuid, "hostname": "node-a"}
        assert one(page["jupyter_vgpu_slice_gpu_request_bytes"], **on_gpu).value == 4 * GiB
        assert one(page["jupyter_vgpu_slice_gpu_used_bytes"], **on_gpu).value == 0  # NVML lists no process of it
        assert page["jupyter_vgpu_slice_gpu_limit_bytes"] == []  # a fixed slice
        assert one(page["jupyter_vgpu_gpu_memory_free_bytes"], UUID=uuid, hostname="node-a").value == 12 * GiB
        assert one(page["jupyter_vgpu_waiting_requests"]).value == 0

        waiter = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1", "--wait", "60", "--", "true"], env=a.env)
        page = wait_for(lambda: (p := scrape(a.url))["jupyter_vgpu_waiting_requests"][0].value == 1 and p, "the request in line")
        assert one(page["jupyter_vgpu_waiting_requests"]).labels == {"hostname": "node-a"}
        assert one(page["jupyter_vgpu_waiting_memory_bytes"]).value == 16 * GiB

        assert holder.stdin is not None
        holder.stdin.close()  # the command ends, its slice is freed, the waiter gets the GPU and ends too
        assert holder.wait(timeout=30) == 0 and waiter.wait(timeout=60) == 0
        page = wait_for(
            lambda: (p := scrape(a.url))["jupyter_vgpu_waiting_requests"][0].value == 0 and not p["jupyter_vgpu_slice_info"] and p,
            "node-a's page without the slice and the line",
        )
        assert page["jupyter_vgpu_slice_gpu_request_bytes"] == [] and one(page["jupyter_vgpu_node_up"]).value == 1

        other = scrape(b.url)  # its own ledger and GPUs, under its own name
        assert sorted((s.labels["gpu"], s.labels["hostname"], s.labels["modelName"]) for s in other["jupyter_vgpu_gpu_info"]) == [
            ("0", "node-b", "Simulated GPU 8GiB"), ("1", "node-b", "Simulated GPU 8GiB"),
        ]  # fmt: skip
        assert other["jupyter_vgpu_slice_info"] == []
    finally:
        for process in (holder, waiter):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "argument --port: --port '70000' is not a port number from 0 to 65535 (0: any free port)"),
        (["--hostname", ""], "argument --hostname: --hostname '' is not a host name: give 1 to 253 characters without spaces"),
        (["--interval", "0"], "argument --interval: --interval '0' is not a number of seconds from 0.1 to 3600"),
    ],
)
def test_bad_arguments_are_one_sentence_naming_the_value(vgpu_env: dict[str, str], args: list[str], message: str) -> None:
    result = subprocess.run([*JUPYTER_VGPU, "exporter", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"jupyter vgpu exporter: error: {message}"
    assert "Traceback" not in result.stderr


def test_a_port_in_use_is_one_sentence(vgpu_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*JUPYTER_VGPU, "exporter", "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == (
        f"jupyter vgpu: The exporter cannot listen on port {port} on 127.0.0.1: another program uses it; "
        "give another --port (0: any free port).\n"
    )


def test_the_exporter_imports_nothing_of_jupyter_server(vgpu_env: dict[str, str]) -> None:
    """It is a command of the node, not a server extension (DESIGN.md's layers): one reading and
    one page, and no module of jupyter_server or of the server layer is loaded."""
    code = (
        "import sys\n"
        "from prometheus_client import CollectorRegistry, generate_latest\n"
        "from jupyter_vgpu.cli import build_parser\n"
        "from jupyter_vgpu.ledger import open_ledger\n"
        "from jupyter_vgpu.metrics.node import NodeCollector, NodeSampler\n"
        "build_parser(['exporter'])\n"
        "registry = CollectorRegistry()\n"
        "registry.register(NodeCollector(NodeSampler(open_ledger()), 'here'))\n"
        "assert b'jupyter_vgpu_gpu_info{' in generate_latest(registry)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'jupyter_server' or m.startswith('jupyter_vgpu.server')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_series_either_page_serves_is_in_the_rest_docs() -> None:
    from jupyter_vgpu.metrics import series

    documented = (Path(__file__).resolve().parents[1] / "docs" / "rest.md").read_text()
    names = [s.name for s in (*series.EXPORTER_SERIES, *series.SERVER_SERIES)]
    assert [name for name in names if f"`{name}`" not in documented] == []


def test_an_elastic_slice_shows_its_limit_burst_and_share_of_the_gpu(simulation_file: Callable[..., Path]) -> None:
    """A 1/4 slice that may grow to 1/2 of 16 GiB, its process using 6 GiB and 15% of the GPU."""
    from prometheus_client import CollectorRegistry, generate_latest

    from jupyter_vgpu.ledger import open_ledger
    from jupyter_vgpu.metrics.node import NodeCollector, NodeSampler
    from jupyter_vgpu.slices import Holder, SliceRequest

    ledger = open_ledger()
    held = ledger.reserve(SliceRequest.parse(fraction=0.25, limit_fraction=0.5), Holder("command", "python train.py", pid=os.getpid()))
    simulation_file(processes=[{"gpu": 0, "pid": os.getpid(), "memory": "6GiB", "utilization": 15}])
    sampler = NodeSampler(ledger)  # one reading, taken now
    registry = CollectorRegistry()
    registry.register(NodeCollector(sampler, "here"))
    page = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}
    ledger.release(held.id)
    sampler.stop()
    on_gpu = {"slice": held.id, "UUID": held.gpus[0], "hostname": "here"}
    figures = {name: [s.value for s in page[name] if s.labels == on_gpu] for name in page if name.startswith("jupyter_vgpu_slice_gpu_")}
    assert figures == {
        "jupyter_vgpu_slice_gpu_request_bytes": [4 * GiB],
        "jupyter_vgpu_slice_gpu_limit_bytes": [8 * GiB],
        "jupyter_vgpu_slice_gpu_used_bytes": [6 * GiB],
        "jupyter_vgpu_slice_gpu_burst_bytes": [2 * GiB],
        "jupyter_vgpu_slice_gpu_utilization_percent": [15],
        "jupyter_vgpu_slice_gpu_share_utilization_percent": [60],  # 15% of the GPU is 60% of a quarter
    }


def test_a_ledger_of_ones_own_shows_each_kernels_idle_time_from_its_servers_file(simulation_file: Callable[..., Path]) -> None:
    """A single-user node: the exporter runs as the user whose servers write the idle files beside the
    ledger (slices.reports.write_idle), and shows each kernel's idle time under the label contract."""
    from prometheus_client import CollectorRegistry, generate_latest

    from jupyter_vgpu.ledger import open_ledger
    from jupyter_vgpu.metrics.node import NodeCollector, NodeSampler
    from jupyter_vgpu.slices import Holder, SliceRequest
    from jupyter_vgpu.slices.reports import write_idle

    ledger = open_ledger()
    kernel = ledger.reserve(SliceRequest.parse(fraction=0.25), Holder("kernel", "5c1f0a2b-idle", pid=os.getpid()))
    busy = ledger.reserve(SliceRequest.parse(fraction=0.25), Holder("kernel", "5c1f0a2b-busy", pid=os.getpid()))
    command = ledger.reserve(SliceRequest.parse(fraction=0.25), Holder("command", "python train.py", pid=os.getpid()))
    write_idle(ledger.path, kernel.id, time.time() - 90)
    write_idle(ledger.path, busy.id, time.time() + 1)  # its server: busy now
    try:
        sampler = NodeSampler(ledger)
        registry = CollectorRegistry()
        registry.register(NodeCollector(sampler, "here"))
        page = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}
    finally:
        for held in (kernel, busy, command):
            ledger.release(held.id)
        ledger.close()
    idle = {s.labels["slice"]: s.value for s in page["jupyter_vgpu_slice_kernel_idle_seconds"]}
    assert set(idle) == {kernel.id, busy.id}  # the command has no idle time
    assert idle[kernel.id] == pytest.approx(90, abs=5) and idle[busy.id] == 0
    assert {tuple(sorted(s.labels)) for s in page["jupyter_vgpu_slice_kernel_idle_seconds"]} == {("hostname", "slice")}
    assert "jupyter_vgpu_slice_idle_seconds" not in page  # the server's older series is the server's page's alone
