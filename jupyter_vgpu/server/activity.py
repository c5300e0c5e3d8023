"""When each kernel last ran a cell, read from its IOPub channel: the idle reclaim's clock.

jupyter_server's ``last_activity`` moves with any message a kernel sends while it is busy, and a
browser that reloads makes every kernel busy for a moment (kernel_info, comm_info, the debugger's
info request, widgets asking for their state): four kernels idle for minutes read as idle for
seconds after one reload. Idle, for the reclaim, means no cell run and no GPU use, so this watch
counts only what an execute request that a person sent makes the kernel say:

* ``execute_input``: a cell began (kernels publish it for requests that are not ``silent``, so
  an extension's silent probes do not count);
* any later message whose parent is that request (its output, its ``status: idle`` at the end).

A cell is running from its ``execute_input`` until the ``status: idle`` of the same request, and
only while jupyter_server also says the kernel is busy (a lost ``idle`` does not keep a kernel
busy for ever). Kernels of any language are watched the same way; nothing runs in the kernel.

A kernel busy when the watch begins, or that becomes busy while the subscription is still
joining (:data:`JOIN_SECONDS`: a "Run all" the moment it started), may be running a cell whose
start nobody here heard: it counts as running one until the end of a shell request (they run one
at a time, so what ran unheard has ended; an execute request's end is its last cell). CI of
3de1153 gave a kernel whose first cell ran for minutes an idle notice. Later busy moments the
watch did not hear begin (a reload's kernel_info) are not cells.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.session import Session

#: jupyter_server's execution states of a kernel whose running cell (if any) is gone.
RESTARTING = frozenset({"restarting", "autorestarting", "starting", "dead"})
#: At most this many cells are tracked as running per kernel (a kernel that never says "idle").
RUNNING_LIMIT = 64
#: How long a new subscription may miss what the kernel publishes (ZMQ's slow joiner).
JOIN_SECONDS = 2.0
#: The requests a kernel handles one at a time, on its shell channel: the end of one of them means
#: that whatever ran before it has ended.
SHELL_REQUESTS = frozenset(
    {"execute_request", "kernel_info_request", "comm_info_request", "complete_request", "inspect_request",
     "history_request", "is_complete_request"}
)  # fmt: skip


@dataclass
class _Watched:
    stream: Any
    port: int | None
    session: Session
    last_cell: float | None = None
    running: set[str] = field(default_factory=set)
    joined_by: float = 0.0  # until then the subscription may still be joining
    assumed: bool = False  # counted as running a cell it did not hear begin


class ExecutionWatch:
    """Subscribes to the IOPub channel of each kernel it is asked about (on the server's event
    loop, where the stream's callbacks run too)."""

    def __init__(self, kernel_manager: Any, log: logging.Logger | None = None) -> None:
        self.kernel_manager = kernel_manager
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self._watched: dict[str, _Watched] = {}

    def last_cell(self, kernel_id: str) -> float | None:
        """When the kernel last began, produced output for or finished a cell (None: not seen)."""
        found = self._watched.get(kernel_id)
        return found.last_cell if found else None

    def running(self, kernel_id: str, kernel: Any) -> bool:
        """True while a cell runs in the kernel."""
        found = self._watched.get(kernel_id)
        if found is None or getattr(kernel, "execution_state", None) != "busy":
            return False
        if not found.running and time.time() < found.joined_by:
            found.assumed = True  # busy with something that began before the watch could hear it
        return bool(found.running) or found.assumed

    def watch(self, kernel_ids: Iterable[str]) -> None:
        """Watch these kernels (a restarted kernel on new ports is watched anew); stop watching the rest."""
        wanted = set(kernel_ids)
        for gone in [k for k in self._watched if k not in wanted]:
            self._close(gone)
        for kernel_id in wanted:
            try:
                kernel = self.kernel_manager.get_kernel(kernel_id)
            except KeyError:
                continue
            port = getattr(kernel, "iopub_port", None)
            found = self._watched.get(kernel_id)
            if found is not None and getattr(kernel, "execution_state", None) in RESTARTING:
                found.running.clear()  # a cell cut short by a restart never says "idle"
            if found is not None and found.port == port:
                continue
            if found is not None:
                self._close(kernel_id)
            try:
                self._watched[kernel_id] = self._subscribe(kernel_id, kernel, port)
            except Exception as error:  # a kernel that just went: asked again next tick
                self.log.debug("jupyter-vgpu: cannot watch kernel %s's cells: %s", kernel_id, error)

    def _subscribe(self, kernel_id: str, kernel: Any, port: int | None) -> _Watched:
        stream = kernel.connect_iopub()
        session = Session(config=kernel.session.config, key=kernel.session.key)
        watched = _Watched(stream, port, session, joined_by=time.time() + JOIN_SECONDS)
        watched.assumed = getattr(kernel, "execution_state", None) == "busy"  # since before the watch

        def heard(parts: list[bytes]) -> None:
            try:
                _, message = session.feed_identities(parts)
                msg = session.deserialize(message, content=False)
            except Exception:
                return  # not a message of this kernel's session
            kind = msg["header"].get("msg_type")
            parent = msg.get("parent_header") or {}
            request = parent.get("msg_id")
            asked = parent.get("msg_type")
            done = kind == "status" and asked in SHELL_REQUESTS
            done = done and session.unpack(msg["content"]).get("execution_state") == "idle"
            ended = done and asked == "execute_request"
            if kind == "execute_input" and asked == "execute_request" and request:
                if len(watched.running) < RUNNING_LIMIT:
                    watched.running.add(request)
                watched.last_cell = time.time()
            elif request in watched.running:
                watched.last_cell = time.time()
                if ended:
                    watched.running.discard(request)
            if watched.assumed and (done or kind == "execute_input"):
                watched.assumed = False  # shell requests run one at a time: what ran unheard has ended
                if ended or kind == "execute_input":
                    watched.last_cell = time.time()

        stream.on_recv(heard)
        return watched

    def _close(self, kernel_id: str) -> None:
        found = self._watched.pop(kernel_id, None)
        if found is not None:
            try:
                found.stream.close()
            except Exception:  # a kernel's socket already gone with it: nothing left to close
                pass

    def close(self) -> None:
        for kernel_id in list(self._watched):
            self._close(kernel_id)
