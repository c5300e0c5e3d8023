"""Beyond one node: the same policy as KubeSpawner resources, so the cluster's scheduler places the pod.

On Kubernetes each user's server is a pod; the scheduler, not a node broker, decides which GPU it
gets. The user's quota becomes the pod's extended resources, and jupyter-vgpu then slices what the
pod got among that user's kernels (the embedded ledger inside the pod, sliced kernelspecs)::

    from jupyter_vgpu.hub.kubernetes import pre_spawn_hook
    c.KubeSpawner.pre_spawn_hook = pre_spawn_hook("/etc/jupyterhub/vgpu-policy.json", mode="hami", gpu_memory="40GiB")

The pod's budget is the user's ``max_total`` (else ``max_per_kernel``); policy groups are the
user's JupyterHub groups. Modes:

* ``gpu``: whole GPUs from NVIDIA's device plugin, ``nvidia.com/gpu: ceil(share)``;
* ``hami``: HAMi's shared GPUs, ``nvidia.com/gpu`` plus per-GPU ``nvidia.com/gpumem`` (MiB) and
  ``nvidia.com/gpucores`` (percent), so a quarter GPU is a quarter of the memory and of the cores;
* ``mig``: the smallest MIG profile that holds the share, e.g. ``nvidia.com/mig-2g.10gb: 1``.

``gpus`` and ``max_wait`` have no Kubernetes meaning here (use node selectors and the scheduler's
own queueing); ``max_slices: 0`` gives the pod no GPU at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig
from ..units import MiB, parse_bytes, shorten
from .policy import Policy, Share, load_policy

MODES = ("gpu", "hami", "mig")

#: MIG profiles of an A100 40GB: name -> (share of the GPU's compute, memory).
A100_40GB_PROFILES: dict[str, tuple[float, int]] = {
    "1g.5gb": (1 / 7, 5 * 1000**3),
    "2g.10gb": (2 / 7, 10 * 1000**3),
    "3g.20gb": (3 / 7, 20 * 1000**3),
    "4g.20gb": (4 / 7, 20 * 1000**3),
    "7g.40gb": (1.0, 40 * 1000**3),
}


def pod_share(policy: Policy, user: str, groups: list[str]) -> Share | None:
    """What the user's pod may hold in all: ``max_total``, else ``max_per_kernel``; None: no GPU."""
    quota = policy.quota(user, groups)
    slices, _ = quota.get("max_slices")
    if slices == 0:
        return None
    total, _ = quota.get("max_total")
    if total is None:
        total, _ = quota.get("max_per_kernel")
    return total if isinstance(total, Share) else None


def resources(
    share: Share | None,
    *,
    mode: str = "gpu",
    gpu_memory: int | None = None,
    mig_profiles: Mapping[str, tuple[float, int]] = A100_40GB_PROFILES,
) -> dict[str, str]:
    """Extended resources for a pod holding ``share`` (empty: no GPU)."""
    if mode not in MODES:
        raise InvalidConfig(f"mode {shorten(mode)} is not allowed; use one of: {', '.join(MODES)}.")
    if share is None:
        return {}
    if share.memory is not None and gpu_memory is None and mode != "mig":
        if mode == "hami":
            return {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(math.ceil(share.memory / MiB))}
        raise InvalidConfig("A memory share needs gpu_memory (each GPU's size) to count whole GPUs.")
    units = share.gpus if share.gpus is not None else (share.memory or 0) / (gpu_memory or 1)
    if mode == "gpu":
        return {"nvidia.com/gpu": str(max(1, math.ceil(units - 1e-9)))}
    if mode == "hami":
        count = max(1, math.ceil(units - 1e-9))
        per_gpu = min(1.0, units / count)
        limits = {"nvidia.com/gpu": str(count), "nvidia.com/gpucores": str(max(1, math.floor(per_gpu * 100)))}
        if gpu_memory is not None:
            limits["nvidia.com/gpumem"] = str(max(1, math.floor(per_gpu * gpu_memory / MiB)))
        else:
            limits["nvidia.com/gpumem-percentage"] = str(max(1, math.floor(per_gpu * 100)))
        return limits
    # mig: one instance, the smallest that holds the share (memory shares by memory)
    def holds(profile: tuple[float, int]) -> bool:
        compute, memory = profile
        if share.memory is not None:
            return memory >= share.memory
        return compute + 1e-9 >= units

    fitting = sorted((p for p in mig_profiles.items() if holds(p[1])), key=lambda p: (p[1][0], p[1][1]))
    if not fitting:
        raise InvalidConfig(f"No MIG profile holds {share.describe()}; the largest is {max(mig_profiles, key=lambda n: mig_profiles[n])}.")
    return {f"nvidia.com/mig-{fitting[0][0]}": "1"}


def pre_spawn_hook(
    policy: str | Path | Policy,
    *,
    mode: str = "gpu",
    gpu_memory: str | int | None = None,
    mig_profiles: Mapping[str, tuple[float, int]] = A100_40GB_PROFILES,
) -> Callable[[Any], None]:
    """A ``KubeSpawner.pre_spawn_hook`` that gives each user's pod the GPU resources of their quota.

    ``policy`` is a file (re-read at every spawn, so edits apply to the next server start) or a
    :class:`Policy`. The hook sets ``extra_resource_limits`` and ``extra_resource_guarantees``
    (extended resources need both equal) and leaves other spawner settings alone.
    """
    if mode not in MODES:
        raise InvalidConfig(f"mode {shorten(mode)} is not allowed; use one of: {', '.join(MODES)}.")
    memory = parse_bytes(gpu_memory, what="gpu_memory") if gpu_memory is not None else None

    def hook(spawner: Any) -> None:
        current = policy if isinstance(policy, Policy) else load_policy(policy)
        user = spawner.user
        groups = [getattr(g, "name", str(g)) for g in (getattr(user, "groups", None) or [])]
        limits = resources(pod_share(current, user.name, groups), mode=mode, gpu_memory=memory, mig_profiles=mig_profiles)
        spawner.extra_resource_limits = {**dict(spawner.extra_resource_limits), **limits}
        spawner.extra_resource_guarantees = {**dict(spawner.extra_resource_guarantees), **limits}

    return hook
