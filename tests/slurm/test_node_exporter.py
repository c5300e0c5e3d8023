"""The Slurm test cluster's nodes in a real Prometheus (issue 48): each node's exporter, run as
root with ``--jobs`` as a site runs it beside slurmd, shows the slices of every job on its node,
each booked in the job's own ledger, and none of the other node's (both test nodes share one
machine and one TMPDIR, so only Slurm can say which job runs where). The cluster view agrees with
what each job's own ``jupyter vgpu status`` says, and a cancelled job's slice leaves its node."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_process import JUPYTER_VGPU, Node, listening, node_env, scrape, start_exporter
from prometheus_process import PrometheusProcess, start_prometheus

from .cluster import SlurmCluster

GiB = 1024**3
pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusProcess]:
    server = start_prometheus(tmp_path / "prometheus")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def exporters(slurm: SlurmCluster, tmp_path: Path) -> Iterator[list[Node]]:
    """``jupyter vgpu exporter --jobs`` for each node, the GPUs simulated as the jobs see them."""
    started = []
    try:
        for name in slurm.nodes:
            env = node_env(tmp_path / name, slurm.simulate, SLURM_CONF=slurm.env["SLURM_CONF"], PATH=slurm.env["PATH"])
            started.append(start_exporter(tmp_path / name, name, slurm.simulate, env=env, args=["--jobs"]))
        yield [listening(node) for node in started]
    finally:
        for node in started:
            node.stop()


def submit(slurm: SlurmCluster, node: str, shards: int, fraction: str) -> str:
    """A batch job on ``node`` whose one command holds ``fraction`` of the job's share."""
    command = f"exec {JUPYTER_VGPU[0]} run -q -p {fraction} -- sleep 600"
    out = slurm.run("sbatch", "--parsable", "-w", node, f"--gres=shard:{shards}", f"--wrap={command}", timeout=20).stdout
    return out.strip().split(";")[0]


def own_status(slurm: SlurmCluster, job: str) -> dict[str, Any]:
    """`jupyter vgpu status --json` inside the job, as its user would run it there."""
    out = slurm.run("srun", f"--jobid={job}", "--overlap", "--gres=none", *JUPYTER_VGPU, "status", "--json", timeout=60).stdout
    return dict(json.loads(out))


def view(url: str) -> dict[str, Any]:
    """`jupyter vgpu status --cluster --json`, as an admin runs it."""
    done = subprocess.run([*JUPYTER_VGPU, "status", "--cluster", "--json", "--prometheus", url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def booked(found: dict[str, Any]) -> dict[str, int]:
    return {node["hostname"]: sum(gpu["booked"] for gpu in node["gpus"]) for node in found["nodes"]}


def test_prometheus_shows_each_slurm_nodes_jobs_on_their_node_as_the_jobs_see_them(
    slurm: SlurmCluster, exporters: list[Node], prometheus: PrometheusProcess
) -> None:
    prometheus.scrape("slurm", [node.address for node in exporters])
    one = submit(slurm, "node1", 16, "1/4")  # 16 of a GPU's 32 shards: 8 GiB; a quarter of it
    two = submit(slurm, "node2", 32, "1/2")  # a whole GPU's shards: 16 GiB; half of it
    requests = "jupyter_vgpu_slice_gpu_request_bytes"
    found = prometheus.wait_for(requests, lambda result: len(result) == 2, "both jobs' slices", timeout=90)
    assert sorted((r["metric"]["hostname"], float(r["value"][1])) for r in found) == [("node1", 2 * GiB), ("node2", 8 * GiB)]

    info = {r["metric"]["hostname"]: r["metric"] for r in prometheus.query("jupyter_vgpu_slice_info")}
    assert {host: (labels["user"], labels["holder"]) for host, labels in info.items()} == {
        "node1": ("root", "sleep 600"), "node2": ("root", "sleep 600"),
    }  # fmt: skip
    # Every view agrees: each job's own status books the slice Prometheus has on the job's node.
    for job, host in ((one, "node1"), (two, "node2")):
        (own,) = own_status(slurm, job)["slices"]
        assert own["id"] == info[host]["slice"], (own, info[host])
    cluster = view(prometheus.url)
    assert booked(cluster) == {"node1": 2 * GiB, "node2": 8 * GiB}
    assert not any(node["stale"] or node["problem"] for node in cluster["nodes"]), cluster["nodes"]
    assert sorted(s["hostname"] for s in cluster["slices"]) == ["node1", "node2"]

    slurm.run("scancel", one, timeout=20)  # the job ends, and its slice leaves node1
    prometheus.wait_for(requests, lambda result: [r["metric"]["hostname"] for r in result] == ["node2"], "node1's slice gone")
    cluster = view(prometheus.url)
    assert booked(cluster) == {"node1": 0, "node2": 8 * GiB}
    assert [node["stale"] for node in cluster["nodes"]] == [False, False]


def test_an_exporter_that_cannot_ask_slurm_shows_its_node_down_never_empty(tmp_path: Path) -> None:
    """Without Slurm's commands (or a slurmstepd that does not answer) the page has no GPU and no
    slice, and ``node_up`` 0: the cluster view shows the node stale, never as a free one."""
    env = node_env(tmp_path, "2x16GiB", PATH=str(Path(sys.executable).parent))  # no scontrol
    node = listening(start_exporter(tmp_path, "node1", "2x16GiB", env=env, args=["--jobs"]))
    try:
        page = scrape(node.url)
        assert [sample.value for sample in page["jupyter_vgpu_node_up"]] == [0]
        assert not page.get("jupyter_vgpu_gpu_memory_reserved_bytes") and not page.get("jupyter_vgpu_slice_info")
        node.wait_said("The Slurm jobs on node1 cannot be listed: scontrol is not installed here (slurm-client).")  # its log says why
    finally:
        node.stop()
