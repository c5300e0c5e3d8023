"""A real `jupyter server` or `jupyter lab` in a subprocess, in its own temporary Jupyter dirs.

Used where a test needs what only a separate process shows: the server's exit on SIGTERM, the
installed wheel's own entry points, a browser. Every Jupyter path (config, data, runtime,
IPython) and the ledger live under the test's folder, so nothing touches the user's own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN = "vgpu-test-token"
KERNEL_NAME = "python3-vgpu-1-4"
KERNEL_DISPLAY_NAME = "Python 3 (1/4 GPU)"


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


#: Where the servers a test starts listen: each pytest-xdist worker has ports of its own, below
#: the range the system hands out for port 0 and for outgoing connections (32768 and up on
#: Linux), so neither another worker nor a kernel's or a client's socket takes one meanwhile.
PORTS_FROM = 20_000
PORTS_PER_WORKER = 600
_next_port = 0


def free_port() -> int:
    """A port no one listens on, checked by binding it, from this worker's own range (it is
    handed out once per cycle through the range)."""
    global _next_port
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    slot = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    first = PORTS_FROM + (slot % 20) * PORTS_PER_WORKER
    if _next_port == 0:
        _next_port = os.getpid() % PORTS_PER_WORKER  # two runs side by side start apart
    for _ in range(PORTS_PER_WORKER):
        port = first + _next_port % PORTS_PER_WORKER
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORTS_PER_WORKER - 1}")


def isolated_env(tmp: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any JUPYTER*/JPY_ variable, with every Jupyter dir
    and the ledger under ``tmp``; ``extra`` is added last."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update(
        {
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTER_DATA_DIR": str(tmp / "data"),
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "IPYTHONDIR": str(tmp / "ipython"),
            "JUPYTER_VGPU_LEDGER": str(tmp / "vgpu" / "ledger.sqlite"),
            "JUPYTER_PLATFORM_DIRS": "1",
            # In a venv Jupyter prefers the environment's kernelspecs over the user's; the
            # test's own (user) dirs must win over whatever the venv holds.
            "JUPYTER_PREFER_ENV_PATH": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if os.environ.get("JUPYTER_VGPU_TEST_JUPYTER_PATH"):
        # A front end built elsewhere (a worktree's labextension) served before the installed one.
        env["JUPYTER_PATH"] = os.environ["JUPYTER_VGPU_TEST_JUPYTER_PATH"]
    env.update(extra)
    return env


def write_sliced_kernelspec(
    data_dir: Path,
    config: Any = None,
    *,
    name: str = KERNEL_NAME,
    display_name: str = KERNEL_DISPLAY_NAME,
    python: str = sys.executable,
) -> Path:
    """A kernelspec naming the vgpu-provisioner with ``config`` (default: 1/4 GPU; written as it is
    given, so a test can write what a careless admin would)."""
    spec = data_dir / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": display_name,
                "language": "python",
                "metadata": {
                    "kernel_provisioner": {
                        "provisioner_name": "vgpu-provisioner",
                        "config": config if config is not None else {"gpu_fraction": 0.25},
                    }
                },
            }
        )
    )
    return spec


@dataclass
class JupyterProcess:
    """A running Jupyter server: call its REST API, read its log, stop it as a user would."""

    process: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:PORT/BASE/
    root: Path
    env: dict[str, str]
    log: Path
    stopped_in: float | None = field(default=None)
    token: str = TOKEN  # what api() sends

    def api(self, method: str, path: str, body: Any = None, *, timeout: float = 30) -> tuple[int, Any]:
        """Call the REST API with the token; returns (status, parsed JSON, or text, or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path.lstrip("/"),
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
                status = response.status
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            status = error.code
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return "(no server log)"

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Jupyter server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if self.api("GET", "api/status", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Jupyter server did not answer within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.3)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> float | None:
        """Send ``sig`` and wait up to ``timeout`` s; returns the seconds it took to exit, or
        None if it did not (it is then killed, so no test leaves a server behind)."""
        if self.process.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None
        self.stopped_in = time.monotonic() - started
        return self.stopped_in


def abort_for_stacks(process: subprocess.Popen[Any]) -> None:
    """SIGABRT a hung ``process`` started with PYTHONFAULTHANDLER=1 (``vgpu_env`` sets it): it
    prints every thread's stack on its stderr and ends; waited for up to 10 s."""
    process.send_signal(signal.SIGABRT)
    process.wait(10)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """End a process started with ``start_new_session=True`` and everything in its group:
    SIGTERM, then SIGKILL after 15 s (no test leaves a server behind)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def start_jupyter(
    tmp: Path,
    *,
    app: str = "server",
    python: str = sys.executable,
    base_url: str = "/vgpu-test/",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    wait: bool = True,
) -> JupyterProcess:
    """Start ``python -m jupyter_server`` (``app="server"``) or ``jupyterlab`` under ``tmp``."""
    root = tmp / "root"
    root.mkdir(parents=True, exist_ok=True)
    full_env = dict(env) if env is not None else isolated_env(tmp)
    port = free_port()
    log = tmp / f"{app}.log"
    module = {"server": "jupyter_server", "lab": "jupyterlab"}[app]
    command = [
        python, "-m", module, "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.token={TOKEN}", f"--ServerApp.base_url={base_url}", f"--ServerApp.root_dir={root}",
    ]  # fmt: skip
    if app == "lab":
        command += ["--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    command += list(args)
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=root, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    server = JupyterProcess(process, f"http://127.0.0.1:{port}{base_url}", root, full_env, log)
    if wait:
        try:
            server.wait_ready()
        except BaseException:
            server.stop(signal.SIGKILL, timeout=5)
            raise
    return server
