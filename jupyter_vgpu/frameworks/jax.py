"""JAX: configured by its memory-fraction variable and ``XLA_PYTHON_CLIENT_PREALLOCATE``.

The provisioner sets them before the kernel starts (the extension renames the fraction to
``XLA_CLIENT_MEM_FRACTION`` where the installed jaxlib reads that name) and JAX reads them when
it starts its GPU backend (its first op), so the hook only records what is in force.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from ..records import APPLIED, RECORDED, SKIPPED, FrameworkRecord
from .base import Framework

if TYPE_CHECKING:
    from ..state import KernelState

_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE")


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

    def configure(self, jax: Any, state: KernelState) -> FrameworkRecord:
        settings = [f"{name}={os.environ[name]}" for name in _VARIABLES if os.environ.get(name)]
        if not state.facts.sliced:
            return FrameworkRecord(self.title, SKIPPED, "no slice in this kernel: JAX uses its defaults")
        if not settings:
            return FrameworkRecord(self.title, SKIPPED, "the XLA_PYTHON_CLIENT_* variables are not set in this kernel")
        status = APPLIED if backend_started() else RECORDED
        when = "in force" if status == APPLIED else "read when JAX starts its GPU backend"
        return FrameworkRecord(self.title, status, f"{', '.join(settings)} ({when})")

    def holds_gpu(self, jax: Any) -> str | None:
        if backend_started():
            return "JAX has started its GPU backend with the current memory fraction."
        return None

    def reapply(self, jax: Any, state: KernelState) -> FrameworkRecord | None:
        return self.configure(jax, state)  # the environment already holds the new size

    def devices(self, jax: Any) -> list[str]:
        if not backend_started():
            return ["backend not started yet (it starts at JAX's first op)"]
        return [str(device) for device in jax.devices()]
