"""Cooperative: the frameworks' own limits, set at import (jupyter_vgpu/frameworks/); user code can
undo them, and the server's watchdog watches what NVML sees instead."""

from __future__ import annotations

from .base import Enforcement, PlacedGPU, Tier


class Cooperative(Enforcement):
    tier = Tier.COOPERATIVE
    bursts = True  # the frameworks get the limit

    def applies(self, gpus: list[PlacedGPU], mig_devices: int) -> bool:
        return True  # every GPU offers it: the weakest tier, asked last

    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        return "cooperative"

    def share_note(self, fraction: float | None = None, percentage: int | None = None) -> str:
        return "memory only; compute is shared with the GPU's other users"
