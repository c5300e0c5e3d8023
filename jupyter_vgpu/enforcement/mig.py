"""MIG: a slice is a whole MIG device an admin created; ``CUDA_VISIBLE_DEVICES`` names it and the
GPU itself keeps the process inside its memory and compute."""

from __future__ import annotations

from collections.abc import Mapping

from .base import Enforcement, HeldSlice, PlacedGPU, Tier


class MIG(Enforcement):
    tier = Tier.MIG
    hard = True

    def applies(self, gpus: list[PlacedGPU], mig_devices: int) -> bool:
        return bool(gpus) and mig_devices == len(gpus)  # each GPU of the slice gave a MIG device

    def cuda_total(self, reserved: int, total: int) -> int:
        return reserved  # the MIG device itself

    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        return f"hard (MIG {', '.join(mig_profiles) or 'device'})"

    def share_note(self, fraction: float | None = None, percentage: int | None = None) -> str:
        return "a MIG device: its own memory and compute"

    def inside(self, devices: tuple[str, ...], memory_reserved: int | None, env: Mapping[str, str]) -> str | None:
        return f"this kernel sees only its MIG device {', '.join(devices)}; the GPU itself keeps it inside"

    def offered(self) -> str:
        return "hard (MIG)"

    def resize_refused(self, slice_: HeldSlice) -> str | None:
        profiles = ", ".join(getattr(slice_, "mig_profiles", ()))
        return (
            f"Slice {slice_.id} is a whole MIG device ({profiles}), which cannot change size; start a kernel "
            "with a different share to get another MIG device."
        )
