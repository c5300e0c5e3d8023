"""Real ipykernel kernels on simulated GPUs, driven through jupyter_client.

A :class:`Workspace` holds a simulation file, a ledger and an isolated IPython/Jupyter
configuration; :class:`Kernel` starts ``python -m ipykernel_launcher --ext=jupyter_vgpu``
with a slice's environment (what the provisioner does) and runs cells, keeping every
iopub message so tests can assert what a user would see.
"""

from __future__ import annotations

import json
import os
import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import KernelManager

from jupyter_vgpu.config import DEFAULT_CONTEXT_ALLOWANCE
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.slices import Ledger, Slice, SliceRequest, cpu_environment, slice_environment

EXTENSION = "--ext=jupyter_vgpu"
_STRIP = ("JUPYTER_VGPU_", "CUDA_", "XLA_", "CUPY_", "TF_", "IPYTHONDIR", "JUPYTER_CONFIG", "JUPYTER_PATH")


@dataclass
class Outcome:
    """Everything one executed cell produced."""

    reply: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)

    def _of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["msg_type"] == kind]

    @property
    def stdout(self) -> str:
        return "".join(m["content"]["text"] for m in self._of("stream") if m["content"]["name"] == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(m["content"]["text"] for m in self._of("stream") if m["content"]["name"] == "stderr")

    @property
    def displays(self) -> list[dict[str, Any]]:
        """The data bundles of display_data and execute_result messages."""
        return [m["content"]["data"] for m in self.messages if m["msg_type"] in ("display_data", "execute_result")]

    @property
    def error(self) -> dict[str, Any] | None:
        errors = self._of("error")
        return errors[0]["content"] if errors else None

    @property
    def ok(self) -> bool:
        return self.reply["content"]["status"] == "ok"


class Kernel:
    """One real ipykernel process and a blocking client."""

    def __init__(self, env: dict[str, str], *, extension: bool = True, kernel_name: str = "python3") -> None:
        self.manager = KernelManager(kernel_name=kernel_name)
        self.manager.start_kernel(env=env, extra_arguments=[EXTENSION] if extension else [])
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=90)

    @property
    def pid(self) -> int:
        return int(self.eval("__import__('os').getpid()"))

    def eval(self, expression: str) -> Any:
        """The value of a JSON-able ``expression`` in the kernel."""
        outcome = self.run(f"print(__import__('json').dumps({expression}))")
        assert outcome.ok, outcome.error or outcome.stderr
        return json.loads(outcome.stdout.strip().splitlines()[-1])

    def run(self, code: str, timeout: float = 120) -> Outcome:
        """Execute ``code`` and return its reply and iopub messages (until the kernel is idle)."""
        msg_id = self.client.execute(code)
        messages: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"cell did not finish in {timeout}s: {code!r}")
            try:
                msg = self.client.get_iopub_msg(timeout=remaining)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            messages.append(msg)
        reply = self.client.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=timeout)
        return Outcome(reply, messages)

    def listen(self, seconds: float) -> list[dict[str, Any]]:
        """Every iopub message the kernel sends in the next ``seconds`` (it may be idle)."""
        messages = []
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                messages.append(self.client.get_iopub_msg(timeout=remaining))
            except queue.Empty:
                break
        return messages

    def send_comm(self, comm_id: str, data: dict[str, Any]) -> None:
        """What a front end sends when the user clicks a widget."""
        msg = self.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.client.shell_channel.send(msg)

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


class Workspace:
    """A simulated 16 GiB GPU (JSON file), a ledger, and isolated IPython/Jupyter config dirs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.simulation = root / "gpus.json"
        self.ledger_path = root / "vgpu" / "ledger.sqlite"
        self.ipython_dir = root / "ipython"
        self.config_dir = root / "jupyter-config"
        for folder in (self.ipython_dir, self.config_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.set_usage([])

    def set_usage(self, processes: list[dict[str, Any]]) -> None:
        """Rewrite the simulated GPU's per-process usage (e.g. the kernel's pid and memory)."""
        devices = [{"name": "Simulated A100", "memory": "16GiB", "uuid": "GPU-5e1a0000-0000-4000-8000-00000000a100"}]
        tmp = self.simulation.with_suffix(".tmp")
        tmp.write_text(json.dumps({"devices": devices, "processes": processes}))
        os.replace(tmp, self.simulation)
        time.sleep(0.02)  # a new mtime even on coarse clocks

    def ledger(self) -> Ledger:
        return Ledger(self.ledger_path, Inventory(str(self.simulation)), context_allowance=DEFAULT_CONTEXT_ALLOWANCE)

    def reserve(self, fraction: float | None = 0.25, *, memory: str | None = None, logical_devices: int = 1) -> Slice:
        request = SliceRequest.parse(fraction=None if memory else fraction, memory=memory, logical_devices=logical_devices)
        ledger = self.ledger()
        try:
            return ledger.reserve(request, holder_kind="kernel", holder="tests/kernel")
        finally:
            ledger.close()

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP)}
        env.update(
            {
                "JUPYTER_VGPU_SIMULATE": str(self.simulation),
                "JUPYTER_VGPU_LEDGER": str(self.ledger_path),
                "IPYTHONDIR": str(self.ipython_dir),
                "JUPYTER_CONFIG_DIR": str(self.config_dir),
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            }
        )
        return env

    def slice_env(self, slice_: Slice) -> dict[str, str]:
        """What the provisioner gives a kernel holding ``slice_``."""
        env = self.base_env()
        env.update(slice_environment(slice_, ledger_path=str(self.ledger_path), simulate=str(self.simulation)))
        return env

    def cpu_env(self, *, logical_devices: int = 1, reason: str = "No NVIDIA GPU is available here.") -> dict[str, str]:
        env = self.base_env()
        env.update(cpu_environment(logical_devices=logical_devices, reason=reason))
        return env


def module_kernel(tmp_path_factory: pytest.TempPathFactory, name: str, **reserve: Any) -> Iterator[tuple[Workspace, Slice, Kernel]]:
    """A workspace, a slice and a kernel shared by one test module."""
    workspace = Workspace(tmp_path_factory.mktemp(name))
    slice_ = workspace.reserve(**reserve)
    kernel = Kernel(workspace.slice_env(slice_))
    try:
        yield workspace, slice_, kernel
    finally:
        kernel.stop()
