"""Benchmark: the usage monitor and ``GET /api/vgpu/slices`` with 8 simulated GPUs and 64 slices.

Targets (issue 4): one monitor tick < 5 ms of CPU; ``GET /api/vgpu/slices`` p95 < 20 ms. Issue 31:
a poll with ``?since=`` the previous reply's ``taken_at`` < 40 KiB, ``/slices`` and the one JupyterLab
makes, ``GET /api/vgpu/sample`` (the slices, the GPUs while the panel shows, the status bar's
kernel's host use).

Each slice is held by a real process (``sleep``) that NVML (simulated) lists with memory and
utilisation, so attribution walks real process trees and the reaper checks real pids; a few
processes without a slice use memory too. The REST figure comes from a real ``jupyter server``
with the extension, sampling every 0.5 s, measured over keep-alive HTTP requests.

    .venv/bin/python benchmarks/monitor.py
    .venv/bin/python benchmarks/monitor.py --against REV [--rounds 2]

With ``--against``, the same benchmark runs on an earlier commit's package (``git archive``) and on
this checkout, alternately, ``--rounds`` times each (the machine's noise falls on both), and the
medians of each figure are printed side by side with their ratio.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchstats import free_port, percentile

GPUS = 8
SLICES = 64
TICKS = 200
REQUESTS = 300
# The server samples fast so that its history (60 points per slice, the default cap) fills
# within the benchmark; a real server takes 300 s to reach the same size.
SERVER_INTERVAL = 0.25
HISTORY_SECONDS = 15.0


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="an earlier commit to measure beside this checkout")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each version, alternately (with --against)")
    args = parser.parse_args()
    if args.against:
        compare(args.against, args.rounds)
        return
    figures = measure()
    print("FIGURES " + json.dumps(figures))


#: What is compared, with its label: (key, label, unit).
COMPARED = (
    ("tick_mean", "monitor tick, mean", "CPU ms"),
    ("full_p95", "GET /slices, full history, p95", "ms"),
    ("full_median", "GET /slices, full history, median", "ms"),
    ("since_p95", "GET /slices?since=, p95", "ms"),
    ("sample_p95", "GET /sample (JupyterLab's poll), p95", "ms"),
)


def compare(against: str, rounds: int) -> None:
    root = Path(__file__).resolve().parent.parent
    folder = Path(tempfile.mkdtemp(prefix="vgpu-bench-monitor-"))
    earlier = folder / "earlier"
    earlier.mkdir()
    archive = subprocess.run(["git", "-C", str(root), "archive", against, "jupyter_vgpu"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(earlier)], input=archive, check=True)
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(rounds):
        for label, source in (("before", earlier), ("after", root)):
            env = {**os.environ, "PYTHONPATH": str(source)}
            done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
            line = next((x for x in done.stdout.splitlines() if x.startswith("FIGURES ")), None)
            if line is None:
                raise SystemExit(f"the {label} run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            runs[label].append(json.loads(line[len("FIGURES ") :]))
    print(f"{SLICES} slices on {GPUS} GPUs; medians of {rounds} runs each, alternately; before: {against}")
    print(f"  {'':40} {'before':>9} {'after':>9} {'after/before':>13}")
    for key, label, unit in COMPARED:
        before = statistics.median(r[key] for r in runs["before"])
        after = statistics.median(r[key] for r in runs["after"])
        print(f"  {label + f' ({unit})':40} {before:9.2f} {after:9.2f} {after / before:13.2f}")


def measure() -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="vgpu-bench-"))
    holders = [subprocess.Popen(["sleep", "600"]) for _ in range(SLICES)]
    strangers = [subprocess.Popen(["sleep", "600"]) for _ in range(GPUS)]
    try:
        simulation = work / "gpus.json"
        per_gpu = SLICES // GPUS
        processes = [
            {"gpu": i // per_gpu, "pid": p.pid, "memory": "2GiB", "utilization": 5} for i, p in enumerate(holders)
        ]
        processes += [{"gpu": i, "pid": p.pid, "memory": "1GiB"} for i, p in enumerate(strangers)]
        devices = [{"name": "Simulated H100 80GB", "memory": "80GiB"} for _ in range(GPUS)]
        simulation.write_text(json.dumps({"devices": devices, "processes": processes}))
        os.environ["JUPYTER_VGPU_SIMULATE"] = str(simulation)
        os.environ["JUPYTER_VGPU_LEDGER"] = str(work / "ledger.sqlite")

        from jupyter_vgpu.ledger import open_ledger
        from jupyter_vgpu.server.monitor import FULL_REAP, UsageMonitor
        from jupyter_vgpu.slices import Holder, SliceRequest

        ledger = open_ledger()
        for i, proc in enumerate(holders):
            ledger.reserve(
                SliceRequest.parse(fraction=0.1, gpu=i // per_gpu),
                Holder(
                    "kernel",
                    f"00000000-0000-0000-0000-{i:012d}",
                    pid=proc.pid,
                    labels={"kernel_name": "python3-vgpu", "kernel_display_name": "Python 3 (1/10 GPU)"},
                ),
            )
        monitor = UsageMonitor(ledger, interval=2.0, reap_interval=10.0)

        start = time.process_time()
        first = monitor.collect()
        cold = (time.process_time() - start) * 1000
        assert len(first.slices) == SLICES and all(u.memory_used == 2 * 1024**3 for u in first.slices)
        plain, reaping = [], []
        for tick in range(1, TICKS + 1):
            start = time.process_time()
            monitor.collect()
            spent = (time.process_time() - start) * 1000
            (reaping if tick % (monitor.reap_every * FULL_REAP) == 0 else plain).append(spent)
        every = plain + reaping
        print(f"monitor tick, {GPUS} GPUs, {SLICES} slices, {len(holders) + len(strangers)} GPU processes (CPU ms):")
        print(f"  first tick (walks every process tree): {cold:.2f}")
        print(
            f"  tick (incl. the quick holder check every {monitor.reap_every}): "
            f"median {statistics.median(plain):.2f}, p95 {percentile(plain, 0.95):.2f}"
        )
        print(
            f"  tick with a full reap (1 in {monitor.reap_every * FULL_REAP}): median {statistics.median(reaping):.2f}, "
            f"max {max(reaping):.2f}"
        )
        print(f"  mean over all ticks: {statistics.mean(every):.2f}  (target < 5)")
        ledger.close()
        monitor.executor.shutdown()

        print(
            f"GET /api/vgpu/slices with {SLICES} slices, {REQUESTS} requests each, sampling every {SERVER_INTERVAL} s:"
        )
        results = serve_and_measure(work)
        figures = {"tick_mean": statistics.mean(every)}
        for kind in ("full", "since", "sample"):
            figures[f"{kind}_p95"] = percentile(results[kind], 0.95)
            figures[f"{kind}_median"] = statistics.median(results[kind])
        for kind, label in (
            ("full", "with full history (60 points per slice)"),
            ("since", "polling with ?since="),
            ("sample", "GET /api/vgpu/sample, polling as JupyterLab does"),
        ):
            times = results[kind]
            print(
                f"  {label}: median {statistics.median(times):.2f} ms, p95 {percentile(times, 0.95):.2f} ms, "
                f"max {max(times):.2f} ms  (target p95 < 20)"
            )
        return figures
    finally:
        for proc in holders + strangers:
            proc.kill()
            proc.wait()


def serve_and_measure(work: Path) -> dict[str, list[float]]:
    config_dir = work / "config"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_vgpu": True}}})
    )
    port, token = free_port(), "benchmark"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config_dir),
        "JUPYTER_DATA_DIR": str(work / "data"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            "--ServerApp.open_browser=False",
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={work}",
            f"--VGPUServer.monitor_interval={SERVER_INTERVAL}",
            f"--VGPUServer.history_seconds={HISTORY_SECONDS}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "server.log", "w"),  # noqa: SIM115
    )
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"token {token}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                connection.request("GET", "/api/vgpu/slices", headers=headers)
                response = connection.getresponse()
                body = json.loads(response.read())
                if response.status == 200 and len(body["slices"]) == SLICES:
                    break
            except (OSError, http.client.HTTPException, ValueError):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            if time.monotonic() > deadline:
                log = (work / "server.log").read_text()[-3000:]
                raise SystemExit(f"the benchmark server did not list the slices within 60 s:\n{log}")
            time.sleep(0.2)
        time.sleep(HISTORY_SECONDS + 1)  # full history for every slice
        results: dict[str, list[float]] = {}
        # JupyterLab's poll: the slices and the GPUs (the panel shows) after the previous reply,
        # and the host use of the status bar's kernel.
        followed = f"00000000-0000-0000-0000-{0:012d}"
        for kind in ("full", "since", "sample"):
            times, sizes, taken_at = [], [], 0.0
            for _ in range(REQUESTS):
                url = {
                    "full": "/api/vgpu/slices",
                    "since": f"/api/vgpu/slices?since={taken_at!r}",
                    "sample": f"/api/vgpu/sample?since={taken_at!r}&devices={taken_at!r}&host={followed}",
                }[kind]
                start = time.perf_counter()
                connection.request("GET", url, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                times.append((time.perf_counter() - start) * 1000)
                assert response.status == 200, (url, response.status, payload[:500])
                sizes.append(len(payload))
                reply = json.loads(payload)
                taken_at = (reply["slices"] if kind == "sample" else reply)["taken_at"]
                time.sleep(0.01)
            results[kind] = times
            target = "  (target < 40)" if kind != "full" else ""
            print(f"  ({kind}: response {statistics.median(sizes) / 1024:.0f} KiB median{target})")
        connection.close()
        return results
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
