"""Benchmark: the node exporter's scrape on a simulated node with 8 GPUs and 64 slices.

Target (issue 48): a scrape p95 < 20 ms, and no NVML call beyond what one monitor sample makes.

Each slice is booked through the ledger API for a live process (``sleep``) that the simulated NVML
lists with memory and utilisation, so a reading walks real process trees; half the slices are
elastic (a limit above the request), and a few processes without a slice use memory too. The scrape
times come from a real ``jupyter vgpu exporter`` process, scraped over HTTP as Prometheus does. The
NVML calls are counted in this process, by wrapping every ``nvml*`` function of the simulated NVML:
one server monitor tick, one exporter reading, and the scrapes of an exporter page served here
(its sampler idle meanwhile, as between two readings).

    .venv/bin/python benchmarks/exporter.py [--scrapes 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchstats import percentile

GPUS = 8
SLICES = 64
READINGS = 50
TARGET_P95_MS = 20.0


def count_nvml_calls() -> Counter[str]:
    """Wrap every ``nvml*`` method of the simulated NVML; the counter the wrappers add to."""
    from jupyter_vgpu.gpus.simulated_nvml import SimulatedNVML

    calls: Counter[str] = Counter()

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return call

    for name in [n for n in vars(SimulatedNVML) if n.startswith("nvml")]:
        setattr(SimulatedNVML, name, counted(name, getattr(SimulatedNVML, name)))
    return calls


def book(work: Path, holders: list[subprocess.Popen[bytes]]) -> None:
    from jupyter_vgpu.ledger import open_ledger
    from jupyter_vgpu.slices import Holder, SliceRequest

    ledger = open_ledger()
    per_gpu = SLICES // GPUS
    for i, proc in enumerate(holders):
        elastic = {"limit_fraction": 0.2} if i % 2 else {}
        if i % 4 == 3:
            holder = Holder("command", f"python train.py --run {i}", pid=proc.pid)
        else:
            labels = {"kernel_name": "python3-vgpu", "kernel_display_name": "Python 3 (1/10 GPU)", "path": f"work/notebook-{i}.ipynb"}
            holder = Holder("kernel", f"00000000-0000-0000-0000-{i:012d}", pid=proc.pid, labels=labels)
        ledger.reserve(SliceRequest.parse(fraction=0.1, gpu=i // per_gpu, **elastic), holder)
    ledger.close()


def timed(function: Callable[[], Any], times: int) -> list[float]:
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        function()
        spent.append((time.perf_counter() - start) * 1000)
    return spent


def in_process(calls: Counter[str], scrapes: int) -> dict[str, Any]:
    """NVML calls and times of a monitor tick, an exporter reading, and a scrape served here."""
    from prometheus_client import CollectorRegistry

    from jupyter_vgpu.ledger import open_ledger
    from jupyter_vgpu.metrics.node import NodeCollector, NodeSampler
    from jupyter_vgpu.metrics.serve import MetricsServer
    from jupyter_vgpu.server.monitor import UsageMonitor

    figures: dict[str, Any] = {}
    monitor = UsageMonitor(open_ledger(), interval=2.0, reap_interval=10.0)
    monitor.collect()  # the first walks every process tree
    calls.clear()
    assert len(monitor.collect().slices) == SLICES
    figures["monitor_calls"] = sum(calls.values())
    figures["monitor_ms"] = timed(monitor.collect, READINGS)
    monitor.executor.shutdown()
    assert monitor.ledger is not None
    monitor.ledger.close()

    sampler = NodeSampler(open_ledger(), interval=3600)
    calls.clear()
    reading = sampler.read()
    assert reading.problem is None and len(reading.slices) == SLICES, reading.problem
    figures["reading_calls"] = sum(calls.values())
    figures["reading_by_function"] = dict(calls)
    figures["reading_ms"] = timed(sampler.read, READINGS)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(sampler, "bench"))
    server = MetricsServer(registry, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    calls.clear()
    for _ in range(scrapes):
        with urllib.request.urlopen(server.url(), timeout=10) as reply:
            reply.read()
    figures["scrape_calls"] = sum(calls.values()) / scrapes
    server.shutdown()
    sampler.stop()
    return figures


def real_exporter(work: Path, scrapes: int) -> dict[str, Any]:
    """Scrape times of a real ``jupyter vgpu exporter`` process, and its page's size."""
    command = [str(Path(sys.executable).parent / "jupyter-vgpu"), "exporter", "--port", "0", "--hostname", "bench"]
    log = open(work / "exporter.log", "w+")  # noqa: SIM115
    exporter = subprocess.Popen(command, stderr=log, text=True)
    try:
        deadline, url = time.monotonic() + 60, ""
        while not url:
            if time.monotonic() > deadline or exporter.poll() is not None:
                log.seek(0)
                raise SystemExit(f"the exporter said no URL:\n{log.read()[-3000:]}")
            time.sleep(0.05)
            log.seek(0)
            url = next((line.rsplit(" at ", 1)[1].strip() for line in log if " at http://" in line), "")
        page = b""

        def scrape() -> None:
            nonlocal page
            with urllib.request.urlopen(url, timeout=10) as reply:
                page = reply.read()

        scrape()  # a first connection, as Prometheus's first scrape
        times = timed(scrape, scrapes)
        text = page.decode()
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert sum(line.startswith("jupyter_vgpu_slice_info{") for line in samples) == SLICES
        return {"scrape_ms": times, "page_kib": len(page) / 1024, "page_samples": len(samples)}
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=300, help="scrapes timed (default 300)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vgpu-bench-exporter-"))
    holders = [subprocess.Popen(["sleep", "600"]) for _ in range(SLICES)]
    strangers = [subprocess.Popen(["sleep", "600"]) for _ in range(GPUS)]
    try:
        per_gpu = SLICES // GPUS
        processes = [{"gpu": i // per_gpu, "pid": p.pid, "memory": "6GiB", "utilization": 5} for i, p in enumerate(holders)]
        processes += [{"gpu": i, "pid": p.pid, "memory": "1GiB"} for i, p in enumerate(strangers)]
        devices = [{"name": "Simulated H100 80GB", "memory": "80GiB"} for _ in range(GPUS)]
        (work / "gpus.json").write_text(json.dumps({"devices": devices, "processes": processes}))
        os.environ["JUPYTER_VGPU_SIMULATE"] = str(work / "gpus.json")
        os.environ["JUPYTER_VGPU_LEDGER"] = str(work / "ledger.sqlite")
        os.environ.pop("JUPYTER_VGPU_BROKER", None)
        calls = count_nvml_calls()
        book(work, holders)
        here = in_process(calls, args.scrapes)
        real = real_exporter(work, args.scrapes)
    finally:
        for proc in holders + strangers:
            proc.kill()
            proc.wait()
    report(here, real, args.scrapes)


def report(here: dict[str, Any], real: dict[str, Any], scrapes: int) -> None:
    rows = [
        ("server monitor tick", here["monitor_calls"], here["monitor_ms"]),
        ("exporter reading (its sampler)", here["reading_calls"], here["reading_ms"]),
        ("exporter scrape (real process, HTTP)", here["scrape_calls"], real["scrape_ms"]),
    ]
    print(f"{GPUS} simulated GPUs x 80 GiB, {SLICES} slices held by live processes ({SLICES // 2} elastic), {scrapes} scrapes")
    print(f"  {'':40} {'NVML calls':>10} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for label, calls, times in rows:
        print(f"  {label:40} {calls:>10g} {statistics.median(times):8.2f} {percentile(times, 0.95):8.2f} {max(times):8.2f}")
    p95 = percentile(real["scrape_ms"], 0.95)
    print(f"  scrape p95 {p95:.2f} ms (target < {TARGET_P95_MS:g}): {'met' if p95 < TARGET_P95_MS else 'NOT met'}")
    same = here["reading_calls"] <= here["monitor_calls"]
    print(f"  a reading makes {'no NVML call beyond' if same else 'MORE NVML calls than'} a monitor tick; a scrape makes {here['scrape_calls']:g}")
    print(f"  page: {real['page_samples']} samples, {real['page_kib']:.0f} KiB")
    print("  NVML calls of one reading: " + ", ".join(f"{name} {n}" for name, n in sorted(here["reading_by_function"].items())))


if __name__ == "__main__":
    main()
