"""Two real servers on loopback, as docs/remote.md sets them up: a GPU node (`jupyter vgpu
gateway` on simulated GPUs) and a CPU-only `jupyter server --gateway-url=...` with no GPU at all.
Each has its own config, data and runtime dirs (and the node its own ledger)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_process import JupyterProcess, free_port, isolated_env, start_jupyter, write_sliced_kernelspec

#: The node's own token: the CPU-only side sends it through GatewayClient.auth_token.
NODE_TOKEN = "gpu-node-token"
QUARTER = "python3-vgpu-1-4"
WHOLE = "python3-vgpu-full"
WAITING = "python3-vgpu-1-2-waits"


def start_node(folder: Path, port: int) -> JupyterProcess:
    """``jupyter vgpu gateway`` on a simulated 16 GiB GPU, under base URL /node/."""
    folder.mkdir(parents=True, exist_ok=True)
    env = isolated_env(folder, JUPYTER_VGPU_SIMULATE="1x16GiB")
    write_sliced_kernelspec(
        Path(env["JUPYTER_DATA_DIR"]), {"gpu_fraction": 0.5, "wait_timeout": 120}, name=WAITING,
        display_name="Python 3 (1/2 GPU, waits 120 s)",
    )  # fmt: skip
    log = folder / "node.log"
    with log.open("a") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_vgpu.cli", "gateway", f"--port={port}", f"--token={NODE_TOKEN}", "--",
             "--ServerApp.base_url=/node/", f"--ServerApp.root_dir={folder}", "--VGPUServer.monitor_interval=0.2"],
            cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    node = JupyterProcess(process, f"http://127.0.0.1:{port}/node/", folder, env, log, token=NODE_TOKEN)
    try:
        node.wait_ready(timeout=90)
    except BaseException:
        node.stop(timeout=5)
        raise
    return node


def vgpu(node: JupyterProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter vgpu ...`` on the GPU node, as its user runs it."""
    return subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", *args], env=node.env, capture_output=True, text=True)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[JupyterProcess]:
    running = start_node(tmp_path / "gpu-node", free_port())
    yield running
    running.stop(timeout=20)


@pytest.fixture
def laptop(tmp_path: Path, node: JupyterProcess) -> Iterator[JupyterProcess]:
    """The CPU-only side: no simulated GPUs; kernels and the GPU API come from the node."""
    folder = tmp_path / "laptop"
    folder.mkdir()
    env = isolated_env(folder)
    env.pop("JUPYTER_VGPU_SIMULATE", None)
    port = node.url.split(":")[2].split("/")[0]
    server = start_jupyter(
        folder,
        env=env,
        base_url="/laptop/",
        args=[
            f"--gateway-url=http://127.0.0.1:{port}/node",
            f"--GatewayClient.auth_token={NODE_TOKEN}",
            "--ServerApp.jpserver_extensions=jupyter_vgpu=True",
        ],
    )
    yield server
    server.stop(timeout=20)
