"""A login node for the Slurm tests: kernelspecs with ``"launcher": "slurm"``, real kernels through
jupyter_client's AsyncKernelManager and the vgpu-provisioner, and the Slurm test cluster's
environment in this process (the provisioner's Slurm clients read it)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelManager

from .cluster import SlurmCluster

#: Seconds a test waits for anything a kernel or Slurm does.
BOUND = 60.0


class Login:
    """This process as a login node of the test cluster (its environment set by the fixture)."""

    def __init__(self, cluster: SlurmCluster, folder: Path) -> None:
        self.cluster = cluster
        self.folder = folder
        self.kernels_dir = folder / "jupyter-path" / "kernels"
        self.kernels_dir.mkdir(parents=True)
        self.managers: list[AsyncKernelManager] = []

    def spec(self, name: str, display: str = "Python 3 (test, Slurm)", **config: Any) -> str:
        """Install kernelspec ``name`` whose provisioner config is ``config`` plus the slurm launcher."""
        folder = self.kernels_dir / name
        folder.mkdir()
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": display,
            "language": "python",
            "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": {"launcher": "slurm", **config}}},
        }
        (folder / "kernel.json").write_text(json.dumps(spec))
        return name

    async def start(self, name: str) -> AsyncKernelManager:
        km = AsyncKernelManager(kernel_name=name)
        self.managers.append(km)
        await asyncio.wait_for(km.start_kernel(), BOUND)
        return km

    async def stop_all(self) -> None:
        for km in self.managers:
            if km.has_kernel:
                await asyncio.wait_for(km.shutdown_kernel(now=True), BOUND)

    def job_of(self, km: AsyncKernelManager) -> str:
        return str(km.provisioner.launch_state["job_id"])  # type: ignore[union-attr]

    def kernel_jobs(self) -> dict[str, dict[str, str]]:
        """squeue's view: job id -> {name, state, reason, node}."""
        out = self.cluster.run("squeue", "--noheader", "--format=%i|%j|%T|%r|%N", timeout=10).stdout
        jobs = {}
        for line in out.splitlines():
            job, name, state, reason, node = line.split("|")
            jobs[job] = {"name": name, "state": state, "reason": reason, "node": node}
        return jobs

    async def until(self, check: Callable[[], Any], what: str, bound: float = BOUND) -> Any:
        deadline = time.monotonic() + bound
        while True:
            value = await asyncio.to_thread(check)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} within {bound:.0f} s")
            await asyncio.sleep(0.1)


async def run_code(km: AsyncKernelManager, code: str, timeout: float = BOUND) -> str:
    """Execute ``code`` in the kernel; its stdout, stderr and displayed text."""
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=timeout)
        chunks: list[str] = []

        def collect(msg: dict[str, Any]) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                chunks.append(content["text"])
            elif msg["msg_type"] == "error":
                chunks.append("\n".join(content["traceback"]))
            elif msg["msg_type"] in ("display_data", "execute_result"):
                chunks.append(content["data"].get("text/plain", ""))

        await client.execute_interactive(code, output_hook=collect, timeout=timeout)
        return "".join(chunks)
    finally:
        client.stop_channels()
