"""The one mapping from a slice to a process environment.

A kernel started by the provisioner and a command started by ``jupyter vgpu run`` get
exactly this environment, so a slice behaves the same wherever it is used.

The slice's tier decides the hard part of it:

* MIG: ``CUDA_VISIBLE_DEVICES`` names the MIG device; the hardware holds the process to it.
* MPS: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` is the *whole slice* on each GPU (context allowance
  included) and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` the slice's share of the SMs. The whole
  slice, not the framework limit: the frameworks stop at their own limit first (and explain an
  out-of-memory error in the slice's terms), so MPS only catches code that lifts that limit, and
  the process can never hold more than the ledger reserved for it, whether or not the driver
  counts the CUDA context under the MPS limit. The limit names devices by the ordinal the
  process sees (0, 1... in ``CUDA_VISIBLE_DEVICES`` order), the form NVIDIA documents.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .records import Slice, Tier

#: Every variable :func:`slice_environment` or :func:`cpu_environment` may set. A process that
#: gets a slice starts from an environment without any of them (:func:`without_slice`), so a
#: command run from a sliced kernel, or a kernel started from a terminal that ran one, does not
#: inherit a stale limit (say, the MPS pinned memory of another slice).
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
    "JUPYTER_VGPU_GPUS",
    "JUPYTER_VGPU_TIER",
    "JUPYTER_VGPU_MIG_PROFILES",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "CUPY_GPU_MEMORY_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
)


def without_slice(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without any variable a slice sets (see :data:`VARIABLES`)."""
    return {key: value for key, value in env.items() if key not in VARIABLES}


def with_slice(env: Mapping[str, str], slice_: Slice, *, ledger_path: str, simulate: str = "") -> dict[str, str]:
    """``env`` for a process that holds ``slice_``: inherited slice variables replaced."""
    return {**without_slice(env), **slice_environment(slice_, ledger_path=ledger_path, simulate=simulate)}


def slice_environment(slice_: Slice, *, ledger_path: str, simulate: str = "") -> dict[str, str]:
    """The variables of a process that holds ``slice_`` (README.md, "Kernel environment")."""
    limit = slice_.memory_limit
    # What CUDA reports as the device's total: the MIG device itself on a MIG slice.
    smallest_total = min(slice_.device_memory)
    env = {
        # NVML ignores CUDA_VISIBLE_DEVICES and indices can differ from CUDA's order: UUIDs are unambiguous.
        "CUDA_VISIBLE_DEVICES": ",".join(slice_.visible_devices),
        "JUPYTER_VGPU_GPUS": ",".join(slice_.gpus),
        "JUPYTER_VGPU_TIER": slice_.tier.value,
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
    if slice_.mig_profiles:
        env["JUPYTER_VGPU_MIG_PROFILES"] = ",".join(slice_.mig_profiles)
    if slice_.tier is Tier.MPS:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
            f"{ordinal}={max(1, amount // 2**20)}M" for ordinal, amount in enumerate(slice_.memory)
        )
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(mps_thread_percentage(slice_.fraction))
    if simulate:
        env["JUPYTER_VGPU_SIMULATE"] = simulate
    return env


def mps_thread_percentage(fraction: float) -> int:
    """The share of the SMs an MPS client gets for a slice: its fraction, rounded up, 1 to 100."""
    return max(1, min(100, math.ceil(round(fraction * 100, 6))))


def cpu_environment(*, logical_devices: int = 1, reason: str) -> dict[str, str]:
    """Environment for a process started on the CPU because no GPU slice could be had."""
    return {
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTER_VGPU_LOGICAL_DEVICES": str(logical_devices),
        "JUPYTER_VGPU_NO_GPU": reason,
    }
