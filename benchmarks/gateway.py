"""Remote GPU kernels, the cost of the gateway: ``python benchmarks/gateway.py [--pairs N] [--polls N]``.

Starts a GPU node (``jupyter vgpu gateway`` on a simulated GPU) and a CPU-only server that uses it
(``jupyter server --gateway-url``), both on loopback, then measures side by side in one run:

* kernel start to ready: ``POST /api/kernels`` ("Python 3 (1/4 GPU)") then a ``kernel_info``
  round trip on the kernel's websocket, as JupyterLab does, through the CPU-only server vs on the
  node itself (alternating, ABBA), the kernel shut down after each;
* the GPUs panel's poll: ``GET /api/vgpu/slices?since=...`` (a new ``since`` each time, as a
  polling sidebar sends) through the CPU-only server vs on the node.

Prints each median and the ratios (through the gateway / on the node). Loopback hides the network:
on a real link add a round trip per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from benchstats import free_port

TOKEN = "bench-token"
KERNEL = "python3-vgpu-1-4"


def env_in(folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update(
        JUPYTER_CONFIG_DIR=str(folder / "config"),
        JUPYTER_DATA_DIR=str(folder / "data"),
        JUPYTER_RUNTIME_DIR=str(folder / "runtime"),
        IPYTHONDIR=str(folder / "ipython"),
        JUPYTER_VGPU_LEDGER=str(folder / "vgpu" / "ledger.sqlite"),
        JUPYTER_PLATFORM_DIRS="1",
        JUPYTER_PREFER_ENV_PATH="0",
        **extra,
    )
    return env


def call(url: str, method: str = "GET", body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"token {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a server exited with {process.returncode}")
        try:
            if call(url + "api/status")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} did not answer")


async def kernel_ready(base: str) -> float:
    """Seconds from POST /api/kernels to the kernel_info reply on its websocket; then shut down."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    t0 = time.perf_counter()
    status, kernel = await asyncio.to_thread(call, base + "api/kernels", "POST", {"name": KERNEL})
    assert status == 201, kernel
    kernel_id = kernel["id"]  # type: ignore[index]
    ws_url = base.replace("http://", "ws://") + f"api/kernels/{kernel_id}/channels"
    connection = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {TOKEN}"}))
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "kernel_info_request", "session": uuid.uuid4().hex, "username": "", "version": "5.3", "date": ""}
    connection.write_message(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": {}, "channel": "shell", "buffers": []}))
    while True:
        message = await asyncio.wait_for(connection.read_message(), timeout=120)
        if message is None:
            raise SystemExit("the kernel's websocket closed")
        reply = json.loads(message) if isinstance(message, str) else {}
        kind = reply.get("msg_type") or reply.get("header", {}).get("msg_type")
        if kind == "kernel_info_reply" and reply.get("parent_header", {}).get("msg_id") == msg_id:
            break
    elapsed = time.perf_counter() - t0
    connection.close()
    await asyncio.to_thread(call, base + f"api/kernels/{kernel_id}", "DELETE")
    return elapsed


def poll(base: str, since: float) -> float:
    t0 = time.perf_counter()
    status, _ = call(base + f"api/vgpu/slices?since={since}")
    assert status == 200
    return time.perf_counter() - t0


async def measure(node: str, laptop: str, pairs: int, polls: int) -> None:
    starts: dict[str, list[float]] = {"node": [], "gateway": []}
    await kernel_ready(node)  # warm both paths
    await kernel_ready(laptop)
    for i in range(pairs):
        for side in ("node", "gateway") if i % 2 == 0 else ("gateway", "node"):
            starts[side].append(await kernel_ready(node if side == "node" else laptop))
    _, kernel = call(laptop + "api/kernels", "POST", {"name": KERNEL})  # a slice for the polls to list
    polled: dict[str, list[float]] = {"node": [], "gateway": []}
    for i in range(polls):
        since = time.time() - 60 + i * 1e-3
        for side in ("node", "gateway") if i % 2 == 0 else ("gateway", "node"):
            polled[side].append(poll(node if side == "node" else laptop, since))
    call(laptop + f"api/kernels/{kernel['id']}", "DELETE")  # type: ignore[index]
    start_node, start_gateway = statistics.median(starts["node"]), statistics.median(starts["gateway"])
    poll_node, poll_gateway = statistics.median(polled["node"]), statistics.median(polled["gateway"])
    print(f"kernel start to ready, {pairs} each: on the node {start_node * 1000:.0f} ms, "
          f"through the gateway {start_gateway * 1000:.0f} ms: ratio {start_gateway / start_node:.3f}")
    print(f"GET /api/vgpu/slices, {polls} each: on the node {poll_node * 1000:.1f} ms, "
          f"through the gateway {poll_gateway * 1000:.1f} ms: ratio {poll_gateway / poll_node:.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--polls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        node_port, laptop_port = free_port(), free_port()
        (folder / "node").mkdir()
        (folder / "laptop").mkdir()
        node_env = env_in(folder / "node", JUPYTER_VGPU_SIMULATE="1x80GiB")
        laptop_env = env_in(folder / "laptop")
        laptop_env.pop("JUPYTER_VGPU_SIMULATE", None)
        node = subprocess.Popen(
            [sys.executable, "-m", "jupyter_vgpu.cli", "gateway", f"--port={node_port}", f"--token={TOKEN}", "--",
             f"--ServerApp.root_dir={folder / 'node'}"],
            env=node_env, cwd=folder / "node", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        laptop = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--ServerApp.port={laptop_port}",
             f"--IdentityProvider.token={TOKEN}", f"--gateway-url=http://127.0.0.1:{node_port}",
             f"--GatewayClient.auth_token={TOKEN}", f"--ServerApp.root_dir={folder / 'laptop'}"],
            env=laptop_env, cwd=folder / "laptop", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        node_url, laptop_url = f"http://127.0.0.1:{node_port}/", f"http://127.0.0.1:{laptop_port}/"
        try:
            wait_ready(node_url, node)
            wait_ready(laptop_url, laptop)
            asyncio.run(measure(node_url, laptop_url, args.pairs, args.polls))
        finally:
            for process in (laptop, node):
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


if __name__ == "__main__":
    main()
