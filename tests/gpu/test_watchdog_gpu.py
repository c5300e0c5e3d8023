"""A real jupyter_server with the watchdog set to interrupt, and a PyTorch kernel that lifts its
own limit (``set_per_process_memory_fraction(1.0)``) and allocates past its slice."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import Kernel, gib, installed, require_host_pids, write_kernelspec

TOKEN = "vgpu-gpu-tests"

CONFIG = """
c.ServerApp.jpserver_extensions = {"jupyter_vgpu": True}
c.ServerApp.open_browser = False
c.VGPUServer.monitor_interval = 0.5
c.VGPUServer.reap_interval = 2.0
c.VGPUServer.over_limit_action = "interrupt"
c.VGPUServer.over_limit_tolerance = 0.05
c.VGPUServer.over_limit_grace = 1.0
"""

GREEDY = """
import time, torch
torch.zeros(1, device='cuda')
torch.cuda.set_per_process_memory_fraction(1.0)   # undo the slice's limit
_greedy = torch.empty(int({size}), dtype=torch.uint8, device='cuda')
torch.cuda.synchronize()
_until = time.time() + 120
while time.time() < _until:
    time.sleep(0.1)
"""


class Server:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.runtime = root / "runtime"
        config = root / "config"
        config.mkdir()
        (config / "jupyter_server_config.py").write_text(CONFIG)
        env = {**env, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(self.runtime)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--port={self.port}", "--ip=127.0.0.1",
             f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.get("api", "status")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter_server did not start: {self.stop()}") from None
                time.sleep(0.3)

    def call(self, method: str, *parts: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/" + "/".join(parts),
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {TOKEN}"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def get(self, *parts: str) -> Any:
        return self.call("GET", *parts)

    def stop(self) -> str:
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return (err or "")[-2000:]


@pytest.fixture
def server(real_gpu: Path, tmp_path: Path) -> Iterator[Server]:
    write_kernelspec(real_gpu, "vgpu-quarter", {"gpu_fraction": 0.25, "gpu": "0"})
    running = Server(tmp_path, dict(os.environ))
    yield running
    running.stop()


@pytest.mark.skipif(not installed("torch"), reason="the greedy kernel uses torch")
def test_the_watchdog_interrupts_a_kernel_that_lifts_its_limit(server: Server, figures: dict[str, Any]) -> None:
    model = server.call("POST", "api", "kernels", body={"name": "vgpu-quarter"})
    kernel = Kernel.attach(str(server.runtime / f"kernel-{model['id']}.json"))
    try:
        reserved = int(kernel.env("JUPYTER_VGPU_MEMORY_RESERVED"))
        assert kernel.run("import torch; torch.zeros(1, device='cuda')").ok
        require_host_pids(kernel.pid)
        started = time.monotonic()
        outcome = kernel.run(GREEDY.format(size=1.5 * reserved), timeout=180)
        ok, error = outcome.ok, outcome.error
        caught = time.monotonic() - started
        assert not ok and error is not None and error["ename"] == "KeyboardInterrupt", error
        view = server.get("api", "vgpu", "kernels", model["id"])["slice"]
        events = view["watchdog"]["events"]
        assert any(e["action"] == "interrupt" and e["ok"] for e in events), events
        figures["watchdog (interrupt)"] = (
            f"kernel allocated {gib(1.5 * reserved)} in a {gib(reserved)} slice after lifting its torch limit; "
            f"interrupted {caught:.1f} s later; tier {view['tier']}; event: {events[-1]['message']}"
        )
    finally:
        kernel.stop()
        server.call("DELETE", "api", "kernels", model["id"])
