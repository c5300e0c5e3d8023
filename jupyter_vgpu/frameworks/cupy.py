"""CuPy: the default memory pool's limit.

CuPy reads ``CUPY_GPU_MEMORY_LIMIT`` (set by the provisioner) whenever it creates a device's
pool; the hook also sets the limit on the current device's pool, which needs no CUDA context
(``set_limit(size=...)``; a ``fraction`` would query the device and create one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..units import format_bytes
from .base import Framework
from .records import APPLIED, SKIPPED, FrameworkRecord

if TYPE_CHECKING:
    from .base import ProcessState


class CuPy(Framework):
    name = "cupy"
    title = "CuPy"
    module = "cupy"
    variables = ("CUPY_GPU_MEMORY_LIMIT",)

    def would_give(self, limit: int, fraction: str, logical_devices: int) -> str:
        return f"memory pool limit {format_bytes(limit)} per GPU"

    def environment(self, limit: int, fraction: str) -> dict[str, str]:
        return {"CUPY_GPU_MEMORY_LIMIT": str(limit)}  # bytes; read whenever CuPy makes a device's pool

    def configure(self, cupy: Any, state: ProcessState) -> FrameworkRecord:
        limit = state.facts.framework_limit  # an elastic slice's limit: the pool grows to it on demand
        if not state.facts.sliced or limit is None:
            return FrameworkRecord(self.title, SKIPPED, "no slice in this kernel: CuPy may use whole GPUs")
        cupy.get_default_memory_pool().set_limit(size=limit)
        return FrameworkRecord(self.title, APPLIED, f"memory pool limit {format_bytes(limit)} per GPU")

    def holds_gpu(self, cupy: Any) -> str | None:
        if int(cupy.get_default_memory_pool().total_bytes()) > 0:
            return "CuPy already holds GPU memory in its pool."
        return None

    def give_back(self, cupy: Any) -> str | None:
        pool = cupy.get_default_memory_pool()
        if not int(pool.free_bytes()):
            return None
        pool.free_all_blocks()  # blocks no array holds go back to the driver
        return "CuPy released its memory pool's free blocks (memory its arrays hold stays)"

    def reapply(self, cupy: Any, state: ProcessState) -> FrameworkRecord | None:
        return self.configure(cupy, state)

    def devices(self, cupy: Any) -> list[str]:
        count = int(cupy.cuda.runtime.getDeviceCount())
        return [f"cuda:{index}" for index in range(count)]

    def memory(self, cupy: Any) -> tuple[int | None, int | None]:
        pool = cupy.get_default_memory_pool()
        return int(pool.total_bytes()), None

    def oom_errors(self, cupy: Any) -> tuple[type[BaseException], ...]:
        error = getattr(getattr(cupy.cuda, "memory", None), "OutOfMemoryError", None)
        return (error,) if isinstance(error, type) else ()
