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
from ..units import GiB, format_bytes, parse_bytes

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
class SimulatedDevice:
    """One simulated GPU (what a JSON ``devices`` entry describes)."""

    index: int
    uuid: str
    name: str
    memory_total: int
    utilization: int = 0
    base_used: int = 0
    processes: list[tuple[int, int | None, int]] = field(default_factory=list)  # pid, bytes, util


_SHORT = re.compile(r"^\s*(?:(\d+)\s*[xX]\s*)?(\S+)\s*$")
ALLOWED = 'a device spec such as "2x16GiB" (count x memory) or the path of a JSON file'


def _stable_uuid(index: int, memory: int, name: str) -> str:
    # Same spec -> same UUIDs across processes, so the server, kernels and commands agree.
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"jupyter-vgpu/{index}/{memory}/{name}"))


def parse_spec(spec: str) -> list[SimulatedDevice]:
    """Devices described by ``JUPYTER_VGPU_SIMULATE`` (short form or JSON file)."""
    text = spec.strip()
    if text.endswith(".json") or os.sep in text or Path(text).is_file():
        return _load_json(Path(text).expanduser())
    match = _SHORT.match(text)
    if not match:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={spec!r} is not {ALLOWED}.")
    count = int(match.group(1) or 1)
    if not 1 <= count <= 64:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={spec!r} asks for {count} GPUs; use 1 to 64.")
    try:
        memory = parse_bytes(match.group(2), what="JUPYTER_VGPU_SIMULATE memory")
    except InvalidRequest:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={spec!r} is not {ALLOWED}.") from None
    name = f"Simulated GPU {format_bytes(memory, precision=0).replace(' ', '')}"
    return [
        SimulatedDevice(index=i, uuid=_stable_uuid(i, memory, name), name=name, memory_total=memory)
        for i in range(count)
    ]


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
        devices.append(
            SimulatedDevice(
                index=index,
                uuid=str(entry.get("uuid") or _stable_uuid(index, memory, name)),
                name=name,
                memory_total=memory,
                utilization=int(entry.get("utilization", 0)),
                base_used=base_used,
            )
        )
    by_key = {str(d.index): d for d in devices} | {d.uuid: d for d in devices}
    for number, proc in enumerate(data.get("processes") or []):
        if not isinstance(proc, dict) or "pid" not in proc:
            raise InvalidConfig(f'{where}: process {number} needs "pid" and "gpu".')
        device = by_key.get(str(proc.get("gpu", 0)))
        if device is None:
            raise InvalidConfig(f"{where}: process {number} names gpu {proc.get('gpu')!r}, which is not listed.")
        used: int | None = None
        if proc.get("memory") is not None:
            try:
                used = parse_bytes(proc["memory"], what=f"process {number} memory")
            except InvalidRequest as error:
                raise InvalidConfig(f"{where}: {error}") from None
        device.processes.append((int(proc["pid"]), used, int(proc.get("utilization", 0))))
    return devices


class SimulatedNVML:
    """The ``pynvml`` subset, answering from a spec instead of the driver."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._devices = parse_spec(spec)
        self._path = Path(spec).expanduser() if Path(spec).expanduser().is_file() else None
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

    # -- the pynvml subset -------------------------------------------------------------
    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return "simulated"

    def nvmlDeviceGetCount(self) -> int:
        return len(self._current())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._device(index)
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._device(handle).name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._device(handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> _Memory:
        device = self._device(handle)
        used = device.base_used + sum(b or 0 for _, b, _ in device.processes)
        used = min(used, device.memory_total)
        return _Memory(total=device.memory_total, used=used, free=device.memory_total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Utilization:
        device = self._device(handle)
        util = device.utilization or min(100, sum(u for _, _, u in device.processes))
        return _Utilization(gpu=util, memory=0)

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        self._device(handle)
        return [0, 0]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[_Process]:
        return [_Process(pid=pid, usedGpuMemory=used) for pid, used, _ in self._device(handle).processes]

    def nvmlDeviceGetProcessUtilization(self, handle: int, timestamp: int) -> list[_ProcessSample]:
        samples = [_ProcessSample(pid=p, timeStamp=0, smUtil=u, memUtil=0) for p, _, u in self._device(handle).processes]
        if not samples:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return samples


def describe(spec: str) -> str:
    """One line for headers: ``2 x 16 GiB`` or the JSON path."""
    devices = parse_spec(spec)
    sizes = {d.memory_total for d in devices}
    if len(sizes) == 1:
        return f"{len(devices)} x {format_bytes(sizes.pop(), precision=0)}"
    return ", ".join(format_bytes(d.memory_total, precision=0) for d in devices)


__all__ = ["GiB", "NVMLError", "SimulatedDevice", "SimulatedNVML", "describe", "parse_spec"]
