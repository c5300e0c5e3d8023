"""Every series jupyter-vgpu puts on a Prometheus page: names, labels, help, and the figures one
reading of a node gives them (docs/rest.md, "Prometheus").

The label contract (docs/rest.md, "Label contract"), shaped so that a site joins ours to NVIDIA's
dcgm-exporter on the GPU's ``UUID`` (never its index, which containers and cgroups renumber):

* ``jupyter_vgpu_gpu_info{UUID, gpu, hostname, modelName} 1``;
* ``jupyter_vgpu_slice_info{slice, hostname, user, kernel_id, holder, launcher, tier} 1``;
* per slice and GPU, ``{slice, UUID, hostname}``: request, limit, used, burst, utilisation;
* per kernel slice, ``{slice, hostname}``: how long its kernel has been idle, as its server judges;
* per node, ``{hostname}``: the requests waiting in line and the memory they ask.

The GPU figures (``jupyter_vgpu_gpu_memory_*_bytes`` ...) carry ``UUID`` and ``hostname`` too, beside
the ``gpu`` and ``uuid`` labels they had before the contract. The per-slice sums a user's server
serves (``{slice, kernel_id}``, before the contract) stay for its dashboards.

A :class:`Page` is filled at scrape time and then yielded: nothing lingers after a slice ends.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily

from ..launch.launchers import DEFAULT as DEFAULT_LAUNCHER
from ..launch.launchers import LABEL as LAUNCHER_LABEL
from ..slices.occupancy import Occupancy
from ..slices.records import Slice, Waiter
from ..slices.usage import MEASURED, SliceUsage


@dataclass(frozen=True)
class Series:
    """One series' name, help text and label names."""

    name: str
    help: str
    labels: tuple[str, ...]


GPU_INFO = Series(
    "jupyter_vgpu_gpu_info", "A GPU of this node (labels as dcgm-exporter's: join on UUID).", ("UUID", "gpu", "hostname", "modelName")
)
SLICE_INFO = Series(
    "jupyter_vgpu_slice_info",
    "A slice of this node: its user, kernel (empty for commands), holder (notebook or command), launcher and tier.",
    ("slice", "hostname", "user", "kernel_id", "holder", "launcher", "tier"),
)
_GPU = ("gpu", "uuid", "UUID", "hostname")
GPU_TOTAL = Series("jupyter_vgpu_gpu_memory_total_bytes", "GPU memory capacity.", _GPU)
GPU_USED = Series("jupyter_vgpu_gpu_memory_used_bytes", "GPU memory in use by all processes (NVML).", _GPU)
GPU_RESERVED = Series("jupyter_vgpu_gpu_memory_reserved_bytes", "GPU memory reserved by jupyter-vgpu slices (their requests).", _GPU)
GPU_FOREIGN = Series(
    "jupyter_vgpu_gpu_memory_foreign_bytes",
    "GPU memory used outside slices (processes without a slice, memory no process accounts for).",
    _GPU,
)
GPU_FREE = Series("jupyter_vgpu_gpu_memory_free_bytes", "GPU memory a new slice could reserve now.", _GPU)
GPU_UTIL = Series("jupyter_vgpu_gpu_utilization_percent", "GPU utilisation (NVML), percent.", _GPU)
# Telemetry as DCGM's exporter names it, for dashboards that have no DCGM (absent where NVML has
# no answer, and where nothing read it: only a sample that asks for telemetry has it).
TELEMETRY = {
    "power_draw": Series("jupyter_vgpu_gpu_power_watts", "GPU board power draw (NVML), W.", _GPU),
    "temperature": Series("jupyter_vgpu_gpu_temperature_celsius", "GPU die temperature (NVML), °C.", _GPU),
    "pcie_tx": Series("jupyter_vgpu_gpu_pcie_tx_bytes_per_second", "PCIe throughput from the GPU (NVML), bytes/s.", _GPU),
    "pcie_rx": Series("jupyter_vgpu_gpu_pcie_rx_bytes_per_second", "PCIe throughput to the GPU (NVML), bytes/s.", _GPU),
}
_SLICE_GPU = ("slice", "UUID", "hostname")
SLICE_REQUEST = Series(
    "jupyter_vgpu_slice_gpu_request_bytes",
    "GPU memory a slice's request books on this GPU (guaranteed), context allowance included.",
    _SLICE_GPU,
)
SLICE_LIMIT = Series(
    "jupyter_vgpu_slice_gpu_limit_bytes", "GPU memory an elastic slice may burst to on this GPU (absent for fixed slices).", _SLICE_GPU
)
SLICE_USED = Series(
    "jupyter_vgpu_slice_gpu_used_bytes", "GPU memory a slice's processes use on this GPU (absent when unknown).", _SLICE_GPU
)
SLICE_BURST = Series(
    "jupyter_vgpu_slice_gpu_burst_bytes",
    "GPU memory an elastic slice uses above its request on this GPU, within its limit (absent for fixed slices or when unknown).",
    _SLICE_GPU,
)
SLICE_UTIL = Series(
    "jupyter_vgpu_slice_gpu_utilization_percent",
    "Utilisation of this GPU by a slice's processes, percent of the whole GPU (absent when unknown).",
    _SLICE_GPU,
)
SLICE_SHARE_UTIL = Series(
    "jupyter_vgpu_slice_gpu_share_utilization_percent",
    "A slice's utilisation of this GPU as a percentage of its share (utilisation / share, at most 100; absent when unknown).",
    _SLICE_GPU,
)
# Named apart from a user's server's older jupyter_vgpu_slice_idle_seconds{slice, kernel_id} (the
# same figure under the label contract's labels: one name never carries two sets of labels).
SLICE_IDLE = Series(
    "jupyter_vgpu_slice_kernel_idle_seconds",
    "Seconds a kernel's slice has run no cell and used no GPU, as its user's server judges it (0: busy now; "
    "absent for commands and where no server said it lately).",
    ("slice", "hostname"),
)
WAITING = Series("jupyter_vgpu_waiting_requests", "Requests waiting in line for a slice on this node.", ("hostname",))
WAITING_MEMORY = Series(
    "jupyter_vgpu_waiting_memory_bytes",
    "GPU memory the requests waiting in line ask for, all their GPUs (a share counted on the GPU it names, else the smallest).",
    ("hostname",),
)
# The node exporter's own: whether it could read the node, when, and what it reads.
NODE_INFO = Series(
    "jupyter_vgpu_node_info",
    "This node's exporter: the jupyter-vgpu version, and the GPUs it reads (NVML, or simulated ones).",
    ("hostname", "version", "gpus"),
)
NODE_UP = Series(
    "jupyter_vgpu_node_up",
    "1 when the exporter's last reading of the GPUs and the ledger worked; 0 when not (and no other figure of the node is shown).",
    ("hostname",),
)
NODE_READ_AT = Series(
    "jupyter_vgpu_node_reading_timestamp_seconds", "When the figures on this page were read (Unix time).", ("hostname",)
)
# A user's server, before the label contract: sums over a slice's GPUs, by kernel.
_SERVER_SLICE = ("slice", "kernel_id")
SERVER_SLICE_RESERVED = Series(
    "jupyter_vgpu_slice_memory_reserved_bytes", "GPU memory a slice reserves, all its GPUs, context allowance included.", _SERVER_SLICE
)
SERVER_SLICE_USED = Series(
    "jupyter_vgpu_slice_memory_used_bytes", "GPU memory a slice's processes use, all its GPUs (absent when unknown).", _SERVER_SLICE
)
SERVER_SLICE_UTIL = Series(
    "jupyter_vgpu_slice_utilization_percent", "GPU utilisation of a slice's processes, percent (absent when unknown).", _SERVER_SLICE
)
SERVER_SLICE_IDLE = Series(
    "jupyter_vgpu_slice_idle_seconds",
    "Seconds a kernel's slice has run nothing and used no GPU (absent for commands and other servers' kernels).",
    _SERVER_SLICE,
)
SERVER_SLICE_LIMIT = Series(
    "jupyter_vgpu_slice_memory_limit_bytes", "GPU memory an elastic slice may burst to, all its GPUs (absent for fixed slices).", _SERVER_SLICE
)
SERVER_SLICE_BURST = Series(
    "jupyter_vgpu_slice_memory_burst_bytes",
    "GPU memory an elastic slice uses above its request, within its limit (absent for fixed slices).",
    _SERVER_SLICE,
)

#: The node's series, in the order a page lists them.
NODE_SERIES = (
    GPU_INFO, GPU_TOTAL, GPU_USED, GPU_RESERVED, GPU_FOREIGN, GPU_FREE, GPU_UTIL, *TELEMETRY.values(),
    SLICE_INFO, SLICE_REQUEST, SLICE_LIMIT, SLICE_USED, SLICE_BURST, SLICE_UTIL, SLICE_SHARE_UTIL, SLICE_IDLE,
    WAITING, WAITING_MEMORY,
)  # fmt: skip
#: The node exporter's page: the node's series after its own.
EXPORTER_SERIES = (NODE_INFO, NODE_UP, NODE_READ_AT, *NODE_SERIES)
#: A user's server's sums per slice (its page lists them after the node's).
SERVER_SERIES = (SERVER_SLICE_RESERVED, SERVER_SLICE_USED, SERVER_SLICE_UTIL, SERVER_SLICE_IDLE, SERVER_SLICE_LIMIT, SERVER_SLICE_BURST)


#: A slice's idle seconds by its id (None: unknown).
Idle = Callable[[str], float | None]


class Reading(Protocol):
    """One sample of a node: the server monitor's ``Sample`` and the exporter's ``NodeReading``."""

    @property
    def occupancy(self) -> Occupancy: ...

    @property
    def slices(self) -> Sequence[SliceUsage]: ...

    @property
    def waiting(self) -> Sequence[Waiter]: ...


@functools.lru_cache(maxsize=16)
def machine_name(simulate: str = "") -> str:
    """The ``hostname`` label's default: the machine's name, as dcgm-exporter's ``Hostname``; on
    simulated GPUs of a named machine (``JUPYTER_VGPU_SIMULATE=2x16GiB@node-a``), that name. Asked
    once per process and spec (a server's ``/metrics`` asks at every scrape, and a JSON simulation
    file's name would be read from the file each time)."""
    if simulate:
        from ..errors import InvalidConfig
        from ..gpus.simulate_spec import simulated_node

        try:
            node = simulated_node(simulate)
        except InvalidConfig:  # the GPUs' reading says what is wrong with it
            node = None
        if node:
            return node
    return socket.gethostname()


def share_utilization(utilization: float, share: float) -> float | None:
    """A slice's utilisation of a GPU as a percentage of its share of it, as KAI-Scheduler
    normalises a fractional pod's: ``utilization / share``, at most 100. A slice of 1/4 GPU whose
    processes keep 20% of the GPU busy uses 80% of its share; at 25% or more, all of it (compute is
    not fenced by a memory share, so more shows only in the raw series). None without a share."""
    if share <= 0:
        return None
    return min(100.0, utilization / share)


def kernel_id(slice_: Slice) -> str:
    """The ``kernel_id`` label: a kernel slice's kernel id, empty for a command's."""
    return slice_.holder if slice_.holder_kind == "kernel" else ""


class Page:
    """The families of one ``/metrics`` page, filled from one or more readings, then yielded."""

    def __init__(self, series: Sequence[Series] = NODE_SERIES) -> None:
        self._families = {s: GaugeMetricFamily(s.name, s.help, labels=list(s.labels)) for s in series}

    def _add(self, series: Series, labels: Sequence[str], value: float) -> None:
        self._families[series].add_metric(list(labels), value)

    def families(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families.values()

    def add_exporter(self, hostname: str, version: str, gpus: str, *, up: bool, taken_at: float) -> None:
        """The node exporter's own series: ``up`` when its reading worked, taken at ``taken_at``."""
        self._add(NODE_INFO, [hostname, version, gpus], 1)
        self._add(NODE_UP, [hostname], 1 if up else 0)
        self._add(NODE_READ_AT, [hostname], taken_at)

    def add(
        self, reading: Reading, hostname: str, *, shown: Callable[[Slice], bool] = lambda s: True, idle: Idle = lambda sid: None
    ) -> None:
        """A reading's GPUs, the slices ``shown`` lets through (``idle``: a slice's idle seconds,
        None when unknown), and its line."""
        self.add_gpus(reading.occupancy, hostname)
        self.add_slices([u for u in reading.slices if shown(u.slice)], hostname, idle)
        self.add_line(reading.waiting, reading.occupancy, hostname)

    def add_gpus(self, occupancy: Occupancy, hostname: str) -> None:
        for entry in occupancy.gpus:
            gpu = entry.gpu
            self._add(GPU_INFO, [gpu.uuid, str(gpu.index), hostname, gpu.name], 1)
            labels = [str(gpu.index), gpu.uuid, gpu.uuid, hostname]
            self._add(GPU_TOTAL, labels, gpu.memory_total)
            self._add(GPU_RESERVED, labels, entry.reserved)
            self._add(GPU_FOREIGN, labels, entry.foreign)
            self._add(GPU_FREE, labels, entry.free)
            if gpu.memory_used is not None:
                self._add(GPU_USED, labels, gpu.memory_used)
            if gpu.utilization is not None:
                self._add(GPU_UTIL, labels, gpu.utilization)
            for field, series in TELEMETRY.items():
                if (value := getattr(gpu, field)) is not None:
                    self._add(series, labels, value)

    def add_slices(self, usages: Sequence[SliceUsage], hostname: str, idle: Idle = lambda sid: None) -> None:
        for usage in usages:
            s = usage.slice
            launcher = s.labels.get(LAUNCHER_LABEL) or DEFAULT_LAUNCHER
            self._add(SLICE_INFO, [s.id, hostname, s.owner, kernel_id(s), s.describe_holder(), launcher, s.tier.value], 1)
            if (seconds := idle(s.id)) is not None:
                self._add(SLICE_IDLE, [s.id, hostname], seconds)
            elastic = s.memory_burst_limit is not None
            for uuid, reserved, allowed, total in zip(s.gpus, s.memory, s.memory_allowed, s.memory_total):
                labels = [s.id, uuid, hostname]
                self._add(SLICE_REQUEST, labels, reserved)
                if elastic:
                    self._add(SLICE_LIMIT, labels, allowed)
                used = _used_on(usage, uuid)
                if used is not None:
                    self._add(SLICE_USED, labels, used)
                    if elastic:
                        self._add(SLICE_BURST, labels, max(0, min(used, allowed) - reserved))
                if (util := _utilization_on(usage, uuid)) is not None:
                    self._add(SLICE_UTIL, labels, util)
                    if (normalised := share_utilization(util, reserved / total if total else 0.0)) is not None:
                        self._add(SLICE_SHARE_UTIL, labels, normalised)

    def add_line(self, waiting: Sequence[Waiter], occupancy: Occupancy, hostname: str) -> None:
        self._add(WAITING, [hostname], len(waiting))
        smallest = min((g.total for g in occupancy.gpus), default=0)
        asked = 0
        for waiter in waiting:
            request = waiter.request
            pinned = occupancy.snapshot.find(request.gpu) if request.gpu is not None else None
            entry = occupancy.gpu(pinned.uuid) if pinned is not None else None
            asked += request.amount_on(entry.total if entry is not None else smallest) * request.gpus
        self._add(WAITING_MEMORY, [hostname], asked)

    def add_server_slices(self, usages: Sequence[SliceUsage], idle: Idle) -> None:
        """A user's server's sums per slice (``{slice, kernel_id}``); ``idle``: a slice's idle seconds."""
        for usage in usages:
            labels = [usage.slice.id, kernel_id(usage.slice)]
            self._add(SERVER_SLICE_RESERVED, labels, usage.memory_reserved_total)
            if usage.memory_used is not None:
                self._add(SERVER_SLICE_USED, labels, usage.memory_used)
            if usage.utilization is not None:
                self._add(SERVER_SLICE_UTIL, labels, usage.utilization)
            if (seconds := idle(usage.slice.id)) is not None:
                self._add(SERVER_SLICE_IDLE, labels, seconds)
            if usage.memory_burst is not None:
                self._add(SERVER_SLICE_LIMIT, labels, sum(usage.slice.memory_allowed))
                self._add(SERVER_SLICE_BURST, labels, usage.memory_burst)


def _used_on(usage: SliceUsage, uuid: str) -> int | None:
    """What a slice uses on one of its GPUs: NVML's figure; a report (which has no split by GPU)
    only for a slice of one GPU; else unknown."""
    if usage.source == MEASURED:
        return usage.used_by_gpu.get(uuid, 0)
    if usage.memory_used is not None and len(usage.slice.gpus) == 1:
        return usage.memory_used
    return None


def _utilization_on(usage: SliceUsage, uuid: str) -> int | None:
    """How busy a slice's processes keep one of its GPUs: NVML's figure; 0 where NVML lists no
    process of the slice on it; unknown where it lists some without a figure, or measures nothing."""
    if usage.source != MEASURED:
        return None
    return usage.utilization_by_gpu.get(uuid, None if uuid in usage.used_by_gpu else 0)
