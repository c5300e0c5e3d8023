"""What a site already has (issue 48): the Grafana dashboard (docs/grafana/jupyter-vgpu.json) and
dcgm-exporter's figures labelled with our slices, through a real Prometheus.

Two simulated nodes, each a real `jupyter vgpu exporter` with its own ledger: node-a (two 16 GiB
GPUs, root's exporter, a slice of root's) and node-b (one 8 GiB GPU, whose ledger, slice and
exporter are uid 65534's, "nobody": a second user without adding one). Node-a is scraped by two jobs,
as a node's exporter and a user's server serve the same series, so every query must count each GPU
once. Node-a's exporter writes dcgm-exporter's job mapping; a recorded dcgm-exporter page
(tests/fixtures/dcgm-exporter) served from here carries node-a's UUIDs and, as dcgm-exporter does,
repeats each GPU's figures once per slice id in that GPU's file. Every PromQL expression of the
dashboard runs against it and must answer; the joins with DCGM name the slice's user."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from exporter_process import JUPYTER_VGPU, Node, idle_kernel, job_mapping, listening, node_env, start_exporter
from prometheus_process import PrometheusProcess, start_prometheus

from jupyter_vgpu.gpus import Inventory

GiB = 1024**3
DASHBOARD = Path(__file__).parents[1] / "docs" / "grafana" / "jupyter-vgpu.json"
DCGM_PAGE = Path(__file__).parent / "fixtures" / "dcgm-exporter" / "metrics-4.5.3-4.8.2.txt"
NOBODY = 65534
#: DCGM_FI_DEV_FB_USED of GPU 1 in the recorded page (MiB)
GPU1_FB_USED = "462"
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
#: What Grafana puts in place of the template variables: "All", then every value picked (a regex).
ALL = {"hostname": ".*", "user": ".*"}
PICKED = {"hostname": "(node-a|node-b)", "user": "(nobody|root)"}
pytestmark = pytest.mark.timeout(180)


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows (collapsed ones keep theirs) included."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels") or [])


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def expressions() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(dashboard()["panels"]) for t in p.get("targets") or []]


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


def substitute(expr: str, values: dict[str, str]) -> str:
    """``$name`` and ``${name}`` of the dashboard's variables replaced, as Grafana does; ``$1`` (a
    label_replace's) stays."""
    done = re.sub(r"\$\{(\w+)\}|\$([A-Za-z_]\w*)", lambda m: values[m[1] or m[2]], expr)
    assert not re.search(r"\$[A-Za-z_{]", done), f"a variable the test does not know: {expr}"
    return done


def label_values(definition: str) -> tuple[str, str]:
    """``label_values(selector, label)`` as Grafana's variable query: the selector and the label."""
    found = re.fullmatch(r"label_values\((.+), *(\w+)\)", definition)
    assert found, definition
    return found[1], found[2]


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_of_the_sites_choice() -> None:
    board = dashboard()
    assert board["uid"] == "jupyter-vgpu" and board["schemaVersion"] >= 36 and board["title"]
    named = variables()
    assert named["datasource"]["type"] == "datasource" and named["datasource"]["query"] == "prometheus"
    for name, series in (("hostname", "jupyter_vgpu_gpu_info"), ("user", "jupyter_vgpu_slice_info")):
        variable = named[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*"
        selector, label = label_values(variable["definition"])
        assert selector.startswith(series) and label == name and variable["query"]["query"] == variable["definition"]
    every = list(panels(board["panels"]))
    assert len({p["id"] for p in every}) == len(every) and len({p["title"] for p in every}) == len(every)
    rows = [p["title"] for p in every if p["type"] == "row"]
    assert rows[:5] == ["Cluster overview", "Nodes", "GPUs (join others' GPU figures on UUID)", "Users", "Top hogs"]
    for panel in every:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"] and target["refId"]
    titles = {title for title, _ in expressions()}
    for wanted in ("Booked by user", "Used by user", "Top users by memory booked", "Top users by memory booked but unused"):
        assert wanted in titles


def test_every_figure_of_ours_is_taken_once_per_gpu_or_slice_whatever_scrapes_it() -> None:
    """Each of our series is read through ``max by (...)`` (or one series per slice, ``topk by``)
    before anything sums it: a node's exporter and its users' servers serve the same series."""
    for title, expr in expressions():
        for found in re.finditer(r"jupyter_vgpu_\w+\{", expr):
            before = expr[: found.start()]
            assert re.search(r"(max by \([\w, ]+\) \(|topk by \(slice, hostname\) \(1, )$", before), (title, expr[found.start() :][:80])


# -- Against a real Prometheus ------------------------------------------------------------------------


@dataclass
class Cluster:
    prometheus: PrometheusProcess
    a: Node
    b: Node
    mapping: Path  # node-a's job mapping folder
    uuids: dict[str, str]  # node-a's GPUs' UUIDs, by index
    holders: dict[str, subprocess.Popen[bytes]]
    kernel: str  # the idle kernel's slice on node-a's GPU 1


def dcgm_page(template: str, uuids: dict[str, str], hostname: str, mapping: Path) -> str:
    """The recorded page as dcgm-exporter would show node ``hostname``'s GPUs now: their UUIDs, and
    each GPU's lines repeated once per job id of its mapping file, labelled ``hpc_job`` (its
    hpcMapper, read at every collection); a GPU whose file is empty or missing keeps its lines."""
    jobs = {name: text.splitlines() for name, text in job_mapping(mapping).items()}
    lines = []
    for line in template.splitlines():
        sample = re.match(r'^\w+\{gpu="(\d+)",UUID="([^"]+)"', line)
        if sample is None:
            lines.append(line)
            continue
        gpu = sample[1]
        line = line.replace(f'UUID="{sample[2]}"', f'UUID="{uuids[gpu]}"').replace('Hostname="gpu-node-1"', f'Hostname="{hostname}"')
        labels, _, value = line.rpartition("} ")
        lines.extend([f'{labels},hpc_job="{job}"}} {value}' for job in jobs.get(gpu) or []] or [line])
    return "\n".join(lines) + "\n"


def _page_server(render: Any) -> http.server.ThreadingHTTPServer:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _stop(holder: subprocess.Popen[bytes]) -> None:
    if holder.poll() is None:
        assert holder.stdin is not None
        holder.stdin.close()  # cat ends, `run` gives its slice back
        try:
            holder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("node-b's ledger, slice and exporter are uid 65534's: the test runs as root, with setpriv")
    folder = tmp_path_factory.mktemp("grafana")
    # node-b's folder: outside pytest's (mode 700, root's), owned by uid 65534
    b_folder = Path(tempfile.mkdtemp(prefix="jupyter-vgpu-node-b-"))
    os.chown(b_folder, NOBODY, NOBODY)
    b_env = {  # as a user's login gives it (getpass names uid 65534 from the password file), nothing of root's
        "HOME": str(b_folder), "PATH": f"{Path(JUPYTER_VGPU[0]).parent}:/usr/bin:/bin", "LANG": "C.UTF-8",
        **{k: v for k, v in node_env(b_folder, "1x8GiB@node-b").items() if k.startswith("JUPYTER_VGPU_") or k == "PYTHONPATH"},
    }  # fmt: skip
    check = subprocess.run([*AS_NOBODY, *JUPYTER_VGPU, "--help"], env=b_env, cwd="/", capture_output=True, text=True, timeout=60)
    if check.returncode != 0:
        shutil.rmtree(b_folder, ignore_errors=True)
        pytest.skip(f"uid 65534 cannot run this interpreter here: {check.stderr.strip()[-300:]}")
    prometheus = start_prometheus(folder / "prometheus")
    mapping = folder / "dcgm-job-map"
    started: list[Node] = []
    holders: dict[str, subprocess.Popen[bytes]] = {}
    server = None
    try:
        started.append(start_exporter(folder / "a", "node-a", "2x16GiB@node-a", named=False, args=["--dcgm-job-mapping-dir", str(mapping)]))
        started.append(start_exporter(b_folder, "node-b", "1x8GiB@node-b", named=False, env=b_env, prefix=AS_NOBODY))
        a, b = (listening(node) for node in started)
        command = [*JUPYTER_VGPU, "run", "-q", "--gpu", "0", "-p", "1/4", "--", "cat"]  # on GPU 0: the idle kernel is on GPU 1
        holders["root"] = subprocess.Popen(command, env=a.env, stdin=subprocess.PIPE)
        holders["nobody"] = subprocess.Popen([*AS_NOBODY, *command], env=b_env, cwd="/", stdin=subprocess.PIPE)
        kernel = idle_kernel(a.env, fraction=0.125, kernel_id="8d2e-idle-kernel")  # root's, on node-a's GPU 1
        uuids = {str(g.index): g.uuid for g in Inventory("2x16GiB@node-a").snapshot().gpus}
        template = DCGM_PAGE.read_text()
        server = _page_server(lambda: dcgm_page(template, uuids, "node-a", mapping))
        dcgm = f"127.0.0.1:{server.server_address[1]}"
        prometheus.scrape("grafana", [a.address, b.address, dcgm])
        prometheus.scrape("grafana-server", [a.address], job="jupyter-server")  # node-a's series twice, as a user's server serves them
        for promql, count, what in (
            ('jupyter_vgpu_gpu_info{hostname="node-a"}', 4, "node-a's two GPUs from both jobs"),
            ('jupyter_vgpu_slice_info{job="jupyter-vgpu"}', 3, "root's slices on node-a (a command's, an idle kernel's) and nobody's on node-b"),
            ('jupyter_vgpu_slice_kernel_idle_seconds{job="jupyter-vgpu"}', 1, "the kernel's idle time on node-a"),
            ('DCGM_FI_DEV_FB_USED{hpc_job!=""}', 2, "DCGM's figures of node-a's GPUs labelled with their slices"),
        ):
            prometheus.wait_for(promql, _counts(count), what)
        yield Cluster(prometheus, a, b, mapping, uuids, holders, kernel)
    finally:
        for holder in holders.values():
            _stop(holder)
        for node in started:
            node.stop()
        if server is not None:
            server.shutdown()
        prometheus.stop()
        shutil.rmtree(b_folder, ignore_errors=True)


def _counts(count: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda result: len(result) == count


def _value(result: list[dict[str, Any]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def test_every_query_of_the_dashboard_answers_and_counts_each_gpu_once(cluster: Cluster) -> None:
    prometheus = cluster.prometheus
    assert _value(prometheus.query('count(jupyter_vgpu_gpu_info{hostname="node-a"})')) == 4  # two GPUs, each scraped by two jobs
    silent = []
    for values in (ALL, PICKED):
        for title, expr in expressions():
            if not prometheus.query(substitute(expr, values)):
                silent.append(f"{title}: {substitute(expr, values)}")
    assert not silent, "queries that answered nothing:\n" + "\n".join(silent)

    def by_title(title: str, values: dict[str, str] = ALL) -> list[dict[str, Any]]:
        (expr,) = [e for t, e in expressions() if t == title]
        return prometheus.query(substitute(expr, values))

    assert _value(by_title("GPUs")) == 3
    assert _value(by_title("GPU memory")) == 40 * GiB  # 2 x 16 + 8, node-a counted once
    assert _value(by_title("Booked")) == 8 * GiB  # root's 4 + 2 GiB on node-a, nobody's 2 GiB on node-b
    assert _value(by_title("Slices")) == 3 and _value(by_title("Requests waiting")) == 0
    booked = {r["metric"]["user"]: float(r["value"][1]) for r in by_title("Top users by memory booked")}
    assert booked == {"root": 6 * GiB, "nobody": 2 * GiB}
    unused = {r["metric"]["user"]: float(r["value"][1]) for r in by_title("Top users by memory booked but unused")}
    assert unused == booked  # `cat` uses no GPU memory
    only_nobody = {r["metric"]["user"] for r in by_title("Booked by user", {"hostname": "node-b", "user": ".*"})}
    assert only_nobody == {"nobody"}
    slices = {(r["metric"]["hostname"], r["metric"]["user"], r["metric"]["holder"]) for r in by_title("Top slices by memory booked but unused")}
    assert slices == {("node-a", "root", "cat"), ("node-b", "nobody", "cat"), ("node-a", "root", "kernel 8d2e-idl")}  # a kernel without a notebook: its id, short
    (idle,) = by_title("Kernels idle longest")
    assert (idle["metric"]["slice"], idle["metric"]["user"], idle["metric"]["kernel_id"]) == (cluster.kernel, "root", "8d2e-idle-kernel")
    assert 590 <= float(idle["value"][1]) <= 900
    assert not by_title("Kernels idle longest", {"hostname": ".*", "user": "nobody"})  # the user picked: his kernels only


def test_the_variables_list_the_nodes_and_users(cluster: Cluster) -> None:
    for name, wanted in (("hostname", {"node-a", "node-b"}), ("user", {"root", "nobody"})):
        selector, label = label_values(variables()[name]["definition"])
        found = {r["metric"][label] for r in cluster.prometheus.query(f"group by ({label}) ({substitute(selector, ALL)})")}
        assert found == wanted


def test_dcgm_exporters_figures_are_labelled_with_our_gpus_slices_and_users(cluster: Cluster) -> None:
    """The job mapping files name node-a's slice on GPU 0; joined on UUID, DCGM's figures get our
    hostname; joined on hpc_job, the slice's user. When the slice ends its file is emptied, and
    DCGM's figures of that GPU lose the label."""
    prometheus, mapping = cluster.prometheus, cluster.mapping
    (info,) = prometheus.query('jupyter_vgpu_slice_info{hostname="node-a", job="jupyter-vgpu", holder="cat"}')
    slice_id = info["metric"]["slice"]
    assert job_mapping(mapping) == {"0": f"{slice_id}\n", "1": f"{cluster.kernel}\n"}

    on_uuid = prometheus.query(
        "DCGM_FI_DEV_FB_USED * on(UUID) group_left(hostname) max by (UUID, hostname) (jupyter_vgpu_gpu_info)"
    )
    assert sorted((r["metric"]["gpu"], r["metric"]["UUID"], r["metric"]["hostname"], r["metric"].get("hpc_job")) for r in on_uuid) == [
        ("0", cluster.uuids["0"], "node-a", slice_id), ("1", cluster.uuids["1"], "node-a", cluster.kernel),
    ]  # fmt: skip
    on_job = prometheus.query(
        "DCGM_FI_DEV_FB_USED * on(hpc_job) group_left(user, hostname) "
        'label_replace(max by (slice, hostname, user) (jupyter_vgpu_slice_info), "hpc_job", "$1", "slice", "(.*)")'
    )
    assert sorted((r["metric"]["user"], r["metric"]["hpc_job"], r["metric"]["UUID"], r["value"][1]) for r in on_job) == sorted([
        ("root", slice_id, cluster.uuids["0"], "20149"), ("root", cluster.kernel, cluster.uuids["1"], GPU1_FB_USED),
    ])  # fmt: skip

    _stop(cluster.holders["root"])
    deadline = time.monotonic() + 30
    while (mapping / "0").read_text():
        assert time.monotonic() < deadline, "node-a's slice ended but GPU 0's job mapping file still names it"
        time.sleep(0.05)
    assert job_mapping(mapping) == {"0": "", "1": f"{cluster.kernel}\n"}
    prometheus.wait_for('DCGM_FI_DEV_FB_USED{gpu="0", hpc_job!=""}', lambda r: not r, "DCGM's figures without the ended slice's id")
    assert len(prometheus.query('DCGM_FI_DEV_FB_USED{gpu="0"}')) == 1  # the GPU's figures stay, unlabelled
