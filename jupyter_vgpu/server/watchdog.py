"""The watchdog: what happens to a kernel that uses more GPU memory than its slice.

After every sample the watchdog compares each slice's usage with its reservation. A slice
counts as over its limit when it exceeds the reservation by more than ``tolerance`` (a share
of the reservation); once it has stayed over for ``grace`` seconds the admin's action is
applied, once per episode: the episode ends when usage falls back within the limit or the
kernel's process changes (a restart). Actions on kernels go through the server's kernel
manager, exactly as if the user had pressed interrupt, restart or shut down; a slice held by
a command (``jupyter vgpu run``) or by a kernel of another server is only warned about.

This is the "watched" enforcement tier: it reacts after the fact, it does not stop an
allocation from happening.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_core.utils import ensure_async

from ..slices.reports import add_notice
from ..slices.usage import SliceUsage
from ..units import format_bytes, shorten
from .monitor import Sample

ACTIONS = ("none", "warn", "interrupt", "restart", "shutdown")
_PAST = {"warn": "warned", "interrupt": "interrupted", "restart": "restarted", "shutdown": "shut down"}
_PRESENT = {"interrupt": "interrupts", "restart": "restarts", "shutdown": "shuts down"}

#: Seconds between telling a kernel what is about to happen to it and doing it, so the notice
#: reaches the cell that is running (the kernel checks for notices every half second).
NOTICE_SECONDS = 2.0


@dataclass(frozen=True)
class WatchdogEvent:
    """One thing the watchdog did, as the API and the log show it."""

    t: float
    slice_id: str
    kernel_id: str | None
    action: str  # what was done: warn | interrupt | restart | shutdown | idle (reclaimed while idle)
    ok: bool
    message: str
    path: str | None = None  # the notebook, for a kernel started from one
    memory_used: int | None = None
    memory_reserved: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "slice_id": self.slice_id,
            "kernel_id": self.kernel_id,
            "action": self.action,
            "ok": self.ok,
            "message": self.message,
            "path": self.path,
            "memory_used": self.memory_used,
            "memory_reserved": self.memory_reserved,
        }


class Watchdog:
    """Applies ``action`` to slices over their limit. Call :meth:`check` with every sample."""

    def __init__(
        self,
        kernel_manager: Any,
        *,
        action: str = "warn",
        tolerance: float = 0.05,
        grace: float = 10.0,
        max_events: int = 20,
        log: logging.Logger | None = None,
        on_action: Any = None,
        ledger_path: str | Path | None = None,
        notice_seconds: float = NOTICE_SECONDS,
    ) -> None:
        if action not in ACTIONS:
            raise ValueError(f"over_limit_action {shorten(action)} is not one of {', '.join(ACTIONS)}.")
        self.kernel_manager = kernel_manager
        self.action = action
        self.tolerance = tolerance
        self.grace = grace
        self.log = log or logging.getLogger("jupyter_vgpu.server")
        self.on_action = on_action
        self.ledger_path = ledger_path  # where the kernels read their notices (beside their reports)
        self.notice_seconds = notice_seconds
        self._max_events = max_events
        self._events: dict[str, deque[WatchdogEvent]] = {}
        self._recent: deque[WatchdogEvent] = deque(maxlen=100)  # outlives the slices it names
        self._over_since: dict[str, tuple[float, int | None]] = {}  # slice -> (since, holder pid)
        self._acted: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Actions since the server started: (kind, action, ok or failed) -> times.
        self.counts: dict[tuple[str, str, str], int] = {}

    def events(self, slice_id: str) -> list[WatchdogEvent]:
        """The slice's recent events, oldest first."""
        return list(self._events.get(slice_id, ()))

    def recent_events(self) -> list[WatchdogEvent]:
        """The last 100 events of any slice, including slices that have since ended."""
        return list(self._recent)

    def record(self, event: WatchdogEvent, *, kind: str = "watchdog", action: str | None = None) -> None:
        """Keep an event of this watchdog's or of another actor's (a reclaim source, whose
        ``kind`` is its own and whose event's action is that kind; ``action`` then says what it
        did), and count it for /metrics."""
        self._events.setdefault(event.slice_id, deque(maxlen=self._max_events)).append(event)
        self._recent.append(event)
        key = (kind, action or event.action, "ok" if event.ok else "failed")
        self.counts[key] = self.counts.get(key, 0) + 1

    async def check(self, sample: Sample) -> None:
        """Compare each slice with its limit and start the configured action where due."""
        if self.action == "none" or sample.message is not None:
            return
        live = set()
        for usage in sample.slices:
            sid = usage.slice.id
            live.add(sid)
            if usage.overshoot() <= self.tolerance:
                self._over_since.pop(sid, None)
                self._acted.discard(sid)
                continue
            since, pid = self._over_since.get(sid, (sample.taken_at, usage.pid))
            if pid != usage.pid:  # restarted: a new process, a new episode
                since, pid = sample.taken_at, usage.pid
                self._acted.discard(sid)
            self._over_since[sid] = (since, pid)
            if sid in self._acted or sample.taken_at - since < self.grace:
                continue
            self._acted.add(sid)
            task = asyncio.get_running_loop().create_task(self._act(usage, sample.taken_at - since))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for gone in [s for s in self._over_since if s not in live]:
            del self._over_since[gone]
            self._acted.discard(gone)
        for gone in [s for s in self._events if s not in live]:
            del self._events[gone]

    async def _act(self, usage: SliceUsage, over_for: float) -> None:
        slice_ = usage.slice
        kernel_id = slice_.holder if slice_.holder_kind == "kernel" else None
        action = self.action
        ours = kernel_id is not None and kernel_id in self.kernel_manager
        if action != "warn" and not ours:
            action = "warn"
            why = " (only warned: not a kernel of this server)"
        else:
            why = ""
        words = (
            f"{slice_.describe_holder()} uses {format_bytes(usage.memory_used)} of GPU memory ({usage.source_text}), more "
            f"than the {format_bytes(usage.memory_reserved_total)} its slice {slice_.id} reserves, for {over_for:.0f} s"
        )
        if action != "warn" and self.notice_seconds > 0:
            ahead = f"{words}: the server {_PRESENT[action]} it in {self.notice_seconds:g} s (the admin's over-limit policy)."
            await self._notify(usage, action, "ahead", ahead)
            await asyncio.sleep(self.notice_seconds)
        ok = True
        try:
            if action == "interrupt":
                await ensure_async(self.kernel_manager.interrupt_kernel(kernel_id))
            elif action == "restart":
                await ensure_async(self.kernel_manager.restart_kernel(kernel_id))
            elif action == "shutdown":
                await ensure_async(self.kernel_manager.shutdown_kernel(kernel_id))
            if action == "warn":
                message = f"{words}: warned{why} (the admin's over-limit policy only warns; the slice's memory is not enforced)."
            else:
                message = f"{words}: {_PAST[action]} (the admin's over-limit policy)."
        except Exception as error:
            ok = False
            message = f"{words}: could not be {_PAST[action]} ({error})."
        event = WatchdogEvent(
            time.time(), slice_.id, kernel_id, action, ok, message,
            path=slice_.labels.get("path") if kernel_id else None,
            memory_used=usage.memory_used, memory_reserved=usage.memory_reserved_total,
        )  # fmt: skip
        self.record(event)
        (self.log.warning if ok else self.log.error)("jupyter-vgpu watchdog: %s", message)
        if action in ("warn", "interrupt"):  # the kernel is still there to hear it
            await self._notify(usage, action, "done", message)
        if action == "shutdown" and self.on_action is not None:
            self.on_action()

    async def _notify(self, usage: SliceUsage, action: str, stage: str, message: str) -> None:
        """Tell the slice's holder (its kernel prints it into the running cell)."""
        await leave_notice(self.ledger_path, usage, action, stage, message, self.log)

    async def stop(self) -> None:
        """Wait for actions in progress (a restart takes a few seconds)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def leave_notice(
    ledger_path: str | Path | None, usage: SliceUsage, action: str, stage: str, message: str, log: logging.Logger
) -> None:
    """Leave a notice for a slice's holder (kernel.notices prints it into the running cell, or
    the next one): the watchdog's actions and the idle reclaim's."""
    if ledger_path is None:
        return
    notice = {
        "id": f"{time.time():.3f}-{action}-{stage}",
        "t": time.time(),
        "action": action,
        "stage": stage,
        "message": message,
        "memory_used": usage.memory_used,
        "memory_reserved": usage.memory_reserved_total,
    }
    try:
        await asyncio.to_thread(add_notice, ledger_path, usage.slice.id, notice)
    except OSError as error:
        log.warning("jupyter-vgpu: could not leave a notice for slice %s: %s", usage.slice.id, error)
