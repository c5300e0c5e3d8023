"""Hardware layer: GPUs as NVML (or the simulated NVML) reports them.

Names are imported on first use (a kernel loading jupyter-vgpu should not pay for NVML).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .inventory import GPU, GPUProcess, Inventory, MIGDevice, Snapshot
    from .mps import MPSStatus
    from .simulated import SimulatedNVML, parse_spec

_WHERE = {
    "GPU": "inventory",
    "GPUProcess": "inventory",
    "Inventory": "inventory",
    "MIGDevice": "inventory",
    "MPSStatus": "mps",
    "Snapshot": "inventory",
    "SimulatedNVML": "simulated",
    "parse_spec": "simulated",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GPU", "GPUProcess", "Inventory", "MIGDevice", "MPSStatus", "SimulatedNVML", "Snapshot", "parse_spec"]
