"""What GPUs this machine has and who uses them, read in one pass over NVML.

Every NVML query that fails becomes ``None`` ("not available") in the snapshot: a UI or
a reservation never dies because the driver could not answer one question.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from ..errors import InvalidConfig
from .simulated import SimulatedNVML, describe

T = TypeVar("T")


@dataclass(frozen=True)
class GPUProcess:
    """A process NVML sees on a GPU (host pid; ``used`` is None when NVML cannot tell)."""

    pid: int
    used: int | None
    utilization: int | None = None


@dataclass(frozen=True)
class GPU:
    """One physical GPU at the time of the snapshot."""

    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int | None
    utilization: int | None
    mig_mode: bool | None
    processes: tuple[GPUProcess, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["processes"] = [asdict(p) for p in self.processes]
        return data


@dataclass(frozen=True)
class Snapshot:
    """The inventory at one instant.

    ``available`` is False when there is no GPU (or no driver); ``message`` then says why in
    words a user can act on.
    """

    gpus: tuple[GPU, ...]
    simulated: bool
    available: bool
    driver: str | None = None
    message: str | None = None
    taken_at: float = field(default_factory=time.time)

    def by_uuid(self) -> dict[str, GPU]:
        return {gpu.uuid: gpu for gpu in self.gpus}

    def find(self, ident: str | int) -> GPU | None:
        """A GPU by index (``0``, ``"0"``) or UUID (``GPU-...``), or None."""
        text = str(ident).strip()
        for gpu in self.gpus:
            if text == str(gpu.index) or text == gpu.uuid or (len(text) >= 8 and gpu.uuid.startswith(text)):
                return gpu
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulated": self.simulated,
            "available": self.available,
            "driver": self.driver,
            "message": self.message,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py's module

    return pynvml


class Inventory:
    """Reads GPUs from NVML, or from the simulated NVML when ``simulate`` is given.

    Thread-safe; NVML is initialised once, lazily, and an initialisation failure is
    remembered as the "no GPU" state rather than retried on every call.
    """

    def __init__(self, simulate: str = "", nvml: Any = None) -> None:
        self.simulate = simulate.strip()
        self._lock = threading.Lock()
        self._nvml: Any = nvml
        self._error: str | None = None
        self._initialised = False

    @property
    def simulated(self) -> bool:
        return bool(self.simulate)

    def describe(self) -> str:
        """How the GPUs are provided, for headers: ``simulated (2 x 16 GiB)`` or ``NVML``."""
        if self.simulated:
            return f"simulated ({describe(self.simulate)})"
        return "NVML"

    def _init(self) -> Any:
        with self._lock:
            if self._initialised:
                return self._nvml
            self._initialised = True
            if self._nvml is None:
                if self.simulated:
                    self._nvml = SimulatedNVML(self.simulate)  # InvalidConfig propagates: user mistake
                else:
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

    def snapshot(self) -> Snapshot:
        """Every GPU with memory, utilisation, MIG mode and per-process memory."""
        try:
            nvml = self._init()
        except InvalidConfig:
            raise
        if nvml is None:
            return Snapshot(gpus=(), simulated=False, available=False, message=self._error)
        count = _safe(nvml.nvmlDeviceGetCount) or 0
        gpus = tuple(g for g in (self._read_gpu(nvml, i) for i in range(count)) if g is not None)
        message = None if gpus else "NVML reports no GPU on this machine."
        return Snapshot(
            gpus=gpus,
            simulated=self.simulated,
            available=bool(gpus),
            driver=_safe(nvml.nvmlSystemGetDriverVersion),
            message=message,
        )

    def _read_gpu(self, nvml: Any, index: int) -> GPU | None:
        handle = _safe(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if handle is None:
            return None
        uuid = _safe(lambda: nvml.nvmlDeviceGetUUID(handle))
        memory = _safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        if uuid is None or memory is None:
            return None  # cannot place a slice on a GPU we cannot name or size
        util = _safe(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        mig = _safe(lambda: nvml.nvmlDeviceGetMigMode(handle))
        process_util: dict[int, int] = {}
        for sample in _safe(lambda: nvml.nvmlDeviceGetProcessUtilization(handle, 0)) or []:
            process_util[int(sample.pid)] = max(process_util.get(int(sample.pid), 0), int(sample.smUtil))
        processes = []
        for proc in _safe(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []:
            used = getattr(proc, "usedGpuMemory", None)
            processes.append(
                GPUProcess(pid=int(proc.pid), used=int(used) if used is not None else None, utilization=process_util.get(int(proc.pid)))
            )
        return GPU(
            index=index,
            uuid=_text(uuid),
            name=_text(_safe(lambda: nvml.nvmlDeviceGetName(handle)) or "unknown GPU"),
            memory_total=int(memory.total),
            memory_used=int(memory.used) if memory.used is not None else None,
            utilization=int(util.gpu) if util is not None else None,
            mig_mode=bool(mig[0]) if mig is not None else None,
            processes=tuple(processes),
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _safe(call: Callable[[], T]) -> T | None:
    """Run one NVML query; any NVML failure means "not available"."""
    try:
        return call()
    except Exception:
        return None
