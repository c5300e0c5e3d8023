"""``%vgpu monitor``: a live widget of this kernel's GPU memory and utilisation.

Updates are scheduled with ``call_later`` on the kernel's own event loop (ipykernel 7 runs
its shell on an asyncio loop behind tornado's IOLoop), never from a thread: on ipykernel 7
widget messages sent from another thread lose the cell they belong to and are dropped or
misrouted. ``call_later`` also copies the cell's context, so every update carries the
monitor cell as its parent. The cost: the view pauses while a cell blocks the loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..errors import VGPUError
from ..units import format_bytes
from .state import KernelState
from .status import title
from .usage import Usage, measure

DEFAULT_INTERVAL = 1.0
DEFAULT_MINUTES = 10.0

_running: list[Monitor] = []


class MonitorUnavailable(VGPUError):
    """No event loop to drive the view (not a Jupyter kernel) or bad monitor options."""


def event_loop(shell: Any) -> asyncio.AbstractEventLoop:
    """The loop running this cell, or the kernel's main loop."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    io_loop = getattr(getattr(shell, "kernel", None), "io_loop", None)
    loop = getattr(io_loop, "asyncio_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop):
        return loop
    raise MonitorUnavailable(
        "%vgpu monitor needs a Jupyter kernel (it updates from the kernel's event loop); "
        "use `jupyter vgpu status` in a terminal instead."
    )


class Monitor:
    """One live view; :meth:`start` shows nothing by itself, display :attr:`widget`."""

    def __init__(self, state: KernelState, loop: asyncio.AbstractEventLoop, *, interval: float, minutes: float) -> None:
        import ipywidgets as widgets  # only when a monitor is asked for

        if not 0.1 <= interval <= 3600:
            raise MonitorUnavailable(f"--interval {interval:g} is not allowed; use 0.1 to 3600 seconds.")
        if not 0 < minutes <= 24 * 60:
            raise MonitorUnavailable(f"--minutes {minutes:g} is not allowed; use more than 0, up to 1440.")
        self.state = state
        self.loop = loop
        self.interval = interval
        self.minutes = minutes
        self.deadline = time.monotonic() + minutes * 60
        self.stopped: str | None = None
        self.ticks = 0
        self._handle: asyncio.TimerHandle | None = None
        self._widgets = widgets
        self.header = widgets.HTML()
        self.memory: dict[str, Any] = {}
        self.utilization: dict[str, Any] = {}
        self.rows = widgets.VBox()
        self._layout: tuple[str, ...] = ()
        self.button = widgets.Button(description="Stop", icon="stop", tooltip="Stop this live view")
        self.button.on_click(lambda _button: self.stop("stopped"))
        self.widget = widgets.VBox([self.header, self.rows, self.button])

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        _running.append(self)
        self._tick()

    def stop(self, reason: str) -> None:
        if self.stopped is not None:
            return
        self.stopped = reason
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self in _running:
            _running.remove(self)
        self.button.disabled = True
        self.header.value = self._header_html(f"{reason} at {time.strftime('%H:%M:%S')}")

    def _tick(self) -> None:
        self._handle = None
        if self.stopped is not None:
            return
        try:
            self._update(measure(self.state))
        except Exception as error:  # a view that cannot update says why and stops
            self.stop(f"stopped: {error}")
            return
        self.ticks += 1
        if time.monotonic() >= self.deadline:
            self.stop(f"stopped after {self.minutes:g} minutes")
            return
        self._handle = self.loop.call_later(self.interval, self._tick)

    # -- drawing --------------------------------------------------------------------------
    def _header_html(self, when: str) -> str:
        return f"<b>{title(self.state)}</b> · GPU monitor · {when}"

    def _update(self, usage: Usage) -> None:
        if not usage.available:
            self.header.value = self._header_html(f"not available: {usage.message or 'no GPU'}")
            return
        facts = self.state.facts
        layout = tuple(gpu.uuid for gpu in usage.mine)
        if layout != self._layout:
            self._build(usage)
            self._layout = layout
        for gpu in usage.mine:
            capacity = facts.memory_reserved if facts.sliced and facts.memory_reserved else gpu.memory_total
            used = usage.used.get(gpu.uuid, 0)
            util = usage.utilization.get(gpu.uuid)
            bar, label = self.memory[gpu.uuid]
            bar.max = float(capacity)
            bar.value = float(min(used, capacity))
            bar.bar_style = "danger" if used > capacity else ("warning" if used >= 0.9 * capacity else "success")
            label.value = f"{format_bytes(used)} / {format_bytes(capacity)}"
            util_bar, util_label = self.utilization[gpu.uuid]
            util_bar.value = util or 0
            util_label.value = f"{util}%" if util is not None else "n/a"
        peak = f"peak {format_bytes(self.state.peak_used)} · " if facts.sliced else ""
        self.header.value = self._header_html(f"{peak}updated {time.strftime('%H:%M:%S')}")

    def _build(self, usage: Usage) -> None:
        w = self._widgets
        rows = []
        for gpu in usage.mine:
            memory = (w.FloatProgress(min=0.0, max=1.0, value=0.0, description=f"GPU {gpu.index} memory"), w.Label())
            utilization = (w.IntProgress(min=0, max=100, value=0, description=f"GPU {gpu.index} util"), w.Label())
            self.memory[gpu.uuid] = memory
            self.utilization[gpu.uuid] = utilization
            rows.extend([w.HBox(list(memory)), w.HBox(list(utilization))])
        self.rows.children = tuple(rows)


def start(shell: Any, state: KernelState, *, interval: float, minutes: float) -> Monitor:
    """Create and start a live view; the caller displays ``monitor.widget``."""
    monitor = Monitor(state, event_loop(shell), interval=interval, minutes=minutes)
    monitor.start()
    return monitor


def stop_all() -> int:
    """Stop every live view of this kernel; returns how many were running."""
    running = list(_running)
    for monitor in running:
        monitor.stop("stopped by %vgpu monitor stop")
    return len(running)
