"""Hardware layer: GPUs as NVML (or the simulated NVML) reports them.

Names are imported on first use (a kernel loading jupyter-vgpu should not pay for NVML).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .inventory import Inventory
    from .model import GPU, GPUProcess, MIGDevice, Snapshot
    from .mps import MPSStatus
    from .simulate_spec import parse_spec
    from .simulated_nvml import SimulatedNVML

_WHERE = {
    "GPU": "model",
    "GPUProcess": "model",
    "Inventory": "inventory",
    "MIGDevice": "model",
    "MPSStatus": "mps",
    "Snapshot": "model",
    "SimulatedNVML": "simulated_nvml",
    "parse_spec": "simulate_spec",
}


__getattr__ = lazy_names(__name__, globals(), _WHERE)


__all__ = ["GPU", "GPUProcess", "Inventory", "MIGDevice", "MPSStatus", "SimulatedNVML", "Snapshot", "parse_spec"]
