"""The share of each GPU a Kubernetes scheduler gave this pod (docs/cluster.md).

Inside a pod that HAMi or KAI-Scheduler placed on a shared GPU, the card is not the pod's: the
scheduler promised it a part, and says which through the container's environment:

* HAMi (Project-HAMi/HAMi, pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go):
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` per visible GPU and ``CUDA_DEVICE_MEMORY_LIMIT`` for every GPU,
  written as HAMi-core reads them: whole bytes with one optional ``k``/``m``/``g`` suffix
  (``4096m``); ``CUDA_DEVICE_SM_LIMIT``, a percentage of the SMs.
* KAI-Scheduler (kai-scheduler/KAI-Scheduler, CHANGELOG v0.7.6): ``GPU_PORTION``, the fraction of
  the GPU the pod was given (its ``gpu-fraction`` annotation).

Then the pod's share *is* the GPU for every slice: capacity per GPU is the smaller of the card and
the share, fractions are fractions of it, and memory outside the pod (other pods' processes, which
NVML lists on the same card) is the scheduler's business, not this pod's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import InvalidConfig
from ..units import format_bytes, shorten

_HAMI_SIZE = re.compile(r"^(\d+)([kKmMgG]?)$", re.ASCII)
_UNIT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
MEMORY = "CUDA_DEVICE_MEMORY_LIMIT"
SM = "CUDA_DEVICE_SM_LIMIT"
PORTION = "GPU_PORTION"
HAMI_SIZES = "whole bytes with one optional k, m or g suffix, as HAMi writes them (4096m)"


@dataclass(frozen=True)
class PodShare:
    """What the scheduler gave this pod: per visible GPU index a memory limit, or a portion of
    every GPU; and the SM limit."""

    source: str  # "HAMi" or "KAI-Scheduler"
    memory: Mapping[int, int] = field(default_factory=dict)  # GPU index -> bytes
    memory_all: int | None = None  # bytes on every GPU without its own
    portion: float | None = None  # KAI: fraction of each GPU
    sm_limit: int | None = None  # percent of the SMs

    def limit_for(self, index: int, card: int) -> int | None:
        """The pod's bytes on GPU ``index`` of ``card`` bytes (None: no share there)."""
        if self.portion is not None:
            return math.floor(self.portion * card)
        return self.memory.get(index, self.memory_all)

    def describe(self, index: int, card: int) -> str:
        share = self.limit_for(index, card)
        shown = f"{format_bytes(min(share, card))} of {format_bytes(card)}" if share is not None else "the whole GPU"
        sm = f", {self.sm_limit}% of the SMs" if self.sm_limit is not None and self.sm_limit < 100 else ""
        return f"this pod's share: {shown} ({self.source}){sm}"


def pod_share(env: Mapping[str, str]) -> PodShare | None:
    """The scheduler's share from ``env``; None outside such a pod. A value that cannot be read
    raises InvalidConfig naming the variable and what is allowed (then nothing is reserved)."""
    memory: dict[int, int] = {}
    for name, value in env.items():
        if name.startswith(MEMORY + "_"):
            suffix = name[len(MEMORY) + 1 :]
            if not (suffix.isascii() and suffix.isdigit()) or len(suffix) > 3:
                raise InvalidConfig(f"{name} is not a variable HAMi sets; it sets {MEMORY}_<GPU index> (0, 1, ...).")
            memory[int(suffix)] = _hami_bytes(name, value)
    memory_all = _hami_bytes(MEMORY, env[MEMORY]) if MEMORY in env else None
    sm_limit = _percent(env[SM]) if SM in env else None
    portion = _portion(env[PORTION]) if PORTION in env else None
    if portion is not None:
        return PodShare("KAI-Scheduler", portion=portion, sm_limit=sm_limit)
    if memory or memory_all is not None:
        return PodShare("HAMi", memory=memory, memory_all=memory_all, sm_limit=sm_limit)
    if sm_limit is not None:
        return PodShare("HAMi", sm_limit=sm_limit)
    return None


def _hami_bytes(name: str, value: str) -> int:
    match = _HAMI_SIZE.match(value.strip())
    if not match or int(match.group(1)) == 0:
        raise InvalidConfig(f"{name}={shorten(value)} is not a GPU memory limit; use {HAMI_SIZES}.")
    return int(match.group(1)) * _UNIT[match.group(2).lower()]


def _percent(value: str) -> int:
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 100:
        raise InvalidConfig(f"{SM}={shorten(value)} is not a share of the SMs; use a whole percentage from 1 to 100.")
    return int(text)


def _portion(value: str) -> float:
    try:
        portion = float(value.strip()) if value.strip().isascii() else math.nan
    except ValueError:
        portion = math.nan
    if not (math.isfinite(portion) and 0 < portion <= 1):
        raise InvalidConfig(f"{PORTION}={shorten(value)} is not a portion of a GPU; use a number above 0 and at most 1 (0.5).")
    return portion
