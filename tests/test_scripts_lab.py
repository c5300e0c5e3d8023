"""`./scripts/lab`, the README's first command, as a user runs it with no GPU and no terminal.

Its JupyterLab must say the GPUs are simulated and its Terminal must find `jupyter vgpu`, which
the sidebar and `%vgpu help` tell the user to type (a login shell used to drop .venv/bin).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from jupyter_process import TOKEN, JupyterProcess, free_port, isolated_env, stop_group

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[JupyterProcess]:
    root = tmp_path / "root"
    root.mkdir()
    with start_lab(tmp_path, [f"--ServerApp.root_dir={root}"], root) as server:
        yield server


@contextmanager
def start_lab(tmp_path: Path, arguments: list[str], root: Path, **variables: str) -> Iterator[JupyterProcess]:
    """``./scripts/lab`` with ``arguments`` (root: the folder it will serve), until the test ends."""
    env = isolated_env(tmp_path, **variables)
    env.pop("JUPYTER_VGPU_SIMULATE", None)
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: scripts/lab would use its GPUs, not simulated ones")
    port = free_port()
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(REPO / "scripts" / "lab"), "--no-browser", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={TOKEN}", "--ServerApp.base_url=/lab-test/", *arguments],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    server = JupyterProcess(process, f"http://127.0.0.1:{port}/lab-test/", root, env, log)
    try:
        server.wait_ready(timeout=180)
        yield server
    finally:
        stop_group(process)  # scripts/lab execs jupyter lab; its own process group holds nothing else


def test_scripts_lab_says_the_gpus_are_simulated(lab: JupyterProcess) -> None:
    log = lab.log_text()
    assert "No NVIDIA GPU found: running on SIMULATED GPUs (2x16GiB)." in log
    assert "SIMULATED GPUs, not real hardware" in log  # `jupyter vgpu status` before the lab starts
    status, devices = lab.api("GET", "api/vgpu/devices")
    assert status == 200 and devices["simulated"] is True and len(devices["devices"]) == 2


def test_scripts_lab_serves_a_demo_folder_with_the_examples_not_the_checkout(tmp_path: Path) -> None:
    """New notebooks must not land in the git tree (issue 25); the examples are there to open, and
    a user's edit to one survives the next start."""
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "train.py").write_text("# my own edit\n")
    with start_lab(tmp_path, [], demo, JUPYTER_VGPU_DEMO_DIR=str(demo)) as server:
        status, listing = server.api("GET", "api/contents")
        assert status == 200, listing
        names = {item["name"] for item in listing["content"]}
        assert {"mirrored-strategy.ipynb", "two-notebooks-one-gpu", "vgpu-run-from-a-terminal.md", "train.py"} <= names
        assert "pyproject.toml" not in names and "jupyter_vgpu" not in names  # not the checkout
        status, created = server.api("POST", "api/contents", {"type": "notebook"})
        assert status == 201 and (demo / created["path"]).is_file()
    assert (demo / "train.py").read_text() == "# my own edit\n"


@pytest.fixture(scope="module")
def demo_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterProcess]:
    """``./scripts/lab`` serving its demo folder, as a user starts it (no root_dir given)."""
    tmp = tmp_path_factory.mktemp("demo-lab")
    demo = tmp / "demo"
    with start_lab(tmp, [], demo, JUPYTER_VGPU_DEMO_DIR=str(demo)) as server:
        yield server


def test_a_terminal_opens_in_the_demo_folder_not_the_checkout(demo_lab: JupyterProcess) -> None:
    """Files made in a Lab terminal landed in the git tree (issue 33). JupyterLab asks for the
    file browser's folder, relative to the server's; "" is its root."""
    status, terminal = demo_lab.api("POST", "api/terminals", {"cwd": ""})
    assert status == 200, terminal
    output = asyncio.run(_type_in_terminal(demo_lab, terminal["name"], "touch made-here; echo END-OF-$((6 * 7))\r"))
    assert "END-OF-42" in output, output
    assert (demo_lab.root / "made-here").is_file()
    assert not (REPO / "made-here").exists()


def test_a_shell_outside_lab_sees_the_simulated_gpus_of_the_demo(demo_lab: JupyterProcess) -> None:
    """An ssh shell on the same ledger said "No GPU" while Lab simulated two, and `run` exited 75
    (issue 33): the simulation is in the ledger's shared settings, which every process reads."""
    shell = {k: v for k, v in demo_lab.env.items() if k != "JUPYTER_VGPU_SIMULATE"}  # not Lab's environment
    command = [str(Path(sys.executable).parent / "jupyter-vgpu")]
    status = subprocess.run([*command, "status"], env=shell, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "SIMULATED GPUs, not real hardware" in status.stdout and "GPU 1" in status.stdout, status.stdout
    assert "No GPU" not in status.stdout
    shared = Path(shell["JUPYTER_VGPU_LEDGER"]).parent / "jupyter_vgpu_config.json"
    assert f"simulated for every process on this ledger by {shared}" in " ".join(status.stdout.split())
    ran = subprocess.run([*command, "run", "-p", "0.25", "--", "true"], env=shell, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "[SIMULATED GPUs, not real hardware]" in ran.stderr


def test_tensorflow_says_nothing_at_import_in_the_demo(demo_lab: JupyterProcess) -> None:
    """TensorFlow's C++ log filled every example cell (issue 33); a terminal and a kernel get the
    server's environment."""
    status, terminal = demo_lab.api("POST", "api/terminals")
    assert status == 200, terminal
    typed = "python -c 'import tensorflow as tf; print(int(tf.constant(41)) + 1)'; echo END-OF-$((6 * 7))\r"
    output = asyncio.run(_type_in_terminal(demo_lab, terminal["name"], typed, timeout=120))
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output).replace("\r", "")  # without the terminal's escapes
    assert "\n42\nEND-OF-42" in plain, output
    assert "oneDNN" not in output and "I0000" not in output and "cpu_feature_guard" not in output, output


def test_a_terminal_in_scripts_lab_runs_jupyter_vgpu(lab: JupyterProcess) -> None:
    status, terminal = lab.api("POST", "api/terminals")
    assert status == 200, terminal
    output = asyncio.run(_type_in_terminal(lab, terminal["name"], "jupyter vgpu status; echo END-OF-$((6 * 7))\r"))
    assert "command not found" not in output, output
    assert "SIMULATED GPUs" in output and "END-OF-42" in output, output


async def _type_in_terminal(lab: JupyterProcess, name: str, text: str, timeout: float = 60) -> str:
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = lab.url.replace("http://", "ws://") + f"terminals/websocket/{name}"
    connection = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {TOKEN}"}))
    received = ""
    sent = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                message = await asyncio.wait_for(connection.read_message(), timeout=2)
            except asyncio.TimeoutError:
                message = None
            if message is None and connection.protocol is None:
                break
            if message is not None:
                kind, *rest = json.loads(message)
                if kind == "stdout":
                    received += rest[0]
            if not sent and (message is None or kind == "setup"):
                connection.write_message(json.dumps(["stdin", text]))
                sent = True
            if "END-OF-42" in received:  # the shell's own arithmetic: never in the echo of the typed line
                break
    finally:
        connection.close()
    return received
