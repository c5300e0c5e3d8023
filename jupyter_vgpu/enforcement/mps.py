"""MPS: where an MPS control daemon serves a GPU, its server holds a client to
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``.

The limit is the *whole slice* on each GPU (context allowance included), not the framework limit:
the frameworks stop at their own limit first (and explain an out-of-memory error in the slice's
terms), so MPS only catches code that lifts that limit, and the process can never hold more than
the ledger reserved, whether or not the driver counts the CUDA context under the MPS limit. The
limit names devices by the ordinal the process sees (0, 1... in ``CUDA_VISIBLE_DEVICES`` order),
the form NVIDIA documents.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..units import format_bytes
from .base import Enforcement, PlacedGPU, Tier, thread_percentage


class MPS(Enforcement):
    tier = Tier.MPS
    hard = True
    variables = ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")

    def applies(self, gpus: list[PlacedGPU], mig_devices: int) -> bool:
        return bool(gpus) and all(g.mps for g in gpus)  # on every GPU of the slice, or none

    def environment(self, memory: tuple[int, ...], fraction: float, *, slice_id: str = "", folder: str = "", setup: Mapping[str, str] | None = None) -> dict[str, str]:
        return {
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(f"{ordinal}={max(1, amount // 2**20)}M" for ordinal, amount in enumerate(memory)),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(thread_percentage(fraction)),
        }

    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        return "hard (MPS)"

    def inside(self, devices: tuple[str, ...], memory_reserved: int | None, env: Mapping[str, str]) -> str | None:
        limit = env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
        threads = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "")
        return (
            f"the MPS server refuses allocations past {format_bytes(memory_reserved)} per GPU "
            f"(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={limit}) and runs it on {threads}% of the SMs"
        )

    def share_note(self, fraction: float | None = None, percentage: int | None = None) -> str:
        return f"memory, and {sm_share(fraction, percentage)} (MPS)"


def sm_share(fraction: float | None, percentage: int | None) -> str:
    """The SMs an MPS client gets, in words: ``25% of the SMs`` (from the percentage set, or the
    slice's fraction), else ``a share of the SMs``."""
    if percentage is None and fraction:
        percentage = thread_percentage(fraction)
    return f"{percentage}% of the SMs" if percentage else "a share of the SMs"
