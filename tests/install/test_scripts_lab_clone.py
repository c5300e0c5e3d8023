"""README's first command, `./scripts/lab`, typed as written in a fresh clone on a machine with no
GPU: it makes its .venv, builds the JupyterLab extension, and serves the demo on simulated GPUs.
(Its port and token come from the user's Jupyter config, as they may on one's own machine.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from jupyter_process import TOKEN, JupyterProcess, free_port, isolated_env, stop_group

from .test_wheel import REPO, _checkout_copy

pytestmark = [pytest.mark.install, pytest.mark.slow]


def _fresh_machine_path(path: str) -> str:
    """PATH without any virtual environment's bin folder (the suite runs in one)."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not (Path(p).parent / "pyvenv.cfg").exists())


def test_scripts_lab_as_written_in_a_fresh_clone_serves_the_demo(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to copy")
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: scripts/lab would use its GPUs, not simulated ones")
    clone = _checkout_copy(tmp_path / "clone")
    env = isolated_env(tmp_path)
    for name in ("JUPYTER_VGPU_SIMULATE", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(name, None)
    env["PATH"] = _fresh_machine_path(env.get("PATH", ""))
    port = free_port()
    config = Path(env["JUPYTER_CONFIG_DIR"])
    config.mkdir(parents=True)
    server = {"port": port, "port_retries": 0, "open_browser": False}
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": server, "IdentityProvider": {"token": TOKEN}}))
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", "./scripts/lab"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    lab = JupyterProcess(process, f"http://localhost:{port}/", clone / "demo", env, log)
    try:
        lab.wait_ready(timeout=1800)  # a new .venv with TensorFlow, and the extension built with Node
        status, devices = lab.api("GET", "api/vgpu/devices")
        assert status == 200 and devices["simulated"] is True and len(devices["devices"]) == 2, devices
        status, listing = lab.api("GET", "api/contents")
        assert status == 200 and "near-the-limit.ipynb" in {item["name"] for item in listing["content"]}
        status, page = lab.api("GET", "lab")
        assert status == 200 and "jupyter-vgpu" in page, "JupyterLab does not load the labextension"
    finally:
        stop_group(process)
