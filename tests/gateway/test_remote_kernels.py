"""A CPU-only JupyterLab's server using a GPU node's slices through jupyter_server's gateway client
(issue 21): kernels start there, every GPU view answers from there, holders read as the laptop's
notebook paths, refusals as sentences, the line works, and the node's own views agree."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import JupyterProcess, wait_for

from .conftest import QUARTER, WAITING, WHOLE, start_node, vgpu

pytestmark = pytest.mark.slow

GiB = 1024**3


def start_session(laptop: JupyterProcess, path: str, kernel: str) -> tuple[int, Any]:
    return laptop.api("POST", "api/sessions", {"path": path, "type": "notebook", "name": Path(path).name, "kernel": {"name": kernel}}, timeout=120)


def slices(server: JupyterProcess) -> list[dict[str, Any]]:
    status, reply = server.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return list(reply["slices"])


def agree(laptop: JupyterProcess, node: JupyterProcess) -> list[dict[str, Any]]:
    """Both sides list the same slices (ids, kernels, reservations) within a few samples of each
    other, and the node never books more than its GPU; returns the laptop's view."""
    deadline = time.monotonic() + 10
    while True:
        here, there = slices(laptop), slices(node)
        assert sum(s["memory_reserved_total"] for s in there) <= 16 * GiB
        key = sorted((s["id"], s["kernel_id"], s["memory_reserved_total"]) for s in here)
        if key == sorted((s["id"], s["kernel_id"], s["memory_reserved_total"]) for s in there):
            return here
        assert time.monotonic() < deadline, f"the laptop sees {here}, the node {there}"
        time.sleep(0.2)


def test_the_laptop_lists_the_nodes_sliced_kernels_and_sees_their_slices(laptop: JupyterProcess, node: JupyterProcess) -> None:
    status, specs = laptop.api("GET", "api/kernelspecs")
    assert status == 200 and {QUARTER, WHOLE, WAITING} <= set(specs["kernelspecs"]), specs
    (laptop.root / "work").mkdir()
    status, session = start_session(laptop, "work/train.ipynb", QUARTER)
    assert status == 201, session
    kernel_id = session["kernel"]["id"]
    (mine,) = wait_for(lambda: [s for s in agree(laptop, node) if s["kernel_id"] == kernel_id], "the slice on both sides")
    assert mine["path"] == "work/train.ipynb"  # the laptop's notebook, by its own session
    assert mine["running_here"] is True and mine["memory_reserved_total"] == 4 * GiB
    status, reply = laptop.api("GET", "api/vgpu/slices")
    assert reply["gateway"]["url"].endswith("/node") and reply["gateway"]["node"] == reply["node"]
    status, index = laptop.api("GET", "api/vgpu")  # the laptop's own endpoints, not the node's
    assert status == 200 and {"method": "GET", "path": "/laptop/api/vgpu/devices"} in [
        {k: e[k] for k in ("method", "path")} for e in index["endpoints"]
    ], index
    # A poll with ?since= (the sidebar's) has only what changed on the node, and still names the
    # slice by the laptop's notebook and says the laptop runs its kernel.
    status, changes = laptop.api("GET", f"api/vgpu/slices?since={reply['taken_at']!r}")
    (entry,) = [s for s in changes["slices"] if s["id"] == mine["id"]]
    assert "holder_kind" not in entry, entry  # unchanged since then
    assert (entry["kernel_id"], entry["path"], entry["running_here"]) == (kernel_id, "work/train.ipynb", True)
    status, devices = laptop.api("GET", "api/vgpu/devices")
    assert status == 200 and devices["simulated"] is True and devices["devices"][0]["memory_reserved"] == 4 * GiB
    status, view = laptop.api("GET", f"api/vgpu/kernels/{kernel_id}")
    assert status == 200 and view["slice"]["id"] == mine["id"] and view["slice"]["path"] == "work/train.ipynb"
    # The one request of the browser's poll: each view's part joined like the routes it holds.
    status, sample = laptop.api("GET", f"api/vgpu/sample?since=&devices=&history=&host={kernel_id}")
    assert status == 200 and set(sample) == {"slices", "devices", "history", "kernelspecs"}, sample
    assert all(sample[part]["gateway"]["url"].endswith("/node") for part in ("slices", "devices", "history"))
    assert isinstance(sample["kernelspecs"], str)  # the node's word: its kernelspecs are the ones shown
    assert sample["devices"]["host"]["memory_total"] > 0  # the node's machine
    (there,) = [s for s in sample["slices"]["slices"] if s["kernel_id"] == kernel_id]
    assert there["path"] == "work/train.ipynb" and there["running_here"] is True and there["host"]["memory_rss"] > 0
    assert [s["path"] for s in sample["history"]["slices"]] == ["work/train.ipynb"]
    # The node names the notebook too: its path on the laptop came with the kernel start.
    (there,) = [s for s in slices(node) if s["kernel_id"] == kernel_id]
    assert there["path"].endswith("work/train.ipynb"), there
    shown = vgpu(node, "status")
    words = " ".join(shown.stdout.split())  # as folded to the terminal's width
    assert "train.ipynb (a gateway client's) [1/4 GPU]" in words, shown.stdout + shown.stderr
    assert str(laptop.root) not in words  # by name, not by the laptop's folders (issue 33)
    # Ending the session on the laptop frees the slice on the node.
    status, _ = laptop.api("DELETE", f"api/sessions/{session['id']}")
    assert status == 204
    wait_for(lambda: not agree(laptop, node), "the slice freed on both sides")


def test_a_refused_start_reads_as_a_sentence_and_is_in_the_refusals(laptop: JupyterProcess, node: JupyterProcess) -> None:
    status, first = start_session(laptop, "big.ipynb", WHOLE)
    assert status == 201, first
    status, refused = start_session(laptop, "second.ipynb", QUARTER)
    assert status == 503, refused
    message = refused["message"]
    assert message.startswith("No room for 1/4 GPU (4.0 GiB) now: every GPU is full."), message
    assert "Error from Gateway" not in message and "HTTP 503" not in message
    status, reply = laptop.api("GET", "api/vgpu/refusals")
    assert status == 200 and reply["refusals"][0]["message"] == message
    assert reply["refusals"][0]["path"] == "second.ipynb"
    # The node's refusal id comes through: the laptop serves the refusal to the user who was refused.
    status, one = laptop.api("GET", f"api/vgpu/refusals/{refused['refusal_id']}")
    assert status == 200 and one["message"] == message and one["path"] == "second.ipynb", one
    status, none = laptop.api("GET", f"api/vgpu/refusals/{'0' * 24}")
    assert status == 404, none
    agree(laptop, node)


def test_the_laptop_waits_in_line_and_cancels_its_place(laptop: JupyterProcess, node: JupyterProcess) -> None:
    status, first = start_session(laptop, "big.ipynb", WHOLE)
    assert status == 201, first
    outcome: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: outcome.update(reply=start_session(laptop, "queued.ipynb", WAITING)))
    waiter.start()

    def in_line() -> list[dict[str, Any]]:
        status, reply = laptop.api("GET", "api/vgpu/slices")
        return [w for w in reply.get("waiting", []) if w["path"] == "queued.ipynb"] if status == 200 else []

    (place,) = wait_for(in_line, "the waiting kernel in the laptop's view of the line")
    assert place["position"] == 1 and place["yours"] is True
    status, _ = laptop.api("DELETE", f"api/vgpu/waiting/{place['ticket']}")
    assert status == 204
    waiter.join(timeout=60)
    status, reply = outcome["reply"]
    assert status >= 400 and "cancelled" in reply["message"] and "Error from Gateway" not in reply["message"], reply
    wait_for(lambda: not in_line(), "the place gone from the line")
    agree(laptop, node)


def test_an_unreachable_node_is_said_and_the_views_come_back(laptop: JupyterProcess, node: JupyterProcess, tmp_path: Path) -> None:
    port = int(node.url.split(":")[2].split("/")[0])
    node.stop(signal.SIGTERM, timeout=20)
    status, reply = laptop.api("GET", "api/vgpu/slices")
    assert status == 503 and reply["message"].startswith(f"GPU node http://127.0.0.1:{port}/node unreachable"), reply
    assert reply["message"] == (
        f"GPU node http://127.0.0.1:{port}/node unreachable: Connection refused. The GPU views come back when it answers again."
    )
    status, reply = laptop.api("GET", "api/vgpu/devices")
    assert status == 503
    again = start_node(tmp_path / "gpu-node", port)
    try:
        wait_for(lambda: laptop.api("GET", "api/vgpu/devices")[0] == 200, "the node's GPUs again")
    finally:
        again.stop(timeout=20)


def test_the_gateway_serves_kernels_and_nothing_else(node: JupyterProcess) -> None:
    assert node.api("GET", "api/kernels")[0] == 200
    assert node.api("GET", "api/kernelspecs")[0] == 200
    assert node.api("GET", "api/vgpu/slices")[0] == 200
    assert node.api("GET", "api/contents")[0] == 403
    assert node.api("POST", "api/terminals")[0] in (403, 404)
    assert node.api("GET", "api/sessions")[0] == 403
    unauthenticated = JupyterProcess(node.process, node.url, node.root, node.env, node.log, token="wrong")
    assert unauthenticated.api("GET", "api/kernels")[0] in (401, 403)


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["--token="], "An empty token is not allowed: anyone who reaches port 8890 could run code on this GPU node."),
        (["--certfile=cert.pem"], "--certfile and --keyfile go together"),
        (["--certfile=nope.pem", "--keyfile=nope.key"], "'nope.pem' is not a file"),
        (["--", "--ServerApp.authorizer_class=x"], "cannot be given to `jupyter vgpu gateway`: it sets that option itself."),
        (["--port=70000"], "--port '70000' is not a port number from 1 to 65535"),
    ],
)
def test_a_gateway_that_would_be_open_or_broken_is_refused_in_one_sentence(tmp_path: Path, args: list[str], sentence: str) -> None:
    from jupyter_process import isolated_env

    env = isolated_env(tmp_path, JUPYTER_VGPU_SIMULATE="1x16GiB")
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "gateway", "--no-kernelspecs", *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert sentence in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "data" / "kernels").exists()  # nothing installed
