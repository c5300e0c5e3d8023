"""A GPU node (`jupyter vgpu gateway`) serves sliced kernels and nothing else (issue 30): a CPU-only
JupyterLab's server sees only sliced kernelspecs, a sliced default, and a sentence for the plain
``python3``; every endpoint that is not kernels, kernelspecs or the GPU API is refused, those of
other server extensions (JupyterLab, terminals) included, under the node's non-root base URL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import JupyterProcess, isolated_env, wait_for
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from .conftest import QUARTER, WAITING, WHOLE

pytestmark = pytest.mark.slow

SLICED = {"python3-vgpu-1-2", QUARTER, WHOLE, WAITING}
REFUSAL = (
    "Kernel 'python3' holds no GPU slice, and this GPU node starts sliced kernels only: "
    '"Python 3 (1 GPU)" (python3-vgpu-full), "Python 3 (1/2 GPU)" (python3-vgpu-1-2), '
    '"Python 3 (1/2 GPU, waits 120 s)" (python3-vgpu-1-2-waits), "Python 3 (1/4 GPU)" (python3-vgpu-1-4).'
)


def node_slices(node: JupyterProcess) -> list[dict[str, Any]]:
    status, reply = node.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return list(reply["slices"])


def test_the_laptop_offers_only_the_nodes_sliced_kernels_and_a_sliced_default(laptop: JupyterProcess, node: JupyterProcess) -> None:
    for server in (laptop, node):  # the laptop's first listing, before it ever heard of the node's default
        status, specs = server.api("GET", "api/kernelspecs")
        assert status == 200, specs
        assert set(specs["kernelspecs"]) == SLICED, specs["kernelspecs"].keys()
        assert specs["default"] in SLICED, specs["default"]
        for spec in specs["kernelspecs"].values():
            assert spec["spec"]["metadata"]["kernel_provisioner"]["provisioner_name"] == "vgpu-provisioner"
    status, reply = node.api("GET", "api/kernelspecs/python3")
    assert status == 403 and reply["message"] == REFUSAL, reply


def test_the_plain_python3_is_refused_in_a_sentence_naming_the_sliced_kernels(laptop: JupyterProcess, node: JupyterProcess) -> None:
    body = {"path": "plain.ipynb", "type": "notebook", "name": "plain.ipynb", "kernel": {"name": "python3"}}
    status, reply = laptop.api("POST", "api/sessions", body, timeout=120)
    assert status == 403 and reply["message"] == REFUSAL, reply
    status, reply = laptop.api("POST", "api/kernels", {"name": "python3"}, timeout=120)
    assert status == 403 and reply["message"] == REFUSAL, reply
    status, reply = node.api("POST", "api/kernels", {"name": "python3"}, timeout=120)
    assert status == 403 and reply["message"] == REFUSAL, reply
    assert node.api("GET", "api/kernels")[1] == [] and node_slices(node) == []


def test_a_default_kernel_started_through_the_laptop_holds_a_slice(laptop: JupyterProcess, node: JupyterProcess) -> None:
    # The laptop has not listed kernelspecs yet: its own default would be "python3".
    status, kernel = laptop.api("POST", "api/kernels", {}, timeout=120)
    assert status == 201, kernel
    assert kernel["name"] in SLICED
    (held,) = wait_for(lambda: [s for s in node_slices(node) if s["kernel_id"] == kernel["id"]], "the kernel's slice on the node")
    assert held["memory_reserved_total"] > 0
    body = {"path": "default.ipynb", "type": "notebook", "name": "default.ipynb"}
    status, session = laptop.api("POST", "api/sessions", body, timeout=120)
    assert status == 201, session
    wait_for(lambda: [s for s in node_slices(node) if s["kernel_id"] == session["kernel"]["id"]], "the session's slice")


def test_a_node_with_no_sliced_kernelspec_is_refused_in_one_sentence(tmp_path: Path) -> None:
    env = isolated_env(tmp_path, JUPYTER_VGPU_SIMULATE="1x16GiB")
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "gateway", "--no-kernelspecs", "--token=t"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(
        "This GPU node has no sliced kernelspec, and the gateway serves sliced kernels only: install them "
        "with `jupyter vgpu kernelspec install --defaults` (or leave out --no-kernelspecs)."
    ), done.stderr
    assert "Traceback" not in done.stderr


#: Endpoints of jupyter_server, JupyterLab and jupyter_server_terminals the node must not serve.
REFUSED = [
    ("PUT", "lab/api/workspaces/x", {"data": {}, "metadata": {"id": "x"}}),
    ("GET", "lab/api/workspaces", None),
    ("GET", "lab", None),
    ("PUT", "lab/api/settings/@jupyterlab/apputils-extension:themes", {"raw": "{}"}),
    ("GET", "api/terminals", None),
    ("POST", "api/terminals", {}),
    ("GET", "api/contents", None),
    ("GET", "files/node.log", None),
    ("GET", "api/sessions", None),
    ("GET", "api/me", None),
    ("GET", "api/resolvePath?path=node.log", None),
    ("GET", "metrics", None),
]


def test_the_nodes_banner_says_its_gpus_are_simulated(node: JupyterProcess) -> None:
    """The banner a node's admin reads said nothing of simulated GPUs (issue 33)."""
    banner = node.log_text()
    assert "jupyter-vgpu gateway: this GPU node's sliced kernels at http://127.0.0.1:" in banner
    assert "GPUs: SIMULATED GPUs, not real hardware (GPU 0 16.0 GiB)." in banner


def test_the_node_refuses_every_endpoint_but_kernels_kernelspecs_and_the_gpu_api(node: JupyterProcess) -> None:
    answered = {f"{method} {path}": node.api(method, path, body) for method, path, body in REFUSED}
    served = {what: reply for what, reply in answered.items() if reply[0] not in (403, 404)}
    assert served == {}
    status, reply = answered["PUT lab/api/workspaces/x"]
    assert status == 403 and reply["message"] == (
        "'/node/lab/api/workspaces/x' is not served here: this GPU node (`jupyter vgpu gateway`) serves kernels, "
        "kernelspecs and the GPU API only."
    ), reply
    assert not (node.root / "config" / "lab").exists()  # no workspace was written


def test_kernels_their_channels_kernelspecs_and_the_gpu_api_still_work(laptop: JupyterProcess, node: JupyterProcess) -> None:
    for path in ("api", "api/status", "api/kernels", "api/kernelspecs", f"api/kernelspecs/{QUARTER}", "api/vgpu/devices"):
        assert node.api("GET", path)[0] == 200, path
    logo = urllib.request.Request(node.url + f"kernelspecs/{QUARTER}/logo-64x64.png", headers={"Authorization": f"token {node.token}"})
    with urllib.request.urlopen(logo, timeout=30) as answer:
        assert answer.status == 200 and answer.read().startswith(b"\x89PNG")
    status, kernel = laptop.api("POST", "api/kernels", {"name": QUARTER}, timeout=120)
    assert status == 201, kernel
    # A cell runs through the laptop's channels, which the laptop forwards to the node's.
    assert asyncio.run(execute(laptop, kernel["id"], "print(6 * 7)")) == "42\n"
    assert node.api("POST", f"api/kernels/{kernel['id']}/interrupt")[0] == 204
    assert node.api("DELETE", f"api/kernels/{kernel['id']}")[0] == 204


async def execute(server: JupyterProcess, kernel_id: str, code: str) -> str:
    """Run ``code`` over the server's kernel websocket; returns what it printed."""
    url = server.url.replace("http://", "ws://") + f"api/kernels/{kernel_id}/channels"
    request = HTTPRequest(url, headers={"Authorization": f"token {server.token}"}, connect_timeout=30)
    connection = await asyncio.wait_for(websocket_connect(request), 60)
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": "test", "version": "5.3"}
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False}
    connection.write_message(
        json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell", "buffers": []})
    )
    printed, replied, idle = "", False, False
    try:
        while not (replied and idle):  # the reply (shell) and the output (iopub) come in either order
            text = await asyncio.wait_for(connection.read_message(), 60)
            assert text is not None, "the channels closed"
            message = json.loads(text)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                printed += message["content"]["text"]
            replied = replied or message["msg_type"] == "execute_reply"
            idle = idle or (message["msg_type"] == "status" and message["content"]["execution_state"] == "idle")
        return printed
    finally:
        connection.close()

