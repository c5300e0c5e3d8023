"""Real kernels on a real GPU: kernelspecs with the vgpu provisioner, a blocking client, NVML."""

from __future__ import annotations

import importlib.util
import json
import queue
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.units import MiB

#: How each framework creates its CUDA context, allocates ``{n}`` bytes, and says it ran out.
FRAMEWORKS: dict[str, tuple[str, str, str]] = {
    "torch": (
        "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
        "torch.empty({n}, dtype=torch.uint8, device='cuda')",
        "torch.cuda.OutOfMemoryError",
    ),
    "jax": (
        "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()",
        "jnp.zeros(({n},), dtype=jnp.uint8).block_until_ready()",
        "Exception",
    ),
    "cupy": (
        "import cupy; cupy.zeros(1); cupy.cuda.Device().synchronize()",
        "cupy.empty({n}, dtype=cupy.uint8)",
        "cupy.cuda.memory.OutOfMemoryError",
    ),
}


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not installed(module), reason=f"{module} is not installed")


def write_kernelspec(data_dir: Path, name: str, config: dict[str, Any]) -> str:
    """A kernelspec under ``data_dir/kernels`` whose kernels get a slice from ``vgpu-provisioner``."""
    folder = data_dir / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({name})",
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": config}},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return name


class Kernel:
    """A kernel (started here, or one a server runs, by connection file) and a blocking client."""

    def __init__(self, manager: KernelManager | None = None, *, connection_file: str | None = None) -> None:
        self.manager = manager
        if manager is not None:
            self.client = manager.client()
        else:
            from jupyter_client.blocking.client import BlockingKernelClient

            self.client = BlockingKernelClient(connection_file=connection_file)
            self.client.load_connection_file()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self.pid = int(self.eval("__import__('os').getpid()"))

    @classmethod
    def start(cls, kernel_name: str, env: dict[str, str] | None = None) -> Kernel:
        manager = KernelManager(kernel_name=kernel_name)
        manager.start_kernel(env=env) if env is not None else manager.start_kernel()
        return cls(manager)

    def submit(self, code: str) -> str:
        return str(self.client.execute(code))

    def collect(self, msg_id: str, timeout: float = 600) -> tuple[bool, str, dict[str, Any] | None]:
        """Wait for ``msg_id`` to finish: (ok, what it printed, the error content or None)."""
        stdout: list[str] = []
        error = None
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(msg_id) from None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                stdout.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                error = msg["content"]
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return error is None, "".join(stdout), error

    def run(self, code: str, timeout: float = 600) -> tuple[bool, str, dict[str, Any] | None]:
        return self.collect(self.submit(code), timeout)

    def eval(self, expression: str) -> Any:
        ok, out, error = self.run(f"print(__import__('json').dumps({expression}))")
        assert ok, error
        return json.loads(out.strip().splitlines()[-1])

    def env(self, name: str) -> str:
        return str(self.eval(f"__import__('os').environ.get({name!r}, '')"))

    def fill(self, framework: str, chunk: int = 256 * MiB) -> int:
        """Allocate ``chunk``-byte blocks until the framework refuses; the bytes it allowed."""
        _, allocate, oom = FRAMEWORKS[framework]
        code = (
            "_held, _total = [], 0\n"
            "while _total < 10 * 2**40:\n"
            "    try:\n"
            f"        _held.append({allocate.format(n=chunk)})\n"
            f"    except {oom}:\n"
            "        break\n"
            f"    _total += {chunk}\n"
            "print(_total)"
        )
        ok, out, error = self.run(code)
        assert ok, error
        return int(out.strip().splitlines()[-1])

    def stop(self) -> None:
        self.client.stop_channels()
        if self.manager is not None:
            self.manager.shutdown_kernel(now=True)


def nvml_used(pid: int) -> int | None:
    """Bytes NVML attributes to ``pid`` on any GPU; None when NVML lists it nowhere."""
    found = [p.used or 0 for gpu in Inventory("").snapshot().gpus for p in gpu.processes if p.pid == pid]
    return sum(found) if found else None


def require_host_pids(pid: int) -> int:
    """NVML's memory for ``pid``, skipping the test when NVML cannot see this pid namespace's pids."""
    used = nvml_used(pid)
    if used is None:
        others = [p.pid for gpu in Inventory("").snapshot().gpus for p in gpu.processes]
        pytest.skip(
            f"NVML lists no process {pid} (it lists {others or 'none'}): this runs in a pid namespace whose "
            "pids NVML cannot see, so per-process memory cannot be checked here"
        )
    return used


def gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"
