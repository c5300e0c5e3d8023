"""A simulated NVML for machines without a GPU.

It implements the subset of ``pynvml`` (from ``nvidia-ml-py``) that jupyter-vgpu calls, with
the same names, return shapes and refusals a real driver gives (recorded outputs in
``tests/fixtures/recorded`` feed it), so that one code path serves real and simulated GPUs.
What the GPUs are is :mod:`.simulate_spec` (``JUPYTER_VGPU_SIMULATE``).
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig
from .simulate_spec import SimulatedDevice, SimulatedMIG, SimulatedProcess, is_file, parse_spec
from .simulated_use import SimulatedUse, read_uses

#: How often the processes' own figures are read again (one snapshot asks for the devices many times).
USE_READ_SECONDS = 0.5

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6


class NVMLError(Exception):
    """Same shape as ``pynvml.NVMLError``: carries ``value``, an NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
            NVML_ERROR_NOT_SUPPORTED: "Not Supported",
            NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
            NVML_ERROR_NOT_FOUND: "Not Found",
        }.get(self.value, f"NVML error {self.value}")


def _power_limit(name: str) -> float:
    """The board power limit (W) of the GPUs simulations name: NVIDIA's datasheets."""
    for model, watts in (("H100", 700.0), ("H200", 700.0), ("A100", 400.0), ("L40S", 350.0), ("T4", 70.0)):
        if model in name:
            return watts
    return 300.0


def _wobble(uuid: str, series: int) -> float:
    """A slow, smooth drift in [-1, 1], the same in every process at the same moment (the
    server and a command read the same simulated GPU)."""
    phase = (zlib.crc32(f"{uuid}/{series}".encode()) % 1000) / 1000 * 2 * math.pi
    t = time.time()
    return 0.6 * math.sin(t / 47 + phase) + 0.4 * math.sin(t / 13 + 2 * phase)


@dataclass
class _Memory:
    total: int
    used: int
    free: int
    reserved: int = 0


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _ProcessSample:
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int = 0
    decUtil: int = 0


@dataclass
class _PciInfo:
    busId: str


@dataclass
class _MemoryLimits:
    """pynvml's c_nvmlSetMemoryLimits_v1_t and c_nvmlGetMemoryLimits_v1_t in one."""

    nameSpace: bytes = b""
    softLimit: int = 0
    hardLimit: int = 0
    currentUsed: int = 0


#: No limit, as NVML says it (NVML_DEVICE_MEMORY_LIMIT_MAX).
MEMORY_LIMIT_MAX = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True)
class _MIGHandle:
    device: int
    index: int


class SimulatedNVML:
    """The ``pynvml`` subset, answering from a spec instead of the driver."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    nvmlMemory_v2 = 0x02000028  # the version number pynvml passes for the v2 memory query
    c_nvmlSetMemoryLimits_v1_t = _MemoryLimits
    c_nvmlGetMemoryLimits_v1_t = _MemoryLimits

    def __init__(self, spec: str, use_folder: Path | None = None) -> None:
        self.spec = spec
        #: Where sliced processes say what their frameworks hold (:mod:`.simulated_use`): listed
        #: as their processes on these GPUs. None: only the spec's processes.
        self.use_folder = use_folder
        self._uses: tuple[SimulatedUse, ...] = ()
        self._uses_read = -math.inf
        self._merged: tuple[int, tuple[SimulatedUse, ...], list[SimulatedDevice]] | None = None
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._devices = parse_spec(spec)
        self._limits: dict[tuple[str, bytes], tuple[int, int]] = {}  # (GPU UUID, cgroup) -> (soft, hard)
        self._path = Path(spec).expanduser() if is_file(spec.strip()) else None
        if self._path is not None:
            self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[float, int] | None:
        assert self._path is not None
        try:
            st = self._path.stat()
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def _current(self) -> list[SimulatedDevice]:
        if self._path is not None:
            with self._lock:
                stamp = self._file_stamp()
                if stamp != self._stamp:
                    try:
                        self._devices = parse_spec(self.spec)
                        self._stamp = stamp
                    except InvalidConfig:
                        pass  # a half-written file: keep the last good view
        if self.use_folder is None:
            return self._devices
        return self._with_uses(self._devices)

    def _with_uses(self, devices: list[SimulatedDevice]) -> list[SimulatedDevice]:
        """``devices`` with the processes that say what they hold on them (read again at most
        every :data:`USE_READ_SECONDS`, since one snapshot asks for the devices many times)."""
        assert self.use_folder is not None
        with self._lock:
            now = time.monotonic()
            if now - self._uses_read >= USE_READ_SECONDS:
                self._uses = tuple(read_uses(self.use_folder))
                self._uses_read = now
            uses = self._uses
            if not uses:
                return devices
            if self._merged is not None and self._merged[0] == id(devices) and self._merged[1] == uses:
                return self._merged[2]
            merged = []
            for device in devices:
                extra = [
                    SimulatedProcess(pid=u.pid, used=u.used, utilization=u.utilization)
                    for u in uses
                    if u.gpu == device.uuid and device.mig is None  # a MIG device's processes are not simulated
                ]
                merged.append(replace(device, processes=[*device.processes, *extra]) if extra else device)
            self._merged = (id(devices), uses, merged)
            return merged

    def _device(self, handle: Any) -> SimulatedDevice:
        devices = self._current()
        if not isinstance(handle, int) or not 0 <= handle < len(devices):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return devices[handle]

    def _mig(self, handle: Any) -> tuple[SimulatedDevice, SimulatedMIG]:
        if not isinstance(handle, _MIGHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        device = self._device(handle.device)
        if device.mig is None or not 0 <= handle.index < len(device.mig):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return device, device.mig[handle.index]

    @staticmethod
    def _processes(device: SimulatedDevice, *, mig: int | None = None, mps: bool = False) -> list[_Process]:
        result = []
        for proc in device.processes:
            if proc.mps_client != mps or (mig is not None and proc.mig != mig):
                continue
            instance = device.mig[proc.mig] if device.mig is not None and proc.mig is not None else None
            result.append(
                _Process(
                    pid=proc.pid,
                    usedGpuMemory=proc.used,
                    gpuInstanceId=instance.gpu_instance_id if instance else 0xFFFFFFFF,
                    computeInstanceId=instance.compute_instance_id if instance else 0xFFFFFFFF,
                )
            )
        return result

    # -- the pynvml subset -------------------------------------------------------------
    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return "simulated"

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        for device in self._current():
            for proc in device.processes:
                if proc.pid == pid:
                    return proc.name
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetCount(self) -> int:
        return len(self._current())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._device(index)
        return index

    def nvmlDeviceGetName(self, handle: Any) -> str:
        if isinstance(handle, _MIGHandle):
            device, mig = self._mig(handle)
            return f"{device.name} MIG {mig.profile}"
        return self._device(handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, _MIGHandle):
            return self._mig(handle)[1].uuid
        return self._device(handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> _Memory:
        if isinstance(handle, _MIGHandle):
            device, mig = self._mig(handle)
            sharing = [i for i, m in enumerate(device.mig or []) if m.gpu_instance_id == mig.gpu_instance_id]
            used = min(mig.memory_total, sum(p.used or 0 for p in device.processes if p.mig in sharing))
            return _Memory(total=mig.memory_total, used=used, free=mig.memory_total - used)
        device = self._device(handle)
        if device.memory_query_refused:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)  # the parent GPU, in a MIG container
        used = device.base_used + sum(p.used or 0 for p in device.processes)
        used = min(used, device.memory_total - device.reserved)
        if version is None:  # v1: what the driver keeps counts as used
            return _Memory(total=device.memory_total, used=used + device.reserved, free=device.memory_total - used - device.reserved)
        return _Memory(
            total=device.memory_total, used=used, free=device.memory_total - used - device.reserved, reserved=device.reserved
        )

    def nvmlDeviceGetPciInfo(self, handle: Any) -> _PciInfo:
        return _PciInfo(busId=f"00000000:{self._device(handle).index + 1:02X}:00.0")

    # -- MPS memory partitioning (r615): limits per cgroup, kept by this process -----------------
    def _partitioned(self, handle: Any) -> SimulatedDevice:
        if isinstance(handle, _MIGHandle):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # MIG handles are not supported
        device = self._device(handle)
        if not device.memory_partitioning:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return device

    def nvmlDeviceSetMemoryLimits_v1(self, handle: Any, limits: _MemoryLimits) -> None:
        device = self._partitioned(handle)
        if not limits.nameSpace or limits.softLimit > limits.hardLimit:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        self._limits[(device.uuid, bytes(limits.nameSpace))] = (int(limits.softLimit), int(limits.hardLimit))

    def nvmlDeviceGetMemoryLimits_v1(self, handle: Any, limits: _MemoryLimits) -> None:
        device = self._partitioned(handle)
        limits.softLimit, limits.hardLimit = self._limits.get((device.uuid, bytes(limits.nameSpace)), (0, MEMORY_LIMIT_MAX))
        # what the simulation's processes in that cgroup use on this GPU
        try:
            members = {int(p) for p in (Path(bytes(limits.nameSpace).decode()) / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            members = set()
        limits.currentUsed = sum(p.used or 0 for p in device.processes if p.pid in members)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        device = self._device(handle)
        if device.compute_capability is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return device.compute_capability

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Utilization:
        device = self._device(handle)
        if device.mig is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # as on real GPUs in MIG mode
        util = device.utilization or min(100, sum(p.utilization for p in device.processes))
        return _Utilization(gpu=util, memory=0)

    # -- telemetry: plausible figures that follow the device's load ----------------------------
    def _load(self, handle: Any) -> tuple[SimulatedDevice, float, float]:
        """(device, utilisation 0..1, memory in use 0..1) of a whole GPU."""
        device = self._device(handle)
        util = device.utilization or min(100, sum(p.utilization for p in device.processes))
        used = device.base_used + sum(p.used or 0 for p in device.processes)
        return device, util / 100, min(1.0, used / device.memory_total) if device.memory_total else 0.0

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return int(_power_limit(self._device(handle).name) * 1000)  # mW

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        """mW: about 12% of the limit idle, rising with utilisation and a little with memory."""
        device, util, memory = self._load(handle)
        limit = _power_limit(device.name)
        watts = limit * (0.12 + 0.72 * util + 0.04 * memory) + limit * 0.015 * _wobble(device.uuid, 1)
        return int(max(0.0, min(limit, watts)) * 1000)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if sensor != 0:  # NVML_TEMPERATURE_GPU is the only sensor
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        device, util, _ = self._load(handle)
        return round(31 + 48 * util + 1.2 * _wobble(device.uuid, 2))

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        """KB/s, as NVML: a trickle idle, tens of MB/s to a busy GPU (RX: host to device)."""
        if counter not in (0, 1):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        device, util, _ = self._load(handle)
        rx = 40 + util * 900_000 * (0.75 + 0.25 * _wobble(device.uuid, 3))
        return int(rx if counter == 1 else rx * 0.35)

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        mode = int(self._device(handle).mig is not None)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        device = self._device(handle)
        return 0 if device.mig is None else 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int) -> _MIGHandle:
        device = self._device(handle)
        if device.mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < len(device.mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # an empty slot, as NVML answers
        return _MIGHandle(handle, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return self._mig(handle)[1].gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        return self._mig(handle)[1].compute_instance_id

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[_Process]:
        if isinstance(handle, _MIGHandle):
            device, _ = self._mig(handle)
            return self._processes(device, mig=handle.index)
        return self._processes(self._whole_gpu(handle))

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[_Process]:
        if isinstance(handle, _MIGHandle):
            device, _ = self._mig(handle)
            return self._processes(device, mig=handle.index, mps=True)
        return self._processes(self._whole_gpu(handle), mps=True)

    def _whole_gpu(self, handle: Any) -> SimulatedDevice:
        """The GPU-wide process lists: in MIG mode only a privileged caller gets them."""
        device = self._device(handle)
        if device.mig is not None and not device.privileged:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        return device

    def nvmlDeviceGetProcessUtilization(self, handle: int, timestamp: int) -> list[_ProcessSample]:
        """The samples of the driver's buffer newer than ``timestamp`` (µs; 0: the whole buffer,
        old peaks included), as NVML answers; NOT_FOUND when there is none."""
        device = self._device(handle)
        if device.mig is not None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # not supported on MIG-enabled GPUs
        now = int(time.time() * 1_000_000)
        samples = []
        for proc in device.processes:
            points = [(now, proc.utilization), *((now - int(ago * 1_000_000), util) for ago, util in proc.history)]
            samples += [_ProcessSample(proc.pid, stamp, util, 0) for stamp, util in points if stamp > timestamp and util > 0]
        if not samples:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return samples


__all__ = ["NVMLError", "SimulatedNVML"]
