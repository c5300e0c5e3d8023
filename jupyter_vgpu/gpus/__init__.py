"""Hardware layer: GPUs as NVML (or the simulated NVML) reports them."""

from .inventory import GPU, GPUProcess, Inventory, Snapshot
from .simulated import SimulatedNVML, parse_spec

__all__ = ["GPU", "GPUProcess", "Inventory", "SimulatedNVML", "Snapshot", "parse_spec"]
