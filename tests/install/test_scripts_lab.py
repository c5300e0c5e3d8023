"""The README's first command, `./scripts/lab`, and `./scripts/docs-screenshots` beside it, as a user
runs them on a machine with no GPU and no terminal.

Everything here happens in one fresh copy of the checkout, where `./scripts/lab`, typed as written,
makes its own .venv, builds the JupyterLab extension and serves the demo on simulated GPUs; the
later starts and the screenshots use that .venv, as a user's second start would. The suite's own
venv is never touched: ./scripts/lab installs the package and its kernelspecs (--sys-prefix) into
the venv it runs in, which would put kernelspecs in every other lab of the run and pull the
package from under the tests running beside these.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from jupyter_process import TOKEN, JupyterProcess, free_port, isolated_env, stop_group

from .test_wheel import REPO, _checkout_copy

#: The first start makes a .venv with TensorFlow and builds the extension with Node: minutes on a
#: machine that runs other tests beside it.
pytestmark = [pytest.mark.install, pytest.mark.slow, pytest.mark.timeout(900)]


def _fresh_machine_path(path: str) -> str:
    """PATH without any virtual environment's bin folder (the suite runs in one)."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not (Path(p).parent / "pyvenv.cfg").exists())


def _user_env(tmp: Path, **variables: str) -> dict[str, str]:
    """A user's shell on a machine with no GPU: Jupyter's folders under ``tmp``, no venv on PATH."""
    env = isolated_env(tmp, **variables)
    for name in ("JUPYTER_VGPU_SIMULATE", "PYTHONPATH", "VIRTUAL_ENV"):
        if name not in variables:
            env.pop(name, None)
    env["PATH"] = _fresh_machine_path(env.get("PATH", ""))
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh copy of the checkout (what git tracks, as a clone has it)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to copy")
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: scripts/lab would use its GPUs, not simulated ones")
    return _checkout_copy(tmp_path_factory.mktemp("clone") / "jupyter-vgpu")


@pytest.fixture(scope="module")
def demo_lab(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterProcess]:
    """`./scripts/lab` typed as written in the fresh clone; its port and token come from the user's
    Jupyter config, as they may on one's own machine. It serves the clone's demo folder."""
    tmp = tmp_path_factory.mktemp("demo-lab")
    env = _user_env(tmp)
    port = free_port()
    config = Path(env["JUPYTER_CONFIG_DIR"])
    config.mkdir(parents=True)
    server = {"port": port, "port_retries": 0, "open_browser": False}
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": server, "IdentityProvider": {"token": TOKEN}}))
    log = tmp / "lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", "./scripts/lab"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    lab = JupyterProcess(process, f"http://localhost:{port}/", clone / "demo", env, log)
    try:
        lab.wait_ready(timeout=1800)  # a new .venv with TensorFlow, and the extension built with Node
        yield lab
    finally:
        stop_group(process)  # scripts/lab execs jupyter lab; its own process group holds nothing else


@contextmanager
def start_lab(clone: Path, tmp: Path, arguments: list[str], root: Path, **variables: str) -> Iterator[JupyterProcess]:
    """The clone's ``./scripts/lab`` again (its .venv made), with ``arguments``; ``root`` is the
    folder it will serve."""
    env = _user_env(tmp, **variables)
    port = free_port()
    log = tmp / "lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(clone / "scripts" / "lab"), "--no-browser", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={TOKEN}", "--ServerApp.base_url=/lab-test/", *arguments],
            cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    server = JupyterProcess(process, f"http://127.0.0.1:{port}/lab-test/", root, env, log)
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        stop_group(process)


def test_scripts_lab_as_written_in_a_fresh_clone_serves_the_demo(demo_lab: JupyterProcess) -> None:
    status, devices = demo_lab.api("GET", "api/vgpu/devices")
    assert status == 200 and devices["simulated"] is True and len(devices["devices"]) == 2, devices
    status, listing = demo_lab.api("GET", "api/contents")
    assert status == 200 and "near-the-limit.ipynb" in {item["name"] for item in listing["content"]}
    status, page = demo_lab.api("GET", "lab")
    assert status == 200 and "jupyter-vgpu" in page, "JupyterLab does not load the labextension"


def test_scripts_lab_says_the_gpus_are_simulated(demo_lab: JupyterProcess) -> None:
    log = demo_lab.log_text()
    assert "No NVIDIA GPU found: running on SIMULATED GPUs (2x16GiB)." in log
    assert "SIMULATED GPUs, not real hardware" in log  # `jupyter vgpu status` before the lab starts


def test_a_terminal_in_scripts_lab_runs_jupyter_vgpu(demo_lab: JupyterProcess) -> None:
    """A login shell used to drop .venv/bin, so the `jupyter vgpu` the sidebar and `%vgpu help`
    tell the user to type was not found."""
    status, terminal = demo_lab.api("POST", "api/terminals")
    assert status == 200, terminal
    output = asyncio.run(_type_in_terminal(demo_lab, terminal["name"], "jupyter vgpu status; echo END-OF-$((6 * 7))\r"))
    assert "command not found" not in output, output
    assert "SIMULATED GPUs" in output and "END-OF-42" in output, output


def test_a_terminal_opens_in_the_demo_folder_not_the_checkout(demo_lab: JupyterProcess, clone: Path) -> None:
    """Files made in a Lab terminal landed in the git tree (issue 33). JupyterLab asks for the
    file browser's folder, relative to the server's; "" is its root."""
    status, terminal = demo_lab.api("POST", "api/terminals", {"cwd": ""})
    assert status == 200, terminal
    output = asyncio.run(_type_in_terminal(demo_lab, terminal["name"], "touch made-here; echo END-OF-$((6 * 7))\r"))
    assert "END-OF-42" in output, output
    assert (clone / "demo" / "made-here").is_file()
    assert not (clone / "made-here").exists()


def test_a_shell_outside_lab_sees_the_simulated_gpus_of_the_demo(demo_lab: JupyterProcess, clone: Path) -> None:
    """An ssh shell on the same ledger said "No GPU" while Lab simulated two, and `run` exited 75
    (issue 33): the simulation is in the ledger's shared settings, which every process reads."""
    shell = {k: v for k, v in demo_lab.env.items() if k != "JUPYTER_VGPU_SIMULATE"}  # not Lab's environment
    command = [str(clone / ".venv" / "bin" / "jupyter-vgpu")]
    status = subprocess.run([*command, "status"], env=shell, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "SIMULATED GPUs, not real hardware" in status.stdout and "GPU 1" in status.stdout, status.stdout
    assert "No GPU" not in status.stdout
    shared = Path(shell["JUPYTER_VGPU_LEDGER"]).parent / "jupyter_vgpu_config.json"
    said = "".join(status.stdout.split())  # status folds its lines, and cuts a path longer than a line
    assert "".join(f"simulated for every process on this ledger by {shared}".split()) in said, status.stdout
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


def test_scripts_lab_serves_a_demo_folder_with_the_examples_not_the_checkout(clone: Path, tmp_path: Path) -> None:
    """New notebooks must not land in the git tree (issue 25); the examples are there to open, and
    a user's edit to one survives the next start."""
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "train.py").write_text("# my own edit\n")
    with start_lab(clone, tmp_path, [], demo, JUPYTER_VGPU_DEMO_DIR=str(demo)) as server:
        status, listing = server.api("GET", "api/contents")
        assert status == 200, listing
        names = {item["name"] for item in listing["content"]}
        assert {"mirrored-strategy.ipynb", "two-notebooks-one-gpu", "vgpu-run-from-a-terminal.md", "train.py"} <= names
        assert "pyproject.toml" not in names and "jupyter_vgpu" not in names  # not the checkout
        status, created = server.api("POST", "api/contents", {"type": "notebook"})
        assert status == 201 and (demo / created["path"]).is_file()
    assert (demo / "train.py").read_text() == "# my own edit\n"


# -- ./scripts/docs-screenshots -----------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk comes first)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def files_of(checkout: Path) -> dict[str, tuple[int, int]]:
    """Every file of the checkout, ignored ones too, with its size and time of change (but .venv,
    which ./scripts/lab keeps up to date, and Python's caches)."""
    found = {}
    for path in checkout.rglob("*"):
        name = str(path.relative_to(checkout))
        if name.startswith(".venv") or "__pycache__" in name or not path.is_file():
            continue
        stat = path.stat()
        found[name] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.mark.browser
@pytest.mark.tensorflow
def test_the_docs_pictures_come_from_the_demo(clone: Path, tmp_path: Path) -> None:
    """`./scripts/docs-screenshots` retakes docs/sidebar.png and docs/dashboard.png from the demo
    (`./scripts/lab`, simulated GPUs, two example notebooks run in Chromium), here into a folder of
    the test's: both pictures come out at the size the docs show, and the checkout gains nothing.
    About a minute: two TensorFlow kernels, and the dashboard's minute of history."""
    chromium = Path(os.environ.get("JUPYTER_VGPU_CHROMIUM", "/usr/bin/chromium"))
    if not chromium.exists():
        pytest.skip(f"Chromium is not installed at {chromium} (apt-get install chromium)")
    out = tmp_path / "out"
    before = files_of(clone)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = _fresh_machine_path(env.get("PATH", ""))  # the script makes its Jupyter folders itself
    started = time.monotonic()
    done = subprocess.run(
        ["python3", str(clone / "scripts" / "docs-screenshots"), "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    said = done.stderr
    assert done.returncode == 0, said[-4000:]
    # The script waits for the notebook's simulated use to show before it takes the sidebar.
    assert "near-the-limit.ipynb uses 0.9" in said, said[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["dashboard.png", "sidebar.png"]
    assert png_size(out / "sidebar.png") == (1280, 720)  # the whole lab: panel, notebook, status bar
    width, height = png_size(out / "dashboard.png")  # the dashboard: header, GPU 0 and its slices
    assert 1100 <= width <= 1280 and 700 <= height <= 1600, (width, height)
    for name in ("sidebar.png", "dashboard.png"):
        assert 20_000 < (out / name).stat().st_size < 300_000, name  # a picture, small enough for the docs
    assert files_of(clone) == before, f"the checkout changed ({time.monotonic() - started:.0f} s run)"


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
