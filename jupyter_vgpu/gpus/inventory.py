"""What GPUs this machine has and who uses them, read in one pass over NVML.

Every NVML query that fails becomes ``None`` ("not available") in the snapshot: a UI or
a reservation never dies because the driver could not answer one question.
"""

from __future__ import annotations

import functools
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InvalidConfig
from ..units import shorten
from . import memory_cgroups
from .lenses import SchedulerLens
from .model import GPU, GPUProcess, MIGDevice, Snapshot, instance_key
from .mps import SERVER_PROCESS, MPSDetector
from .simulate_spec import describe
from .simulated_nvml import NVMLError as SimulatedNVMLError
from .simulated_nvml import SimulatedNVML

T = TypeVar("T")


#: ``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` -> ``1g.5gb`` (also ``1c.3g.20gb``, ``1g.10gb+me``).
_MIG_PROFILE = re.compile(r"MIG\s+(\S+)\s*$")


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py's module

    return pynvml


class Inventory:
    """Reads GPUs from NVML, or from the simulated NVML when ``simulate`` is given.

    Thread-safe; NVML is initialised once, lazily, and an initialisation failure is
    remembered as the "no GPU" state rather than retried on every call.
    """

    def __init__(
        self, simulate: str = "", nvml: Any = None, env: Mapping[str, str] | None = None, *, use_folder: Path | None = None
    ) -> None:
        self.simulate = simulate.strip()
        #: On simulated GPUs, where sliced processes say what their frameworks hold (:mod:`.simulated_use`).
        self.use_folder = use_folder
        self._env = env  # where a scheduler's pod share is read (None: this process's environment)
        self._lock = threading.Lock()
        self._nvml: Any = nvml
        self._error: str | None = None
        self._initialised = False
        self.mps = MPSDetector()
        self._partition_regions: dict[str, int] | None = None  # gpus.memory_cgroups, read per snapshot
        self._partition_support: dict[str, bool] = {}  # GPU UUID -> the driver partitions it (asked once)
        self._names: dict[int, str] = {}  # pid -> process name, for the pids NVML lists
        self._util_seen: dict[int, int] = {}  # GPU index -> newest utilisation sample read (µs)
        self._pcie: dict[int, tuple[float, int | None, int | None]] = {}  # index -> (monotonic, tx, rx)

    @property
    def simulated(self) -> bool:
        return bool(self.simulate)

    def describe(self) -> str:
        """How the GPUs are provided, for headers: ``simulated (2 x 16 GiB)`` or ``NVML``."""
        if self.simulated:
            try:
                return f"simulated ({describe(self.simulate)})"
            except InvalidConfig:  # the snapshot says what is wrong with it
                return f"simulated ({shorten(self.simulate)}, not usable)"
        return "NVML"

    def _init(self) -> Any:
        with self._lock:
            if self._initialised:
                return self._nvml
            if self._nvml is None and self.simulated:
                # InvalidConfig propagates (a user's mistake, or a file caught half-written) and
                # the next snapshot tries again: only a working NVML is remembered.
                self._nvml = SimulatedNVML(self.simulate, self.use_folder)
            self._initialised = True
            if self._nvml is None:
                try:
                    self._nvml = _load_pynvml()
                except ImportError:
                    self._error = "nvidia-ml-py is not installed, so no GPU can be seen."
                    return None
            try:
                self._nvml.nvmlInit()
            except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded...
                self._error = f"No NVIDIA GPU is available here (NVML: {error})."
                self._nvml = None
            return self._nvml

    def snapshot(self, *, telemetry: bool = False) -> Snapshot:
        """Every GPU with memory, utilisation, MIG mode and per-process memory; with
        ``telemetry``, power, temperature and PCIe throughput too (NVML samples PCIe for 20 ms
        per direction and GPU, so only the server's monitor asks for them)."""
        try:
            nvml = self._init()
        except InvalidConfig:
            raise
        env = os.environ if self._env is None else self._env
        if nvml is None:
            return Snapshot(gpus=(), simulated=False, available=False, message=_with_allocation(self._error, env))
        count = _safe(nvml.nvmlDeviceGetCount) or 0
        mps = self.mps.status().active
        lens = SchedulerLens.of(env)  # InvalidConfig: a user's mistake
        self._partition_regions = None if memory_cgroups.manage_problem() else memory_cgroups.dmem_regions()
        gpus = tuple(g for g in (self._read_gpu(nvml, i, mps, telemetry) for i in range(count)) if g is not None)
        message = None if gpus else "NVML reports no GPU on this machine."
        gpus, message = lens.apply(gpus, count, message)
        message = _with_allocation(message, env) if not gpus else message
        self._forget_names({p.pid for g in gpus for p in g.processes})
        return Snapshot(
            gpus=gpus,
            simulated=self.simulated,
            available=bool(gpus),
            driver=_safe(nvml.nvmlSystemGetDriverVersion),
            message=message,
        )

    def _read_gpu(self, nvml: Any, index: int, mps: bool, telemetry: bool = False) -> GPU | None:
        handle = _safe(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if handle is None:
            return None
        uuid = _safe(lambda: nvml.nvmlDeviceGetUUID(handle))
        if uuid is None:
            return None  # cannot place a slice on a GPU we cannot name
        mig = _safe(lambda: nvml.nvmlDeviceGetMigMode(handle))
        mig_mode = bool(mig[0]) if mig is not None else None
        mig_handles = self._read_mig_devices(nvml, handle) if mig_mode else []
        mig_devices = [device for device, _ in mig_handles]
        memory = _memory(nvml, handle)
        if memory is None and mig_devices:
            # In a MIG container the parent GPU's memory query is refused (NoPermission): its
            # MIG devices are what there is, each GPU instance's memory counted once.
            per_instance = {instance_key(d): d for d in mig_devices}.values()
            memory = (
                sum(d.memory_total for d in per_instance),
                sum(d.memory_used or 0 for d in per_instance),
                0,
            )
        if memory is None:
            return None  # cannot place a slice on a GPU we cannot size
        total, used, reserved = memory
        util = _safe(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        process_util = self._process_utilization(nvml, handle, index)
        by_instance = {(d.gpu_instance_id, d.compute_instance_id): d.uuid for d in mig_devices}
        found: dict[int, GPUProcess] = {}

        def add(entries: Any, mig_device: str | None = None) -> None:
            for proc in entries or []:
                pid = int(proc.pid)
                used_by = getattr(proc, "usedGpuMemory", None)
                device = mig_device or by_instance.get(
                    (_id(getattr(proc, "gpuInstanceId", None)), _id(getattr(proc, "computeInstanceId", None)))
                )
                known = found.get(pid)
                if known is not None and known.used is not None and used_by is None:
                    continue  # keep the entry that knows the memory
                found[pid] = GPUProcess(
                    pid=pid,
                    used=int(used_by) if used_by is not None else None,
                    utilization=None if process_util is None else process_util.get(pid, 0),
                    mig_device=device or (known.mig_device if known else None),
                )

        # In MIG mode the GPU-wide lists need privileges; each MIG device's own list does not.
        add(_safe(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)))
        add(_safe(lambda: nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)))
        for device, mig_handle in mig_handles:
            add(_ask(nvml.nvmlDeviceGetComputeRunningProcesses, mig_handle), device.uuid)
            add(_ask(nvml.nvmlDeviceGetMPSComputeRunningProcesses, mig_handle), device.uuid)
        processes = [
            GPUProcess(p.pid, p.used, p.utilization, p.mig_device, mps_server=True)
            if self._process_name(nvml, p.pid) == SERVER_PROCESS
            else p
            for p in found.values()
        ]
        capability = _safe(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
        return GPU(
            index=index,
            uuid=_text(uuid),
            name=_text(_safe(lambda: nvml.nvmlDeviceGetName(handle)) or "unknown GPU"),
            memory_total=total,
            memory_used=used,
            utilization=int(util.gpu) if util is not None else None,
            mig_mode=mig_mode,
            processes=tuple(processes),
            mig_devices=tuple(mig_devices),
            mps=mps and not mig_mode,
            memory_partitioning=None if mig_mode else self._partitioning(nvml, handle, _text(uuid)),
            memory_reserved_by_driver=reserved,
            compute_capability=(int(capability[0]), int(capability[1])) if capability else None,
            **(self._telemetry(nvml, handle, index) if telemetry else {}),
        )

    def _supports_partitioning(self, nvml: Any, handle: Any, uuid: str) -> bool:
        """Whether the driver partitions this GPU's memory: asked once per GPU (every monitor tick
        reads the GPUs, and the driver does not change under a running NVML)."""
        if uuid not in self._partition_support:
            self._partition_support[uuid] = memory_cgroups.supported(nvml, handle)
        return self._partition_support[uuid]

    def _partitioning(self, nvml: Any, handle: Any, uuid: str) -> str | None:
        """The memory-partitioning backend this process can use on a GPU (see GPU.memory_partitioning)."""
        regions = self._partition_regions
        if regions is None or not self._supports_partitioning(nvml, handle, uuid):
            return None
        pci = _safe(lambda: nvml.nvmlDeviceGetPciInfo(handle))
        bus_id = _text(getattr(pci, "busId", "") or "") if pci is not None else ""
        return "dmem" if bus_id and memory_cgroups.pci_address(bus_id) in regions else "driver"

    def partition_limits(self, amounts: Mapping[str, tuple[int, int]]) -> list[tuple[Any, Any, int, int]]:
        """(NVML, device handle, soft, hard bytes) for every GPU the driver partitions: ``amounts``
        (guaranteed, cap) on the slice's GPUs (by UUID), 0 on the others, so a process of the slice cannot take memory on
        a GPU that is not the slice's (``CUDA_VISIBLE_DEVICES`` is the process's to change). What
        :func:`.partition.create` sets."""
        nvml = self._init()
        if nvml is None:
            raise memory_cgroups.PartitionError(self._error or "No GPU is available here.")
        limits, found = [], set()
        for index in range(_safe(nvml.nvmlDeviceGetCount) or 0):
            handle = _ask(nvml.nvmlDeviceGetHandleByIndex, index)
            uuid = _ask(nvml.nvmlDeviceGetUUID, handle) if handle is not None else None
            if uuid is None or not self._supports_partitioning(nvml, handle, _text(uuid)):
                continue
            found.add(_text(uuid))
            soft, hard = amounts.get(_text(uuid), (0, 0))
            limits.append((nvml, handle, soft, hard))
        if missing := sorted(set(amounts) - found):
            raise memory_cgroups.PartitionError(f"GPU {', '.join(missing)} no longer offers memory partitioning.")
        return limits

    def _telemetry(self, nvml: Any, handle: Any, index: int) -> dict[str, Any]:
        """Power (mW -> W), temperature (°C) and PCIe throughput (KB/s -> bytes/s, read at most
        every PCIE_EVERY seconds); None for each query NVML refuses."""
        power = _ask(nvml.nvmlDeviceGetPowerUsage, handle)
        limit = _ask(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        temperature = _ask(nvml.nvmlDeviceGetTemperature, handle, NVML_TEMPERATURE_GPU)
        now = time.monotonic()
        read_at, tx, rx = self._pcie.get(index, (-math.inf, None, None))
        if now - read_at >= PCIE_EVERY:
            tx = _ask(nvml.nvmlDeviceGetPcieThroughput, handle, NVML_PCIE_UTIL_TX_BYTES)
            rx = _ask(nvml.nvmlDeviceGetPcieThroughput, handle, NVML_PCIE_UTIL_RX_BYTES)
            tx, rx = (None if v is None else int(v) * 1024 for v in (tx, rx))
            self._pcie[index] = (now, tx, rx)
        return {
            "power_draw": None if power is None else round(int(power) / 1000, 1),
            "power_limit": None if limit is None else round(int(limit) / 1000, 1),
            "temperature": None if temperature is None else int(temperature),
            "pcie_tx": tx,
            "pcie_rx": rx,
        }

    def _process_utilization(self, nvml: Any, handle: Any, index: int) -> dict[int, int] | None:
        """Each process's SM utilisation from its newest sample, or None when NVML cannot say.

        NVML keeps a buffer of samples: asked from timestamp 0 it returns all of them, old peaks
        included. Ask from the newest sample already read (nvitop asks for the last second), and
        count a listed process without a newer sample as idle."""
        now = int(time.time() * 1_000_000)
        since = max(self._util_seen.get(index, 0), now - 2_000_000)
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except Exception as error:
            # NOT_FOUND: no sample since, every process was idle. Some NVML builds (NVIDIA's mock)
            # answer an empty buffer with SUCCESS, which pynvml raises as an error too.
            if getattr(error, "value", None) in (getattr(nvml, "NVML_ERROR_NOT_FOUND", 6), 0):
                return {}
            return None
        latest: dict[int, tuple[int, int]] = {}
        for sample in samples or []:
            stamp = int(getattr(sample, "timeStamp", 0))
            pid = int(sample.pid)
            if pid not in latest or stamp >= latest[pid][0]:
                latest[pid] = (stamp, int(sample.smUtil))
        if latest:
            self._util_seen[index] = max(stamp for stamp, _ in latest.values())
        return {pid: util for pid, (_, util) in latest.items()}

    def _read_mig_devices(self, nvml: Any, handle: Any) -> list[tuple[MIGDevice, Any]]:
        """The MIG devices that exist under a GPU in MIG mode (empty slots raise NOT_FOUND)."""
        result: list[tuple[MIGDevice, Any]] = []
        for index in range(_safe(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0):
            mig = _ask(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
            if mig is None:
                continue
            uuid = _ask(nvml.nvmlDeviceGetUUID, mig)
            memory = _ask(nvml.nvmlDeviceGetMemoryInfo, mig)
            if uuid is None or memory is None:
                continue
            name = _text(_ask(nvml.nvmlDeviceGetName, mig) or "")
            match = _MIG_PROFILE.search(name)
            gi = _ask(nvml.nvmlDeviceGetGpuInstanceId, mig)  # 0 is a real id (MIG-backed vGPU)
            ci = _ask(nvml.nvmlDeviceGetComputeInstanceId, mig)
            device = MIGDevice(
                index=index,
                uuid=_text(uuid),
                profile=match.group(1) if match else (name or "MIG device"),
                memory_total=int(memory.total),
                memory_used=int(memory.used) if memory.used is not None else None,
                gpu_instance_id=int(gi) if gi is not None else None,
                compute_instance_id=int(ci) if ci is not None else None,
            )
            result.append((device, mig))
        return result

    def _process_name(self, nvml: Any, pid: int) -> str:
        """The executable's name (to tell the MPS server apart), remembered while NVML lists the pid."""
        name = self._names.get(pid)
        if name is None:
            raw = _safe(lambda: nvml.nvmlSystemGetProcessName(pid))
            name = os.path.basename(_text(raw)) if raw else ""
            if not name:
                try:
                    import psutil

                    name = psutil.Process(pid).name()
                except Exception:
                    name = ""
            self._names[pid] = name
        return name

    def _forget_names(self, live: set[int]) -> None:
        for pid in [p for p in self._names if p not in live]:
            del self._names[pid]


#: NVML's "not applicable" GPU/compute-instance id (a process outside MIG).
NOT_APPLICABLE = 0xFFFFFFFF


def _id(value: Any) -> int | None:
    """A GPU- or compute-instance id; None when absent or not applicable. 0 is a valid id."""
    if value is None:
        return None
    number = int(value)
    return None if number == NOT_APPLICABLE else number


def _memory(nvml: Any, handle: Any) -> tuple[int, int | None, int] | None:
    """(total, used, reserved by the driver), or None when NVML refuses to say (a MIG container).

    NVML's v2 query separates what the driver reserves from what processes use; v1's ``used``
    may include it. Without v2 (an old driver, the simulated NVML) the driver's share is 0."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        info = _safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle, version=version))
        if info is not None:
            return int(info.total), int(info.used) if info.used is not None else None, int(info.reserved)
    info = _safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    if info is None:
        return None
    return int(info.total), int(info.used) if info.used is not None else None, 0


#: NVML's constants (nvml.h), the same in every driver: the GPU die's sensor, and the two PCIe
#: directions of nvmlDeviceGetPcieThroughput.
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1


#: Seconds between two PCIe readings of a GPU: the driver samples 20 ms per direction and call,
#: so 8 GPUs read every 2 s tick would keep the monitor's thread busy a sixth of the time.
PCIE_EVERY = 10.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ask(query: Callable[..., T], *args: Any) -> T | None:
    """``query(*args)``, or None when NVML cannot answer (see :func:`_safe`)."""
    return _safe(lambda: query(*args))


@functools.cache
def _nvml_errors() -> tuple[type[Exception], ...]:
    """What a refused NVML query raises: nvidia-ml-py's ``NVMLError`` (each NVML return code is a
    subclass of it) and the simulated NVML's. Read on the first query, not at import: loading
    pynvml costs start-up time in processes that never ask NVML anything."""
    try:
        return (_load_pynvml().NVMLError, SimulatedNVMLError)
    except ImportError:
        return (SimulatedNVMLError,)


def _safe(call: Callable[[], T]) -> T | None:
    """Run one NVML query; an NVML failure means "not available". Anything else (a TypeError,
    an AttributeError...) is a bug and propagates, rather than reading as a GPU without it."""
    try:
        return call()
    except _nvml_errors():
        return None


def _with_allocation(message: str | None, env: Mapping[str, str]) -> str | None:
    """A machine without GPUs inside a Slurm job's allocation (an ``salloc`` shell): where they are."""
    from .slurmshare import allocation_note

    note = allocation_note(env)
    return f"{message} {note}" if message and note else note or message
