"""A simulated NVML for machines without a GPU.

It implements the subset of ``pynvml`` (from ``nvidia-ml-py``) that jupyter-vgpu calls, with
the same names and return shapes, so that one code path serves real and simulated GPUs.

Two ways to describe the GPUs (``JUPYTER_VGPU_SIMULATE``):

* ``"2x16GiB"``: two idle GPUs of 16 GiB each (``"16GiB"`` alone means one);
* the path of a JSON file, re-read whenever it changes, so tests and demos can move usage live::

    {"devices": [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", "utilization": 35}],
     "processes": [{"gpu": 0, "pid": 4242, "memory": "3GiB", "utilization": 20}]}

  ``gpu`` is an index or a UUID; ``uuid``, ``name``, ``utilization`` and ``used`` (memory
  used outside any process, e.g. by the driver) are optional per device.

* a GPU in MIG mode lists its MIG devices (the instances an admin created)::

    {"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB",
     "mig": [{"profile": "1g.10gb", "memory": "9.75GiB"}, {"profile": "2g.20gb", "memory": "19.5GiB"}]}

  ``"mig": []`` is MIG mode with no instance yet. A process runs in one with ``"mig": 0`` (its
  position in that list, or its ``MIG-...`` UUID).
* a process entry may also give ``"name"`` (``"nvidia-cuda-mps-server"`` is the MPS server) and
  ``"mps": true`` for an MPS client, which NVML lists through ``nvmlDeviceGetMPSComputeRunningProcesses``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig, InvalidRequest
from ..units import GiB, format_bytes, parse_bytes, shorten

NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
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
            NVML_ERROR_NOT_FOUND: "Not Found",
        }.get(self.value, f"NVML error {self.value}")


@dataclass
class _Memory:
    total: int
    used: int
    free: int


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
class SimulatedProcess:
    """One process on a simulated GPU (what a JSON ``processes`` entry describes)."""

    pid: int
    used: int | None
    utilization: int = 0
    mig: int | None = None  # index of the MIG device it runs in
    name: str = "python"
    mps_client: bool = False


@dataclass
class SimulatedMIG:
    """One MIG device of a simulated GPU in MIG mode."""

    uuid: str
    profile: str
    memory_total: int
    gpu_instance_id: int
    compute_instance_id: int = 0


@dataclass
class SimulatedDevice:
    """One simulated GPU (what a JSON ``devices`` entry describes)."""

    index: int
    uuid: str
    name: str
    memory_total: int
    utilization: int = 0
    base_used: int = 0
    processes: list[SimulatedProcess] = field(default_factory=list)
    mig: list[SimulatedMIG] | None = None  # None: not in MIG mode


@dataclass(frozen=True)
class _MIGHandle:
    device: int
    index: int


_SHORT = re.compile(r"^\s*(?:(\d+)\s*[xX]\s*)?(\S+)\s*$")
ALLOWED = 'a device spec such as "2x16GiB" (count x memory) or the path of a JSON file'


def _stable_uuid(index: int, memory: int, name: str) -> str:
    # Same spec -> same UUIDs across processes, so the server, kernels and commands agree.
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"jupyter-vgpu/{index}/{memory}/{name}"))


def parse_spec(spec: str) -> list[SimulatedDevice]:
    """Devices described by ``JUPYTER_VGPU_SIMULATE`` (short form or JSON file)."""
    text = spec.strip()
    if text.endswith(".json") or os.sep in text or _is_file(text):
        return _load_json(Path(text).expanduser())
    match = _SHORT.match(text) if len(text) <= 80 else None
    if not match:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={shorten(spec)} is not {ALLOWED}.")
    count = int(match.group(1) or 1)
    if not 1 <= count <= 64:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={shorten(spec)} asks for {shorten(count)} GPUs; use 1 to 64.")
    try:
        memory = parse_bytes(match.group(2), what="JUPYTER_VGPU_SIMULATE memory")
    except InvalidRequest:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={shorten(spec)} is not {ALLOWED}.") from None
    name = f"Simulated GPU {format_bytes(memory, precision=0).replace(' ', '')}"
    return [
        SimulatedDevice(index=i, uuid=_stable_uuid(i, memory, name), name=name, memory_total=memory)
        for i in range(count)
    ]


def _is_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _load_json(path: Path) -> list[SimulatedDevice]:
    where = f"JUPYTER_VGPU_SIMULATE file {path}"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidConfig(f"{where} does not exist; use {ALLOWED}.") from None
    except (OSError, ValueError) as error:
        raise InvalidConfig(f"{where} cannot be read as JSON: {error}.") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list) or not data["devices"]:
        raise InvalidConfig(f'{where} needs a non-empty "devices" list.')
    devices: list[SimulatedDevice] = []
    for index, entry in enumerate(data["devices"]):
        if not isinstance(entry, dict) or "memory" not in entry:
            raise InvalidConfig(f'{where}: device {index} needs "memory" (e.g. "16GiB").')
        try:
            memory = parse_bytes(entry["memory"], what=f"device {index} memory")
            base_used = parse_bytes(entry["used"], what=f"device {index} used") if entry.get("used") else 0
        except InvalidRequest as error:
            raise InvalidConfig(f"{where}: {error}") from None
        name = str(entry.get("name") or f"Simulated GPU {format_bytes(memory, precision=0).replace(' ', '')}")
        uuid = str(entry.get("uuid") or _stable_uuid(index, memory, name))
        devices.append(
            SimulatedDevice(
                index=index,
                uuid=uuid,
                name=name,
                memory_total=memory,
                utilization=int(entry.get("utilization", 0)),
                base_used=base_used,
                mig=_load_mig(entry.get("mig"), where=f"{where}: device {index}", parent=uuid, memory=memory),
            )
        )
    by_key = {str(d.index): d for d in devices} | {d.uuid: d for d in devices}
    for number, proc in enumerate(data.get("processes") or []):
        if not isinstance(proc, dict) or "pid" not in proc:
            raise InvalidConfig(f'{where}: process {number} needs "pid" and "gpu".')
        device = by_key.get(str(proc.get("gpu", 0)))
        if device is None:
            raise InvalidConfig(f"{where}: process {number} names gpu {shorten(proc.get('gpu'))}, which is not listed.")
        used: int | None = None
        if proc.get("memory") is not None:
            try:
                used = parse_bytes(proc["memory"], what=f"process {number} memory")
            except InvalidRequest as error:
                raise InvalidConfig(f"{where}: {error}") from None
        device.processes.append(
            SimulatedProcess(
                pid=int(proc["pid"]),
                used=used,
                utilization=int(proc.get("utilization", 0)),
                mig=_process_mig(proc.get("mig"), device, where=f"{where}: process {number}"),
                name=str(proc.get("name") or "python"),
                mps_client=bool(proc.get("mps")),
            )
        )
    return devices


def _load_mig(entries: Any, *, where: str, parent: str, memory: int) -> list[SimulatedMIG] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise InvalidConfig(f'{where}: "mig" must be a list of {{"profile": "1g.10gb", "memory": "9.75GiB"}}.')
    result = []
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or "profile" not in entry or "memory" not in entry:
            raise InvalidConfig(f'{where}: MIG device {number} needs "profile" (e.g. "1g.10gb") and "memory".')
        try:
            size = parse_bytes(entry["memory"], what=f"MIG device {number} memory")
        except InvalidRequest as error:
            raise InvalidConfig(f"{where}: {error}") from None
        uuid = str(entry.get("uuid") or "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{parent}/mig/{number}")))
        result.append(SimulatedMIG(uuid=uuid, profile=str(entry["profile"]), memory_total=size, gpu_instance_id=number + 1))
    if sum(m.memory_total for m in result) > memory:
        raise InvalidConfig(f"{where}: its MIG devices hold more memory than the GPU has.")
    return result


def _process_mig(value: Any, device: SimulatedDevice, *, where: str) -> int | None:
    if value is None:
        return None
    for number, mig in enumerate(device.mig or []):
        if str(value) in (str(number), mig.uuid):
            return number
    raise InvalidConfig(f"{where} names MIG device {shorten(value)}, which GPU {device.index} does not have.")


class SimulatedNVML:
    """The ``pynvml`` subset, answering from a spec instead of the driver."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._devices = parse_spec(spec)
        self._path = Path(spec).expanduser() if _is_file(spec.strip()) else None
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
        return self._devices

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

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> _Memory:
        if isinstance(handle, _MIGHandle):
            device, mig = self._mig(handle)
            used = min(mig.memory_total, sum(p.used or 0 for p in device.processes if p.mig == handle.index))
            return _Memory(total=mig.memory_total, used=used, free=mig.memory_total - used)
        device = self._device(handle)
        used = device.base_used + sum(p.used or 0 for p in device.processes)
        used = min(used, device.memory_total)
        return _Memory(total=device.memory_total, used=used, free=device.memory_total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Utilization:
        device = self._device(handle)
        if device.mig is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # as on real GPUs in MIG mode
        util = device.utilization or min(100, sum(p.utilization for p in device.processes))
        return _Utilization(gpu=util, memory=0)

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
        return self._processes(self._device(handle))

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[_Process]:
        if isinstance(handle, _MIGHandle):
            device, _ = self._mig(handle)
            return self._processes(device, mig=handle.index, mps=True)
        return self._processes(self._device(handle), mps=True)

    def nvmlDeviceGetProcessUtilization(self, handle: int, timestamp: int) -> list[_ProcessSample]:
        device = self._device(handle)
        samples = [_ProcessSample(pid=p.pid, timeStamp=0, smUtil=p.utilization, memUtil=0) for p in device.processes]
        if not samples or device.mig is not None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return samples


def describe(spec: str) -> str:
    """One line for headers: ``2 x 16 GiB`` or the JSON path."""
    devices = parse_spec(spec)
    sizes = {d.memory_total for d in devices}
    if len(sizes) == 1:
        return f"{len(devices)} x {format_bytes(sizes.pop(), precision=0)}"
    return ", ".join(format_bytes(d.memory_total, precision=0) for d in devices)


__all__ = ["GiB", "NVMLError", "SimulatedDevice", "SimulatedMIG", "SimulatedNVML", "SimulatedProcess", "describe", "parse_spec"]
