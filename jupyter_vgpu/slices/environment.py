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
import re
from collections.abc import Callable, Mapping, MutableMapping

from .records import Slice, Tier, mps_thread_percentage

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
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "CUPY_GPU_MEMORY_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
)


def without_slice(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without any variable a slice sets (see :data:`VARIABLES`)."""
    return {key: value for key, value in env.items() if key not in VARIABLES}


def with_slice(
    env: Mapping[str, str], slice_: Slice, *, ledger_path: str, simulate: str = "", device_names: str = "uuid"
) -> dict[str, str]:
    """``env`` for a process that holds ``slice_``: inherited slice variables replaced."""
    return {
        **without_slice(env),
        **slice_environment(slice_, ledger_path=ledger_path, simulate=simulate, device_names=device_names),
    }


#: How ``CUDA_VISIBLE_DEVICES`` names a slice's GPUs: by UUID (unambiguous; what CUDA, PyTorch,
#: TensorFlow and JAX accept) or by index (for tools that call ``int()`` on it, such as vLLM
#: before 0.24; with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` CUDA's order is NVML's). A MIG device has
#: no index: a MIG slice always names its MIG UUID.
DEVICE_NAMES = ("uuid", "index")


def slice_environment(
    slice_: Slice, *, ledger_path: str, simulate: str = "", device_names: str = "uuid"
) -> dict[str, str]:
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
    if device_names == "index" and slice_.tier is not Tier.MIG:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in slice_.gpu_indices)
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


def cpu_environment(*, logical_devices: int = 1, reason: str) -> dict[str, str]:
    """Environment for a process started on the CPU because no GPU slice could be had."""
    return {
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTER_VGPU_LOGICAL_DEVICES": str(logical_devices),
        "JUPYTER_VGPU_NO_GPU": reason,
    }


#: The first releases that read the limit from the newer variables (docs/gpu.md cites the source):
#: jaxlib reads XLA_CLIENT_MEM_FRACTION and raises if the deprecated name is set beside it
#: (0.4.32; 0.4.33 was the first on PyPI); PyTorch's allocator takes per_process_memory_fraction in
#: PYTORCH_CUDA_ALLOC_CONF (2.10; earlier releases refuse the unknown option).
JAXLIB_NEW_NAME = (0, 4, 32)
TORCH_FRACTION_OPTION = (2, 10)


def installed_version(distribution: str) -> str | None:
    """The version of an installed distribution, without importing it (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def for_installed_frameworks(
    env: Mapping[str, str], versions: Callable[[str], str | None] = installed_version
) -> dict[str, str | None]:
    """What to change in a slice's ``env`` for the framework releases installed here (None:
    unset), so each reads the slice's limit from the environment, in this process and in every
    process it starts (``!python train.py``, DataLoader workers). Applied where the program runs:
    by the kernel extension at load, and by ``jupyter vgpu run`` for its command."""
    fraction = env.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    if not fraction:
        return {}
    changes: dict[str, str | None] = {}
    if _release(versions("jaxlib")) >= JAXLIB_NEW_NAME:
        changes["XLA_CLIENT_MEM_FRACTION"] = fraction
        changes["XLA_PYTHON_CLIENT_MEM_FRACTION"] = None  # both set: jaxlib refuses the GPU backend
    if _release(versions("torch")) >= TORCH_FRACTION_OPTION:
        # The user's own allocator settings stay; in 2.10 PYTORCH_CUDA_ALLOC_CONF wins over
        # PYTORCH_ALLOC_CONF, so that is the one to extend unless only the latter is set.
        name = "PYTORCH_ALLOC_CONF" if env.get("PYTORCH_ALLOC_CONF") and not env.get("PYTORCH_CUDA_ALLOC_CONF") else "PYTORCH_CUDA_ALLOC_CONF"
        options = [o for o in env.get(name, "").split(",") if o.strip() and not o.strip().startswith("per_process_memory_fraction")]
        changes[name] = ",".join([*options, f"per_process_memory_fraction:{fraction}"])
    return changes


def fit_installed_frameworks(env: MutableMapping[str, str]) -> None:
    """Apply :func:`for_installed_frameworks` to ``env`` (a dict, or ``os.environ``) in place."""
    for name, value in for_installed_frameworks(env).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value


def _release(text: str | None) -> tuple[int, ...]:
    """``"2.10.0+cpu"`` -> ``(2, 10, 0)``, ``"2.10.0rc1"`` -> ``(2, 10, 0)``; ``()`` when unknown."""
    match = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()
