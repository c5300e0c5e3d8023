"""The one mapping from a slice to a process environment.

A kernel started by the provisioner and a command started by ``jupyter vgpu run`` get
exactly this environment, so a slice behaves the same wherever it is used.
"""

from __future__ import annotations

import math

from .ledger import Slice

#: Variables this module may set; a process without a slice gets none of them.
VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "JUPYTER_VGPU_SLICE_ID",
    "JUPYTER_VGPU_FRACTION",
    "JUPYTER_VGPU_MEMORY_LIMIT",
    "JUPYTER_VGPU_MEMORY_RESERVED",
    "JUPYTER_VGPU_CONTEXT_ALLOWANCE",
    "JUPYTER_VGPU_LOGICAL_DEVICES",
    "JUPYTER_VGPU_NO_GPU",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "CUPY_GPU_MEMORY_LIMIT",
)


def slice_environment(slice_: Slice, *, ledger_path: str, simulate: str = "") -> dict[str, str]:
    """Environment for a process that holds ``slice_`` (contract: DESIGN.md, "Kernel environment")."""
    limit = slice_.memory_limit
    smallest_total = min(slice_.memory_total)
    env = {
        # NVML ignores CUDA_VISIBLE_DEVICES and indices can differ from CUDA's order: UUIDs are unambiguous.
        "CUDA_VISIBLE_DEVICES": ",".join(slice_.gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "JUPYTER_VGPU_SLICE_ID": slice_.id,
        "JUPYTER_VGPU_FRACTION": f"{slice_.fraction:.6g}",
        "JUPYTER_VGPU_MEMORY_LIMIT": str(limit),
        "JUPYTER_VGPU_MEMORY_RESERVED": str(slice_.memory_per_gpu),
        "JUPYTER_VGPU_CONTEXT_ALLOWANCE": str(slice_.context_allowance),
        "JUPYTER_VGPU_LOGICAL_DEVICES": str(slice_.logical_devices),
        "JUPYTER_VGPU_LEDGER": ledger_path,
        # JAX: a fraction of the device's total memory, rounded down so it stays inside the slice.
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{math.floor(limit / smallest_total * 1000) / 1000:.3f}",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "CUPY_GPU_MEMORY_LIMIT": str(limit),
    }
    if simulate:
        env["JUPYTER_VGPU_SIMULATE"] = simulate
    return env


def cpu_environment(*, logical_devices: int = 1, reason: str) -> dict[str, str]:
    """Environment for a process started on the CPU because no GPU slice could be had."""
    return {
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTER_VGPU_LOGICAL_DEVICES": str(logical_devices),
        "JUPYTER_VGPU_NO_GPU": reason,
    }
