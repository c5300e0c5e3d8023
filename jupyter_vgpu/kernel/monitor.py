"""``%vgpu monitor``: a live chart of this kernel's GPU memory and utilisation over the last minutes.

Above the chart, one line with the figures now: ``GPU 0 memory 1.2 GiB of 4.0 GiB reserved ·
peak 2.1 GiB · util 37%``. The chart (:mod:`.chart`) is drawn from the monitor's own
measurements, kept for the last :data:`DEFAULT_MINUTES` (or the monitor's whole life, if shorter).

Updates are scheduled with ``call_later`` on the kernel's own event loop (ipykernel 7 runs
its shell on an asyncio loop behind tornado's IOLoop), never from a thread: on ipykernel 7
widget messages sent from another thread lose the cell they belong to and are dropped or
misrouted. ``call_later`` also copies the cell's context, so every update carries the
monitor cell as its parent. The cost: the view pauses while a cell blocks the loop.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections import deque
from typing import Any

from ..errors import VGPUError
from ..units import format_bytes
from .chart import TEXT_COLOR, Point, history_svg
from .state import KernelState
from .status import title
from .usage import Usage, measure

DEFAULT_INTERVAL = 1.0
DEFAULT_MINUTES = 10.0

#: The class of a live view's box (its header and Stop button add ``-header``, ``-stop``).
VIEW_CLASS = "jp-vgpu-Monitor"
#: Added once the view stops: no later event may say it stopped again.
STOPPED_CLASS = "jp-vgpu-mod-stopped"
#: On simulated GPUs, beside the title, as the sidebar's badge reads.
SIMULATED_BADGE = (
    '<span class="jp-vgpu-Monitor-badge" title="These GPUs are simulated (JUPYTER_VGPU_SIMULATE): '
    'no real hardware is used." style="padding:0 6px;border-radius:8px;font-size:85%;'
    'background:var(--jp-warn-color3,#ffe0b2);color:var(--jp-warn-color0,#bf360c)">simulated</span>'
)

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
        self.window = 60 * min(minutes, DEFAULT_MINUTES)  # seconds of history the chart shows
        self.deadline = time.monotonic() + minutes * 60
        self.stopped: str | None = None
        self.ticks = 0
        self.history: deque[tuple[float, int, int | None]] = deque()  # (monotonic time, bytes, percent)
        self.peak: int | None = None  # the highest use this view measured
        self._handle: asyncio.TimerHandle | None = None
        # JupyterLab's jupyter-vgpu extension finds the view by these classes: after a kernel
        # restart it says so in the header and takes the Stop button away (the kernel cannot).
        self.header = widgets.HTML(_dom_classes=(f"{VIEW_CLASS}-header",))
        self.chart = widgets.HTML(layout=widgets.Layout(width="100%"))
        self.button = widgets.Button(
            description="Stop", icon="stop", tooltip="Stop this live view", _dom_classes=(f"{VIEW_CLASS}-stop",)
        )
        self.button.on_click(lambda _button: self.stop("stopped"))
        self.widget = widgets.VBox([self.header, self.chart, self.button], _dom_classes=(VIEW_CLASS,))
        self.simulated = bool(state.facts.simulate)

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
        self.widget.add_class(STOPPED_CLASS)
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

    # -- measuring and drawing ------------------------------------------------------------
    def _header_html(self, when: str) -> str:
        badge = f" · {SIMULATED_BADGE}" if self.simulated else ""
        return (
            f"<b>{html.escape(title(self.state))}</b> · GPU monitor{badge} · "
            f'<span class="{VIEW_CLASS}-when">{html.escape(when)}</span>'
        )

    def _update(self, usage: Usage) -> None:
        self.simulated = self.simulated or usage.simulated
        if not usage.available:
            self.header.value = self._header_html(f"not available: {usage.message or 'no GPU'}")
            return
        now = time.monotonic()
        used = usage.total_used or 0
        self.history.append((now, used, usage.top_utilization))
        while self.history and now - self.history[0][0] > self.window:
            self.history.popleft()
        self.peak = used if self.peak is None else max(self.peak, used)
        points = [Point(now - t, memory, util) for t, memory, util in self.history]
        reserved = self._reserved(usage)
        self.chart.value = (
            f'<div style="white-space:normal;overflow-wrap:anywhere;line-height:1.4;color:{TEXT_COLOR}">'
            f"{html.escape(figures_line(usage, reserved, self._peak()))}</div>"
            f"{history_svg(points, reserved, window=self.window)}"
        )
        self.header.value = self._header_html(f"updated {time.strftime('%H:%M:%S')}")

    def _reserved(self, usage: Usage) -> int | None:
        """The slice's whole reservation on the GPUs shown, or None for a kernel without a slice."""
        facts = self.state.facts
        if not facts.sliced or not facts.memory_reserved:
            return None
        return facts.memory_reserved * max(1, len(usage.mine))

    def _peak(self) -> int | None:
        """The kernel's peak (what ``%vgpu`` shows) when it has a slice, else this view's."""
        if self.state.facts.sliced and self.state.peak_used is not None:
            return self.state.peak_used
        return self.peak


def figures_line(usage: Usage, reserved: int | None, peak: int | None) -> str:
    """``GPU 0 memory 1.2 GiB of 4.0 GiB reserved · peak 2.1 GiB · util 37%``."""
    indices = [str(gpu.index) for gpu in usage.mine]
    gpus = f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {', '.join(indices)}"
    used = usage.total_used or 0
    if reserved:
        memory = f"{format_bytes(used)} of {format_bytes(reserved)} reserved"
        if used > reserved:
            memory += f" (over by {format_bytes(used - reserved)})"
    else:
        memory = f"{format_bytes(used)} of {format_bytes(sum(gpu.memory_total for gpu in usage.mine))} total"
    util = usage.top_utilization
    parts = [f"{gpus} memory {memory}", f"peak {format_bytes(peak)}", f"util {util}%" if util is not None else "util n/a"]
    return " · ".join(parts)


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
