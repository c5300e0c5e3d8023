"""Prometheus gauges for GPUs and slices on jupyter_server's ``/metrics``.

jupyter_server serves ``prometheus_client``'s default registry. Rather than keeping labelled
``Gauge`` children that would linger after a slice ends, one collector is registered there and
builds the gauges from the monitor's latest sample at scrape time: a scrape costs no NVML call
and shows exactly the slices that exist. The series are the node exporter's
(:mod:`jupyter_vgpu.metrics.series`, one place for names, labels and figures), for this user's
slices, and the sums per slice this page had before the label contract.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ..metrics import counters
from ..metrics.series import NODE_SERIES, SERVER_SERIES, Page, machine_name
from .monitor import UsageMonitor
from .reclaim.board import NoticeBoard


class VGPUCollector(Collector):
    """Reads the latest sample of every running monitor (one per server in this process), the
    idle times on its server's notice board, and its server's counts of what happened."""

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname  # None: the machine's name (or the simulated machine's)
        self._monitors: dict[UsageMonitor, tuple[NoticeBoard | None, Callable[[], counters.EventCounts] | None]] = {}
        self._lock = threading.Lock()

    def add(
        self,
        monitor: UsageMonitor,
        board: NoticeBoard | None = None,
        counts: Callable[[], counters.EventCounts] | None = None,
    ) -> None:
        with self._lock:
            self._monitors.setdefault(monitor, (board, counts))

    def remove(self, monitor: UsageMonitor) -> None:
        with self._lock:
            self._monitors.pop(monitor, None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            samples = [(board, m.latest, self._hostname(m)) for m, (board, _) in self._monitors.items() if m.latest is not None]
            counted = [count for _, count in self._monitors.values() if count is not None]
            hostname = samples[0][2] if samples else self.hostname or machine_name()
        page = Page((*NODE_SERIES, *SERVER_SERIES))
        for board, sample, host in samples:
            assert sample is not None
            # The label contract's series name only this user's slices (another user's, from a
            # node broker, are the node exporter's to show); the sums per slice are as before.
            idle = board.idle_seconds if board is not None else _no_idle
            page.add(sample, host, shown=lambda s: not s.hidden, idle=idle)
            page.add_server_slices(sample.slices, idle)
        yield from page.families()
        yield from counters.families((count() for count in counted), hostname)

    def _hostname(self, monitor: UsageMonitor) -> str:
        return self.hostname or machine_name(monitor.ledger.inventory.simulate if monitor.ledger is not None else "")


def _no_idle(slice_id: str) -> None:
    return None


_collector: VGPUCollector | None = None
_registration = threading.Lock()


def collector() -> VGPUCollector:
    """The process's one collector, registered in the default registry on first use."""
    global _collector
    with _registration:
        if _collector is None:
            _collector = VGPUCollector()
            REGISTRY.register(_collector)
        return _collector
