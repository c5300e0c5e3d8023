"""The one mapping from a slice to a process environment.

A kernel started by the provisioner and a command started by ``jupyter vgpu run`` get
exactly this environment, so a slice behaves the same wherever it is used.

Each framework adds its own variables (``jupyter_vgpu/frameworks/``) and the slice's tier its
own (``jupyter_vgpu/enforcement/``: a MIG slice's ``CUDA_VISIBLE_DEVICES`` names its MIG device;
an MPS slice gets the MPS server's pinned memory limit and thread share).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING

from ..enforcement import TIERS, Tier, by_tier
from ..enforcement.base import ENV_ENTER
from ..frameworks import FRAMEWORKS
from ..frameworks.base import GUARDED, guarded_after
from .reports import report_dir

if TYPE_CHECKING:
    from .records import Slice  # a kernel fits its environment at start without the ledger's records

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
    "JUPYTER_VGPU_MEMORY_FRACTION",
    "JUPYTER_VGPU_BURST_LIMIT",
    "JUPYTER_VGPU_BURST_FRACTION",
    "JUPYTER_VGPU_BURST_SHARE",
    "JUPYTER_VGPU_MEMORY_RESERVED",
    "JUPYTER_VGPU_CONTEXT_ALLOWANCE",
    "JUPYTER_VGPU_LOGICAL_DEVICES",
    "JUPYTER_VGPU_NO_GPU",
    "JUPYTER_VGPU_GPUS",
    "JUPYTER_VGPU_TIER",
    "JUPYTER_VGPU_MIG_PROFILES",
    ENV_ENTER,
    GUARDED,
    *(name for framework in FRAMEWORKS for name in framework.variables),
    *(name for tier in TIERS for name in tier.variables),
)


def without_slice(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without any variable a slice sets (see :data:`VARIABLES`, and what a tier marks as
    its own: :meth:`~jupyter_vgpu.enforcement.base.Enforcement.set_here`)."""
    dropped = set(VARIABLES).union(*(tier.set_here(env) for tier in TIERS))
    return {key: value for key, value in env.items() if key not in dropped}


def with_slice(
    env: Mapping[str, str], slice_: Slice, *, ledger_path: str, simulate: str = "", device_names: str = "uuid"
) -> dict[str, str]:
    """``env`` for a process that holds ``slice_``: inherited slice variables replaced, its
    fractions taken of what CUDA sees under the scheduler share ``env`` names (a pod's, a job's)."""
    from ..gpus.lenses import SchedulerLens

    portion = SchedulerLens.here(env).cuda_portion()
    return {
        **without_slice(env),
        **slice_environment(slice_, ledger_path=ledger_path, simulate=simulate, device_names=device_names, cuda_portion=portion),
    }


#: How ``CUDA_VISIBLE_DEVICES`` names a slice's GPUs: by UUID (unambiguous; what CUDA, PyTorch,
#: TensorFlow and JAX accept) or by index (for tools that call ``int()`` on it, such as vLLM
#: before 0.24; with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` CUDA's order is NVML's). A MIG device has
#: no index: a MIG slice always names its MIG UUID.
DEVICE_NAMES = ("uuid", "index")


def slice_environment(
    slice_: Slice, *, ledger_path: str, simulate: str = "", device_names: str = "uuid", cuda_portion: float | None = None
) -> dict[str, str]:
    """The variables of a process that holds ``slice_`` (README.md, "Kernel environment").
    ``cuda_portion``: the part of the card a scheduler gave the process without CUDA reporting
    it (:meth:`~jupyter_vgpu.gpus.lenses.SchedulerLens.cuda_portion`; :func:`with_slice` reads it
    from the environment it is given)."""
    limit = slice_.memory_limit
    # What CUDA reports as the device's total: the MIG device itself on a MIG slice.
    smallest_total: float = min(slice_.device_memory)
    if slice_.tier is not Tier.MIG and (portion := cuda_portion) is not None:
        # In a KAI-Scheduler pod or a Slurm job with shards the slice's GPU is the pod's or job's
        # portion of the card, but CUDA (and so every framework's fraction) still sees the whole
        # card; HAMi-core, which HAMi preloads, makes CUDA report a HAMi pod's share itself.
        smallest_total = smallest_total / portion
    fraction = _share(limit, smallest_total)
    # An elastic slice's frameworks get its limit (issue 42) and grow on demand within it; the
    # reservation's own figures above keep their meaning.
    burst = slice_.memory_burst_limit
    framework_limit, framework_fraction = (burst, _share(burst, smallest_total)) if burst is not None else (limit, fraction)
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
        # The limit as a share of the device's total memory, rounded down so it stays inside the slice.
        "JUPYTER_VGPU_MEMORY_FRACTION": fraction,
    }
    if burst is not None:
        # What frameworks may grow to per GPU (the limit minus the context allowance), and as a share.
        env["JUPYTER_VGPU_BURST_LIMIT"] = str(burst)
        env["JUPYTER_VGPU_BURST_FRACTION"] = framework_fraction
        env["JUPYTER_VGPU_BURST_SHARE"] = slice_.request.describe_limit()  # the limit as asked: "1/2", "8.0 GiB"
    for framework in FRAMEWORKS:  # each framework's own variables (jupyter_vgpu/frameworks/)
        env.update(framework.environment(framework_limit, framework_fraction))
    if device_names == "index" and slice_.tier is not Tier.MIG:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in slice_.gpu_indices)
    if slice_.mig_profiles:
        env["JUPYTER_VGPU_MIG_PROFILES"] = ",".join(slice_.mig_profiles)
    folder = str(report_dir(ledger_path)) if ledger_path else ""  # the owner's private reports folder
    tier = by_tier(slice_.tier)  # the tier's own variables (jupyter_vgpu/enforcement/), as placed
    # a tier's cap is an elastic slice's limit where the tier bursts (memory_allowed), else the reservation
    env.update(tier.environment(slice_.memory_allowed, slice_.fraction, slice_id=slice_.id, folder=folder, setup=slice_.tier_setup))
    if tier.enters:  # its processes enter the slice's hold as they start (ledger.join)
        env[ENV_ENTER] = slice_.tier.value
    if simulate:
        env["JUPYTER_VGPU_SIMULATE"] = simulate
        for framework in FRAMEWORKS:  # so each can say what it holds in host memory (kernel.simulated)
            env.update(framework.simulated_environment())
    return env


def _share(amount: int, total: float) -> str:
    """``amount`` as a share of ``total``, rounded down so it stays inside: ``"0.250"``."""
    return f"{math.floor(amount / total * 1000) / 1000:.3f}"


def cpu_environment(*, logical_devices: int = 1, reason: str) -> dict[str, str]:
    """Environment for a process started on the CPU because no GPU slice could be had."""
    return {
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTER_VGPU_LOGICAL_DEVICES": str(logical_devices),
        "JUPYTER_VGPU_NO_GPU": reason,
    }


def installed_version(distribution: str) -> str | None:
    """The version of an installed distribution, without importing it (None: not installed).

    Read from the name of its ``<name>-<version>.dist-info`` folder on ``sys.path``, as pip,
    uv and conda install it: every sliced kernel asks at its start, and importlib.metadata (with
    the email package it parses METADATA with) cost 8 ms of that (issue 47). Only where a folder
    of the name is something else (an ``.egg-info``) does importlib.metadata answer."""
    wanted = re.sub(r"[-_.]+", "_", distribution).lower()
    other_form = False
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            stem, dot, kind = name.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            found, _, version = stem.partition("-")
            if re.sub(r"[-_.]+", "_", found).lower() != wanted:
                continue
            if kind == "dist-info" and version:
                return version
            other_form = True
    if not other_form:
        return None
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version(distribution)
    except PackageNotFoundError:
        return None


def for_installed_frameworks(
    env: Mapping[str, str], versions: Callable[[str], str | None] = installed_version
) -> dict[str, str | None]:
    """What to change in a slice's ``env`` for the framework releases installed here (None:
    unset), so each reads the slice's limit from the environment, in this process and in every
    process it starts (``!python train.py``, DataLoader workers): each registered framework's
    :meth:`~jupyter_vgpu.frameworks.base.Framework.for_installed`. Applied where the program runs:
    by the kernel extension at load, by the start-up hook, and by ``jupyter vgpu run``."""
    fraction = env.get("JUPYTER_VGPU_BURST_FRACTION") or env.get("JUPYTER_VGPU_MEMORY_FRACTION")  # an elastic slice's limit
    if not fraction:
        return {}
    changes: dict[str, str | None] = {}
    for framework in FRAMEWORKS:
        changes.update(framework.for_installed(env, fraction, versions))
    # The allocator guard: settings under which a framework's limit is no cap are unset.
    removed = [f"{name}={value}" for framework in FRAMEWORKS for name, value in framework.bypassing(env).items()]
    if removed:
        changes.update(dict.fromkeys([item.split("=", 1)[0] for item in removed]))
        changes[GUARDED] = guarded_after(env, removed)
    return changes


def fit_installed_frameworks(env: MutableMapping[str, str]) -> None:
    """Apply :func:`for_installed_frameworks` to ``env`` (a dict, or ``os.environ``) in place."""
    for name, value in for_installed_frameworks(env).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
