"""The simulated cluster that benchmarks/cluster.py reads (see its docstring, "How the nodes are
made"): nodes as real NodePages over ledgers of their own, served in a child process per batch
(this file run with a plan), a Prometheus scraping them, and a jupyter server with the extension."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchstats import free_port

GPUS = 8
SLICES_PER_GPU = 4
SLICES = GPUS * SLICES_PER_GPU
GiB = 1024**3
GPU_MEMORY = 80 * GiB
MODEL = "NVIDIA H100 80GB HBM3"
#: Each GPU's four slices: (request, limit or None) as fractions of the GPU.
SHARES = ((0.25, None), (0.2, 0.35), (0.15, None), (0.1, 0.2))
USERS = ("ada", "alan", "barbara", "claude", "donald", "edsger", "frances", "grace",
         "john", "ken", "leslie", "margaret", "niklaus", "radia", "tony", "vint")  # fmt: skip
WAITERS = 3
READ_SECONDS = 5.0  # each node's sampler (the exporter's default)
JOB = "jupyter-vgpu"


def hostname(k: int) -> str:
    return f"node-{k:02d}"


# -- The nodes (a child process per batch) -------------------------------------------------------


def node_users(k: int) -> list[str]:
    return [USERS[(3 * k + u) % len(USERS)] for u in range(2 + k % 3)]


def owner(k: int, gpu: int, j: int, me: str) -> str:
    """Who holds slice ``j`` of ``gpu`` on node ``k``: the benchmark's user GPU 0's on every eighth node."""
    if gpu == 0 and k % 8 == 0:
        return me
    users = node_users(k)
    return users[(gpu + j) % len(users)]


def build_node(work: Path, k: int, holders: list[int], waiters: list[int], me: str) -> Any:
    """Node ``k``: simulated GPUs named for it, its ledger, 32 slices and its line, and a NodePage."""
    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.ledger.sqlite import SQLiteLedger
    from jupyter_vgpu.metrics.node import NodePage
    from jupyter_vgpu.slices import Holder, SliceRequest
    from jupyter_vgpu.slices.records import Actor

    name = hostname(k)
    folder = work / "nodes" / name
    folder.mkdir(parents=True)
    processes = []
    for i in range(SLICES):
        gpu, j = divmod(i, SLICES_PER_GPU)
        request, limit = SHARES[j]
        use = 0.4 + 0.25 * ((k + i) % 4)  # of the request: 0.4 to 1.15 (an elastic slice bursts above it)
        used = int(GPU_MEMORY * request * (use if limit else min(use, 0.95)))
        processes.append({"gpu": gpu, "pid": holders[i], "memory": used, "utilization": (7 * k + 13 * i) % 25})
    devices = [{"name": MODEL, "memory": GPU_MEMORY, "utilization": min(100, 20 + (k + g) % 60)} for g in range(GPUS)]
    spec = folder / "gpus.json"
    spec.write_text(json.dumps({"node": name, "devices": devices, "processes": processes}))
    ledger = SQLiteLedger(folder / "ledger.sqlite", Inventory(str(spec)))
    uids = {user: 2000 + n for n, user in enumerate(USERS)} | {me: os.getuid()}
    for i in range(SLICES):
        gpu, j = divmod(i, SLICES_PER_GPU)
        request, limit = SHARES[j]
        user = owner(k, gpu, j, me)
        if j == 3:
            holder = Holder("command", f"python train.py --config runs/{name}-{i}.yaml", pid=holders[i])
        else:
            labels = {"kernel_name": "python3-vgpu", "kernel_display_name": "Python 3 (1/4 GPU)", "path": f"{user}/analysis-{i}.ipynb"}
            holder = Holder("kernel", f"{k:08x}-0000-4000-8000-{i:012x}", pid=holders[i], labels=labels)
        ledger.acting_for(Actor(user, uids[user])).reserve(SliceRequest.parse(fraction=request, gpu=gpu, limit_fraction=limit), holder)
    for w in range(k % (WAITERS + 1)):  # 0 to 3 places in line, one of them for a given GPU
        user = node_users(k)[w % len(node_users(k))]
        line = SliceRequest.parse(fraction=0.5, gpu=w if w == 1 else None)
        ledger.acting_for(Actor(user, uids[user])).enqueue(line, Holder("command", f"python sweep.py --trial {w}", pid=waiters[w]))
    page = NodePage(ledger, address="127.0.0.1", port=0, hostname=name, interval=READ_SECONDS)
    reading = page.sampler.latest
    assert reading.problem is None and len(reading.slices) == SLICES, reading.problem
    return page


def serve_nodes(plan: dict[str, Any]) -> None:
    """The child: build the plan's nodes, say their addresses on stdout, serve until stdin closes."""
    work, me = Path(plan["work"]), plan["me"]
    pages = [build_node(work, k, plan["holders"], plan["waiters"], me) for k in range(plan["first"], plan["first"] + plan["count"])]
    for page in pages:
        page.start()
    print("READY " + json.dumps([{"hostname": p.hostname, "address": f"127.0.0.1:{p.server.port}"} for p in pages]), flush=True)
    sys.stdin.read()
    for page in pages:
        page.shutdown()
    for page in pages:
        page.stop()
        page.sampler.ledger.close()


class Nodes:
    """The batches of nodes, each a child process (this file, given the batch's plan)."""

    def __init__(self, work: Path, me: str) -> None:
        self.work, self.me = work, me
        self.holders = [subprocess.Popen(["sleep", "3600"]) for _ in range(SLICES + WAITERS)]
        self.batches: list[subprocess.Popen[str]] = []
        self.addresses: dict[str, str] = {}

    def grow(self, count: int) -> None:
        first = len(self.addresses)
        if count <= first:
            return
        plan = {
            "work": str(self.work), "me": self.me, "first": first, "count": count - first,
            "holders": [p.pid for p in self.holders[:SLICES]], "waiters": [p.pid for p in self.holders[SLICES:]],
        }  # fmt: skip
        path = self.work / f"plan-{first}.json"
        path.write_text(json.dumps(plan))
        log = open(self.work / f"nodes-{first}.log", "w")  # noqa: SIM115
        child = subprocess.Popen(
            [sys.executable, __file__, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        self.batches.append(child)
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith("READY "):
            child.kill()
            raise SystemExit(f"the nodes {first}-{count - 1} did not start:\n{(self.work / f'nodes-{first}.log').read_text()[-3000:]}")
        self.addresses |= {n["hostname"]: n["address"] for n in json.loads(line[len("READY ") :])}

    def stop(self) -> None:
        for child in self.batches:
            assert child.stdin is not None
            child.stdin.close()
        for child in self.batches:
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for holder in self.holders:
            holder.kill()
            holder.wait()


# -- Prometheus and the server -------------------------------------------------------------------

PROMETHEUS_CONFIG = """\
global:
  scrape_interval: {interval}s
  scrape_timeout: {interval}s
  evaluation_interval: {interval}s
scrape_configs:
  - job_name: {job}
    file_sd_configs:
      - files: ["{targets}/*.json"]
        refresh_interval: 1s
"""


def backfill(folder: Path, address: str, seconds: int, interval: int) -> int:
    """The history's series of the node at ``address`` for the ``seconds`` before now, one sample
    per ``interval`` with its page's figures, as TSDB blocks in ``folder`` (Prometheus's data)."""
    from prometheus_client.parser import text_string_to_metric_families

    from jupyter_vgpu.metrics import series

    kept = (series.GPU_INFO, series.GPU_TOTAL, series.GPU_RESERVED, series.GPU_USED, series.NODE_UP, series.NODE_READ_AT)
    names = {s.name for s in (*kept, series.SLICE_INFO, series.SLICE_REQUEST, series.SLICE_USED)}
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as reply:
        page = reply.read().decode()
    end = time.time() - 2 * interval
    times = [end - seconds + i * interval for i in range(seconds // interval + 1)]
    lines, samples = [], 0
    for family in text_string_to_metric_families(page):
        if family.name not in names:
            continue
        lines.append(f"# TYPE {family.name} gauge")
        for sample in family.samples:
            labels = {**sample.labels, "job": JOB, "instance": address}
            text = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            for at in times:
                value = at if family.name == series.NODE_READ_AT.name else sample.value
                lines.append(f"{family.name}{{{text}}} {value!r} {at:.3f}")
                samples += 1
    lines.append("# EOF")
    source = folder.parent / "backfill.om"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(folder)], check=True, timeout=300)
    return samples


class PrometheusServer:
    def __init__(self, folder: Path, interval: int) -> None:
        self.folder = folder
        (folder / "targets").mkdir(parents=True, exist_ok=True)
        config = folder / "prometheus.yml"
        config.write_text(PROMETHEUS_CONFIG.format(interval=interval, job=JOB, targets=folder / "targets"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            "prometheus", f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
        ]  # fmt: skip
        with (folder / "prometheus.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.process.poll() is None and fetch(f"{self.url}/-/ready") is not None, "Prometheus ready", 60, self.log_tail)

    def scrape(self, addresses: list[str]) -> None:
        path = self.folder / "targets" / "nodes.json"
        path.with_suffix(".tmp").write_text(json.dumps([{"targets": addresses}]))
        os.replace(path.with_suffix(".tmp"), path)

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = fetch(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
        return list(json.loads(body or b"{}").get("data", {}).get("result", []))

    def log_tail(self) -> str:
        return (self.folder / "prometheus.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return bytes(reply.read())
    except OSError:
        return None


def wait_for(check: Callable[[], Any], what: str, timeout: float, log: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}\n{log()}")
        time.sleep(0.25)
    return value


#: The server, its cluster cache set to 0 so that every request reads Prometheus.
UNCACHED_SERVER = "import sys, jupyter_vgpu.server.cluster as c; c.CACHE_SECONDS = 0.0; from jupyter_server.serverapp import main; sys.exit(main())"


class JupyterServer:
    def __init__(self, work: Path, prometheus: str) -> None:
        (work / "config").mkdir(parents=True)
        (work / "config" / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_vgpu": True}}}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
        env |= {
            "JUPYTER_CONFIG_DIR": str(work / "config"), "JUPYTER_DATA_DIR": str(work / "data"), "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
            "JUPYTER_VGPU_LEDGER": str(work / "ledger.sqlite"), "JUPYTER_VGPU_SIMULATE": "1x80GiB@bench-server",
        }  # fmt: skip
        self.port, self.token, self.log = free_port(), "benchmark", work / "server.log"
        command = [
            sys.executable, "-c", UNCACHED_SERVER, f"--port={self.port}", f"--IdentityProvider.token={self.token}",
            "--ServerApp.open_browser=False", "--ServerApp.allow_root=True", f"--ServerApp.root_dir={work}",
            f"--VGPUServer.prometheus_url={prometheus}",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=self.log.open("w"))
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def get(self, path: str) -> tuple[int, bytes, int]:
        """A GET as a browser makes it (``Accept-Encoding: gzip``): the status, the body (decompressed)
        and how many bytes came."""
        try:
            self.connection.request("GET", path, headers={"Authorization": f"token {self.token}", "Accept-Encoding": "gzip"})
            response = self.connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            raise
        sent = len(body)
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return response.status, body, sent

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited:\n{self.log.read_text()[-3000:]}")
            try:
                return self.get("/api/vgpu/cluster")[0] == 200
            except (OSError, http.client.HTTPException):
                return False

        wait_for(ready, "the jupyter server's GET /api/vgpu/cluster", 120, lambda: self.log.read_text()[-3000:])

    def stop(self) -> None:
        self.connection.close()
        self.process.terminate()
        self.process.wait(timeout=30)


if __name__ == "__main__":
    serve_nodes(json.loads(Path(sys.argv[1]).read_text()))
