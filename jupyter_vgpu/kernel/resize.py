"""``%vgpu resize``: change the slice while no framework has fixed its limits.

The ledger checks that the new size fits on the slice's GPUs. The kernel then rewrites its
own environment from the same mapping the provisioner used, so frameworks imported later get
the new limit, and a kernel restart keeps it (the provisioner rebuilds the environment from
the ledger).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from ..errors import InvalidRequest, VGPUError
from ..frameworks import FRAMEWORKS, revisit
from ..gpus.lenses import SchedulerLens
from ..ledger import open_ledger
from ..slices import SliceRequest, parse_share, slice_environment
from ..slices.environment import VARIABLES, fit_installed_frameworks
from ..units import describe_fraction, format_bytes, shorten
from .state import KernelState, SliceFacts


class ResizeRefused(VGPUError):
    """The slice cannot change in this process any more (a framework fixed its limits)."""


def resize(state: KernelState, text: str) -> str:
    """Resize the kernel's slice to ``text`` (``0.5``, ``1/2``, ``50%``, ``6GiB``); returns what changed."""
    facts = state.facts
    if not facts.sliced or not facts.slice_id:
        raise ResizeRefused(
            "This kernel has no GPU slice to resize; start a kernel with a slice (e.g. \"Python 3 (1/4 GPU)\")."
        )
    if not text.strip():
        raise ResizeRefused("Say the new size: `%vgpu resize 0.5`, `%vgpu resize 1/2` or `%vgpu resize 6GiB`.")
    try:
        share = parse_share(text)
    except InvalidRequest as error:
        raise InvalidRequest(f"%vgpu resize {shorten(text.strip())}: {error} For example `%vgpu resize 1/2` or `%vgpu resize 6GiB`.") from None
    holding = []
    for framework in FRAMEWORKS:
        module = sys.modules.get(framework.module)
        if module is None:
            continue
        reason = framework.holds_gpu(module)
        if reason:
            holding.append(reason)
    if holding:
        raise ResizeRefused(
            f"{' '.join(holding)} A new size needs a fresh kernel process: restart the kernel "
            f"(Kernel > Restart Kernel; it keeps its slice), then run `%vgpu resize {text.strip()}` "
            "as the first cell, before importing any framework."
        )
    old_reserved = facts.memory_reserved
    old_share = facts.fraction
    request = SliceRequest(
        fraction=share.fraction,
        memory=share.memory,
        gpus=max(1, len(facts.gpus)),
        logical_devices=facts.logical_devices,
    )
    ledger = open_ledger()
    try:
        resized = ledger.resize(facts.slice_id, request)
        by_index = all(part.strip().isdigit() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "x").split(","))
        env = slice_environment(
            resized, ledger_path=str(ledger.path), simulate=facts.simulate, device_names="index" if by_index else "uuid",
            cuda_portion=SchedulerLens.here(os.environ).cuda_portion(),
        )  # fmt: skip
        for name in VARIABLES:
            os.environ.pop(name, None)  # the new environment names each variable afresh
        fit_installed_frameworks(env)
    finally:
        ledger.close()
    os.environ.update(env)
    state.facts = replace(SliceFacts.from_env(), simulate=facts.simulate)
    state.record_all(revisit(state, "reapply"))
    before = _describe(old_share, old_reserved)
    after = _describe(state.facts.fraction, state.facts.memory_reserved)
    return (
        f"Slice {facts.slice_id} resized from {before} to {after}; frameworks imported from now on "
        f"get {format_bytes(state.facts.memory_limit)} per GPU."
    )


def _describe(fraction: float | None, reserved: int | None) -> str:
    share = "?" if fraction is None else ("1 GPU" if fraction >= 1 else f"{describe_fraction(fraction)} GPU")
    return f"{share} ({format_bytes(reserved)} per GPU)"
