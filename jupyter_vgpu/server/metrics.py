"""Prometheus gauges for GPUs and slices on jupyter_server's ``/metrics``.

jupyter_server serves ``prometheus_client``'s default registry. Rather than keeping labelled
``Gauge`` children that would linger after a slice ends, one collector is registered there and
builds the gauges from the monitor's latest sample at scrape time: a scrape costs no NVML call
and shows exactly the slices that exist.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .monitor import UsageMonitor
from .reclaim.board import NoticeBoard

_PREFIX = "jupyter_vgpu"


class VGPUCollector(Collector):
    """Reads the latest sample of every running monitor (one per server in this process), and
    the idle times on its server's notice board."""

    def __init__(self) -> None:
        self._monitors: dict[UsageMonitor, NoticeBoard | None] = {}
        self._lock = threading.Lock()

    def add(self, monitor: UsageMonitor, board: NoticeBoard | None = None) -> None:
        with self._lock:
            self._monitors.setdefault(monitor, board)

    def remove(self, monitor: UsageMonitor) -> None:
        with self._lock:
            self._monitors.pop(monitor, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gpu_labels = ["gpu", "uuid"]
        slice_labels = ["slice", "kernel_id"]
        gpu_total = GaugeMetricFamily(f"{_PREFIX}_gpu_memory_total_bytes", "GPU memory capacity.", labels=gpu_labels)
        gpu_used = GaugeMetricFamily(
            f"{_PREFIX}_gpu_memory_used_bytes", "GPU memory in use by all processes (NVML).", labels=gpu_labels
        )
        gpu_reserved = GaugeMetricFamily(
            f"{_PREFIX}_gpu_memory_reserved_bytes", "GPU memory reserved by jupyter-vgpu slices.", labels=gpu_labels
        )
        gpu_foreign = GaugeMetricFamily(
            f"{_PREFIX}_gpu_memory_foreign_bytes",
            "GPU memory used outside slices (processes without a slice, memory no process accounts for).",
            labels=gpu_labels,
        )
        gpu_free = GaugeMetricFamily(
            f"{_PREFIX}_gpu_memory_free_bytes", "GPU memory a new slice could reserve now.", labels=gpu_labels
        )
        gpu_util = GaugeMetricFamily(
            f"{_PREFIX}_gpu_utilization_percent", "GPU utilisation (NVML), percent.", labels=gpu_labels
        )
        # Telemetry as DCGM's exporter names it, for dashboards that have no DCGM (absent where
        # NVML has no answer).
        telemetry = {
            "power_draw": GaugeMetricFamily(f"{_PREFIX}_gpu_power_watts", "GPU board power draw (NVML), W.", labels=gpu_labels),
            "temperature": GaugeMetricFamily(
                f"{_PREFIX}_gpu_temperature_celsius", "GPU die temperature (NVML), °C.", labels=gpu_labels
            ),
            "pcie_tx": GaugeMetricFamily(
                f"{_PREFIX}_gpu_pcie_tx_bytes_per_second", "PCIe throughput from the GPU (NVML), bytes/s.", labels=gpu_labels
            ),
            "pcie_rx": GaugeMetricFamily(
                f"{_PREFIX}_gpu_pcie_rx_bytes_per_second", "PCIe throughput to the GPU (NVML), bytes/s.", labels=gpu_labels
            ),
        }
        slice_reserved = GaugeMetricFamily(
            f"{_PREFIX}_slice_memory_reserved_bytes",
            "GPU memory a slice reserves, all its GPUs, context allowance included.",
            labels=slice_labels,
        )
        slice_used = GaugeMetricFamily(
            f"{_PREFIX}_slice_memory_used_bytes",
            "GPU memory a slice's processes use, all its GPUs (absent when unknown).",
            labels=slice_labels,
        )
        slice_idle = GaugeMetricFamily(
            f"{_PREFIX}_slice_idle_seconds",
            "Seconds a kernel's slice has run nothing and used no GPU (absent for commands and other servers' kernels).",
            labels=slice_labels,
        )
        slice_limit = GaugeMetricFamily(
            f"{_PREFIX}_slice_memory_limit_bytes",
            "GPU memory an elastic slice may burst to, all its GPUs (absent for fixed slices).",
            labels=slice_labels,
        )
        slice_burst = GaugeMetricFamily(
            f"{_PREFIX}_slice_memory_burst_bytes",
            "GPU memory an elastic slice uses above its request, within its limit (absent for fixed slices).",
            labels=slice_labels,
        )
        slice_util = GaugeMetricFamily(
            f"{_PREFIX}_slice_utilization_percent",
            "GPU utilisation of a slice's processes, percent (absent when unknown).",
            labels=slice_labels,
        )
        with self._lock:
            samples = [(board, m.latest) for m, board in self._monitors.items() if m.latest is not None]
        for board, sample in samples:
            assert sample is not None
            for entry in sample.occupancy.gpus:
                labels = [str(entry.gpu.index), entry.gpu.uuid]
                gpu_total.add_metric(labels, entry.gpu.memory_total)
                gpu_reserved.add_metric(labels, entry.reserved)
                gpu_foreign.add_metric(labels, entry.foreign)
                gpu_free.add_metric(labels, entry.free)
                if entry.gpu.memory_used is not None:
                    gpu_used.add_metric(labels, entry.gpu.memory_used)
                if entry.gpu.utilization is not None:
                    gpu_util.add_metric(labels, entry.gpu.utilization)
                for name, family in telemetry.items():
                    if (value := getattr(entry.gpu, name)) is not None:
                        family.add_metric(labels, value)
            for usage in sample.slices:
                kernel_id = usage.slice.holder if usage.slice.holder_kind == "kernel" else ""
                labels = [usage.slice.id, kernel_id]
                slice_reserved.add_metric(labels, usage.memory_reserved_total)
                if usage.memory_used is not None:
                    slice_used.add_metric(labels, usage.memory_used)
                if usage.utilization is not None:
                    slice_util.add_metric(labels, usage.utilization)
                if board is not None and (idle := board.idle_seconds(usage.slice.id)) is not None:
                    slice_idle.add_metric(labels, idle)
                if usage.memory_burst is not None:
                    slice_limit.add_metric(labels, sum(usage.slice.memory_allowed))
                    slice_burst.add_metric(labels, usage.memory_burst)
        yield from (gpu_total, gpu_used, gpu_reserved, gpu_foreign, gpu_free, gpu_util, *telemetry.values())
        yield from (slice_reserved, slice_used, slice_util, slice_idle, slice_limit, slice_burst)


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
