"""JAX: configured by its memory-fraction variable and ``XLA_PYTHON_CLIENT_PREALLOCATE``.

The provisioner sets them before the kernel starts (the extension renames the fraction to
``XLA_CLIENT_MEM_FRACTION`` where the installed jaxlib reads that name) and JAX reads them when
it starts its GPU backend (its first op), so the hook only records what is in force.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .base import Framework, guard_now, release
from .records import APPLIED, RECORDED, SKIPPED, FrameworkRecord

if TYPE_CHECKING:
    from .base import ProcessState

_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE")

#: The first jaxlib that reads XLA_CLIENT_MEM_FRACTION, and raises if the deprecated name is set
#: beside it (0.4.32; 0.4.33 was the first on PyPI; docs/gpu.md cites the source).
JAXLIB_NEW_NAME = (0, 4, 32)


def backend_started() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False
    check = getattr(bridge, "backends_are_initialized", None)
    try:
        if callable(check):
            return bool(check())
        return bool(getattr(bridge, "_backends", None))
    except Exception:
        return False


class JAX(Framework):
    name = "jax"
    title = "JAX"
    module = "jax"
    variables = _VARIABLES

    bypasses = {"XLA_PYTHON_CLIENT_ALLOCATOR": frozenset({"cuda_async", "platform"})}
    bypass_reason = "JAX's memory fraction applies to its default (BFC) allocator only."
    keeps_until_restart = True  # its BFC allocator keeps what it grew to (give_back)

    def would_give(self, limit: int, fraction: str, logical_devices: int) -> str:
        return f"memory fraction {fraction} of the GPU, no preallocation"

    def environment(self, limit: int, fraction: str) -> dict[str, str]:
        # The limit as a share of the device, rounded down so it stays inside the slice; no preallocation.
        return {"XLA_PYTHON_CLIENT_MEM_FRACTION": fraction, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}

    def for_installed(self, env: Mapping[str, str], fraction: str, versions: Callable[[str], str | None]) -> dict[str, str | None]:
        if release(versions("jaxlib")) < JAXLIB_NEW_NAME:
            return {}
        return {"XLA_CLIENT_MEM_FRACTION": fraction, "XLA_PYTHON_CLIENT_MEM_FRACTION": None}  # both set: jaxlib refuses the GPU backend

    def configure(self, jax: Any, state: ProcessState) -> FrameworkRecord:
        record = self._configure(jax, state)
        guarded = guard_now(self, os.environ) if state.facts.sliced else ""  # read when JAX starts its GPU backend
        return replace(record, detail=f"{record.detail}; {guarded}") if guarded else record

    def _configure(self, jax: Any, state: ProcessState) -> FrameworkRecord:
        settings = [f"{name}={os.environ[name]}" for name in _VARIABLES if os.environ.get(name)]
        if not state.facts.sliced:
            return FrameworkRecord(self.title, SKIPPED, "no slice in this kernel: JAX uses its defaults")
        if not settings:
            return FrameworkRecord(self.title, SKIPPED, "the XLA_PYTHON_CLIENT_* variables are not set in this kernel")
        status = APPLIED if backend_started() else RECORDED
        when = "in force" if status == APPLIED else "read when JAX starts its GPU backend"
        return FrameworkRecord(self.title, status, f"{', '.join(settings)} ({when})")

    def give_back(self, jax: Any) -> str | None:
        if not backend_started():
            return None
        # Without preallocation its BFC allocator grows on demand and keeps what it grew to.
        return "JAX keeps the GPU memory its allocator grew to until the kernel restarts"

    def holds_gpu(self, jax: Any) -> str | None:
        if backend_started():
            return "JAX has started its GPU backend with the current memory fraction."
        return None

    def reapply(self, jax: Any, state: ProcessState) -> FrameworkRecord | None:
        return self.configure(jax, state)  # the environment already holds the new size

    def simulated_memory(self, jax: Any) -> int | None:
        if not backend_started():
            return 0  # no array yet
        arrays = getattr(jax, "live_arrays", None)
        if not callable(arrays):
            return None
        try:
            # its CPU backend keeps no allocator statistics: the arrays alive (1.6 ms for 2,000)
            return sum(int(array.nbytes) for array in arrays())
        except Exception:
            return None

    def devices(self, jax: Any) -> list[str]:
        if not backend_started():
            return ["backend not started yet (it starts at JAX's first op)"]
        return [str(device) for device in jax.devices()]
