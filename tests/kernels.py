"""The suite's one kernel driver: a real ipykernel process and a blocking jupyter_client client.

A test starts a kernel here (by kernelspec name, with an environment and extra arguments: what a
provisioner does), or attaches to one a server runs (its connection file or info). Every iopub
message of a cell is kept, so a test asserts what a user would see in the notebook.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_client import KernelManager
from jupyter_client.blocking.client import BlockingKernelClient

EXTENSION = "--ext=jupyter_vgpu"


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
        return self.reply.get("content", {}).get("status") == "ok"


class Kernel:
    """One real kernel and a blocking client."""

    def __init__(self, client: BlockingKernelClient, manager: KernelManager | None = None, *, ready: float = 120) -> None:
        self.manager = manager
        self.client = client
        # A client without a manager judges a kernel alive by its heartbeat, and jupyter_client's
        # channel calls a kernel dead after one ping unanswered for 1 s: a kernel still starting on a
        # loaded machine (CI's two cores) was read as "died before replying to kernel_info".
        self.client.hb_channel.time_to_dead = 10.0
        self.client.start_channels()
        self.client.wait_for_ready(timeout=ready)
        self._pid: int | None = None

    @classmethod
    def start(
        cls,
        kernel_name: str = "python3",
        env: Mapping[str, str] | None = None,
        *,
        extension: bool = False,
        arguments: Sequence[str] = (),
    ) -> Kernel:
        """Start ``kernel_name`` (through its provisioner) with ``env`` (default: this process's)."""
        manager = KernelManager(kernel_name=kernel_name)
        extra = [*arguments, *([EXTENSION] if extension else [])]
        if env is None:
            manager.start_kernel(extra_arguments=extra)
        else:
            manager.start_kernel(env=dict(env), extra_arguments=extra)
        return cls(manager.client(), manager)

    @classmethod
    def attach(cls, connection: str | Mapping[str, Any]) -> Kernel:
        """A kernel another process (a Jupyter server) runs: its connection file or info."""
        client = BlockingKernelClient()
        if isinstance(connection, str):
            client.load_connection_file(connection)
        else:
            client.load_connection_info(dict(connection))
        return cls(client)

    @property
    def pid(self) -> int:
        if self._pid is None:
            self._pid = int(self.eval("__import__('os').getpid()"))
        return self._pid

    def submit(self, code: str) -> str:
        """Start executing ``code``; :meth:`collect` waits for it (several kernels can run at once)."""
        return str(self.client.execute(code))

    def collect(self, msg_id: str, timeout: float = 120) -> Outcome:
        """Wait until the cell ``msg_id`` is done; its reply and iopub messages."""
        messages: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"the cell did not finish in {timeout} s")
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

    def run(self, code: str, timeout: float = 120) -> Outcome:
        """Execute ``code`` and return its reply and iopub messages (until the kernel is idle)."""
        return self.collect(self.submit(code), timeout)

    def eval(self, expression: str) -> Any:
        """The value of a JSON-able ``expression`` in the kernel."""
        outcome = self.run(f"print(__import__('json').dumps({expression}))")
        assert outcome.ok, outcome.error or outcome.stderr
        return json.loads(outcome.stdout.strip().splitlines()[-1])

    def env(self, name: str) -> str:
        """An environment variable of the kernel process ('' when unset)."""
        return str(self.eval(f"__import__('os').environ.get({name!r}, '')"))

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
        if self.manager is not None:
            self.manager.shutdown_kernel(now=True)
