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
* ``mig``: the smallest MIG profile that holds the share, e.g. ``nvidia.com/mig-2g.10gb: 1``;
* ``kai``: KAI-Scheduler (``schedulerName: kai-scheduler``): a share below one GPU is its
  ``gpu-fraction`` annotation (``gpu-memory`` in MiB for a memory share), whole GPUs are
  ``nvidia.com/gpu``; the pod's queue label ``kai.scheduler/queue`` is the first of the user's
  groups the policy names (else ``queue``), so fair share follows the same groups as the quotas.

``profile_list(...)`` instead lets each user pick a share ("1/4 GPU", "1/2 GPU", ...) up to their
budget when their server starts (``c.KubeSpawner.profile_list``). Either way the pod carries the
scheduler's share, and jupyter-vgpu inside it splits that share per kernel (gpus.podshare).

``gpus`` and ``max_wait`` have no Kubernetes meaning here (use node selectors and the scheduler's
own queueing); ``max_slices: 0`` gives the pod no GPU at all. Nor has ``max_limit`` (issue 42): an
extended resource's limit is its request, so a pod gets its budget and never more to burst to; the
kernels' limits inside the pod stay within what the pod got, and the ledger there does not read the
hub policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig
from ..units import MiB, parse_bytes, shorten
from .policy import Policy, Share, load_policy

MODES = ("gpu", "hami", "mig", "kai")
KAI_SCHEDULER = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
#: What Kubernetes takes as a label value (63 characters, alphanumerics and -_. inside).
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)$", re.ASCII)
#: The shares profile_list offers by default (each only to users whose budget holds it).
PROFILE_SHARES = ("1/4", "1/2", "1")

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


def kai_settings(share: Share | None, *, queue: str, gpu_memory: int | None = None) -> dict[str, Any]:
    """KubeSpawner settings for a KAI-Scheduler pod holding ``share`` (KAI's docs/gpu-sharing)."""
    if not _LABEL_VALUE.match(queue):
        raise InvalidConfig(f"queue {shorten(queue)} is not a Kubernetes label value; use up to 63 letters, digits, '-', '_' or '.'.")
    settings: dict[str, Any] = {"scheduler_name": KAI_SCHEDULER, "extra_labels": {KAI_QUEUE_LABEL: queue}}
    if share is None:
        return settings
    if share.memory is not None:
        settings["extra_annotations"] = {"gpu-memory": str(math.ceil(share.memory / MiB))}
        return settings
    units = share.gpus or 0.0
    if units < 1 - 1e-9:
        settings["extra_annotations"] = {"gpu-fraction": f"{math.floor(units * 100) / 100:g}"}
    else:
        settings["extra_resource_limits"] = {"nvidia.com/gpu": str(math.ceil(units - 1e-9))}
    return settings


def pod_settings(
    share: Share | None,
    *,
    mode: str = "gpu",
    gpu_memory: int | None = None,
    mig_profiles: Mapping[str, tuple[float, int]] = A100_40GB_PROFILES,
    queue: str = "default",
) -> dict[str, Any]:
    """The KubeSpawner attributes that give a pod ``share`` (``extra_resource_limits`` and equal
    ``extra_resource_guarantees``, and for KAI its scheduler, annotation and queue label)."""
    if mode == "kai":
        settings = kai_settings(share, queue=queue, gpu_memory=gpu_memory)
    else:
        settings = {"extra_resource_limits": resources(share, mode=mode, gpu_memory=gpu_memory, mig_profiles=mig_profiles)}
    if "extra_resource_limits" in settings:
        settings["extra_resource_guarantees"] = dict(settings["extra_resource_limits"])  # extended resources: equal
    return settings


def _apply(spawner: Any, settings: Mapping[str, Any]) -> None:
    """Set ``settings`` on ``spawner``, merging dicts into what the admin configured."""
    for name, value in settings.items():
        if isinstance(value, dict):
            setattr(spawner, name, {**dict(getattr(spawner, name) or {}), **value})
        else:
            setattr(spawner, name, value)


def _groups(spawner: Any) -> list[str]:
    return [getattr(g, "name", str(g)) for g in (getattr(spawner.user, "groups", None) or [])]


def _queue(policy: Policy, groups: list[str], default: str) -> str:
    """The KAI queue of a user: the first of their groups the policy names, else ``default``."""
    named = [g for g in groups if g in policy.groups]
    return named[0] if named else default


def pre_spawn_hook(
    policy: str | Path | Policy,
    *,
    mode: str = "gpu",
    gpu_memory: str | int | None = None,
    mig_profiles: Mapping[str, tuple[float, int]] = A100_40GB_PROFILES,
    queue: str = "default",
) -> Callable[[Any], None]:
    """A ``KubeSpawner.pre_spawn_hook`` that gives each user's pod the GPU resources of their quota.

    ``policy`` is a file (re-read at every spawn, so edits apply to the next server start) or a
    :class:`Policy`. The hook sets ``extra_resource_limits`` and ``extra_resource_guarantees``
    (extended resources need both equal; for ``kai`` the scheduler, annotation and queue label)
    and leaves other spawner settings alone. A server started from one of :func:`profile_list`'s
    profiles keeps the share its user picked.
    """
    if mode not in MODES:
        raise InvalidConfig(f"mode {shorten(mode)} is not allowed; use one of: {', '.join(MODES)}.")
    memory = parse_bytes(gpu_memory, what="gpu_memory") if gpu_memory is not None else None

    def hook(spawner: Any) -> None:
        if str((getattr(spawner, "user_options", None) or {}).get("profile", "")).startswith(PROFILE_PREFIX):
            return  # the user picked a share from profile_list, within their budget
        current = policy if isinstance(policy, Policy) else load_policy(policy)
        groups = _groups(spawner)
        share = pod_share(current, spawner.user.name, groups)
        _apply(spawner, pod_settings(share, mode=mode, gpu_memory=memory, mig_profiles=mig_profiles, queue=_queue(current, groups, queue)))

    return hook


PROFILE_PREFIX = "vgpu-"


def profile_list(
    policy: str | Path | Policy,
    *,
    mode: str = "hami",
    gpu_memory: str | int | None = None,
    shares: tuple[str, ...] = PROFILE_SHARES,
    mig_profiles: Mapping[str, tuple[float, int]] = A100_40GB_PROFILES,
    queue: str = "default",
) -> Callable[[Any], list[dict[str, Any]]]:
    """A ``KubeSpawner.profile_list`` callable: each user sees the shares of ``shares`` their
    budget holds ("1/4 GPU", "1/2 GPU", "1 GPU"), the largest first and default, and a CPU-only
    server; the profile's ``kubespawner_override`` gives the pod that share::

        c.KubeSpawner.profile_list = profile_list("/etc/jupyterhub/vgpu-policy.json", mode="kai")
    """
    if mode not in MODES:
        raise InvalidConfig(f"mode {shorten(mode)} is not allowed; use one of: {', '.join(MODES)}.")
    memory = parse_bytes(gpu_memory, what="gpu_memory") if gpu_memory is not None else None
    offered = [Share.parse(text, what="profile share") for text in shares]

    def profiles(spawner: Any) -> list[dict[str, Any]]:
        current = policy if isinstance(policy, Policy) else load_policy(policy)
        groups = _groups(spawner)
        budget = pod_share(current, spawner.user.name, groups)
        group_queue = _queue(current, groups, queue)
        fitting = [s for s in offered if budget is not None and _within(s, budget, memory)]
        fitting.sort(key=lambda s: _size(s, memory), reverse=True)
        out: list[dict[str, Any]] = []
        for share in fitting:
            settings = pod_settings(share, mode=mode, gpu_memory=memory, mig_profiles=mig_profiles, queue=group_queue)
            out.append(
                {
                    "display_name": f"{share.describe()}",
                    "slug": PROFILE_PREFIX + re.sub(r"[^a-z0-9]+", "-", share.describe().lower()).strip("-"),
                    "description": f"A server with {share.describe()}, shared among its kernels by jupyter-vgpu.",
                    "kubespawner_override": settings,
                }
            )
        if out:
            out[0]["default"] = True
        out.append(
            {
                "display_name": "No GPU",
                "slug": PROFILE_PREFIX + "none",
                "description": "A CPU-only server.",
                "kubespawner_override": pod_settings(None, mode=mode, queue=group_queue),
            }
        )
        return out

    return profiles


def _size(share: Share, gpu_memory: int | None) -> float:
    """A share in GPUs (memory shares as a part of ``gpu_memory`` when it is known)."""
    if share.memory is not None:
        return share.memory / gpu_memory if gpu_memory else math.inf
    return share.gpus or 0.0


def _within(share: Share, budget: Share, gpu_memory: int | None) -> bool:
    if share.memory is not None and budget.memory is not None:
        return share.memory <= budget.memory
    return _size(share, gpu_memory) <= _size(budget, gpu_memory) + 1e-9
