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

from ..errors import InvalidRequest, SliceUnavailable, VGPUError
from ..frameworks import FRAMEWORKS, revisit
from ..gpus.lenses import SchedulerLens
from ..ledger import Ledger, open_ledger
from ..ledger.contract import BURST_WAIT_SECONDS, burst_held, run_blocking
from ..slices import Holder, Slice, SliceRequest, Ticket, parse_share, slice_environment
from ..slices.environment import VARIABLES, fit_installed_frameworks
from ..slices.request import limit_above
from ..units import describe_fraction, exact_bytes, format_bytes, shorten
from .state import KernelState, SliceFacts


class ResizeRefused(VGPUError):
    """The slice cannot change in this process any more (a framework fixed its limits)."""


#: How ``%vgpu resize`` names the burst limit it takes, and the word that removes it.
LIMIT_OPTION = "--limit"
NO_LIMIT = "none"


def split_resize(text: str) -> tuple[str | None, str | None]:
    """``"1/4 --limit 1/2"`` -> ``("1/4", "1/2")``; ``"--limit=8GiB"`` -> ``(None, "8GiB")``;
    ``"0.5"`` -> ``("0.5", None)``. One sentence for anything else."""
    words = text.split()
    limit = None
    rest = []
    while words:
        word = words.pop(0)
        if word == LIMIT_OPTION or word.startswith(f"{LIMIT_OPTION}="):
            value = word.partition("=")[2] or (words.pop(0) if words else "")
            if not value or limit is not None:
                raise InvalidRequest(
                    f"%vgpu resize {shorten(text.strip())}: give {LIMIT_OPTION} once, with a limit (1/2, 8GiB) or {NO_LIMIT}."
                )
            limit = value
        else:
            rest.append(word)
    if len(rest) > 1:
        raise InvalidRequest(
            f"%vgpu resize {shorten(text.strip())}: give one size, then {LIMIT_OPTION} LIMIT if it bursts, e.g. `%vgpu resize 1/4 {LIMIT_OPTION} 1/2`."
        )
    return (rest[0] if rest else None), limit


def new_request(text: str, current: SliceRequest) -> SliceRequest:
    """The request ``%vgpu resize text`` asks for, from the slice's ``current`` one: a size alone
    keeps the current limit (refused in one sentence if that no longer goes with it), ``--limit``
    alone keeps the current size, ``--limit none`` makes the slice fixed."""
    size, limit = split_resize(text)
    typed = size
    if size is None and limit is None:
        raise ResizeRefused("Say the new size: `%vgpu resize 0.5`, `%vgpu resize 1/2` or `%vgpu resize 6GiB`.")
    if size is None:
        size = exact_bytes(current.memory) if current.memory is not None else repr(current.fraction)
    try:
        share = parse_share(size, None if limit in (None, NO_LIMIT) else limit, names={"gpu_fraction_limit": LIMIT_OPTION, "gpu_memory_limit": LIMIT_OPTION})
    except InvalidRequest as error:
        raise InvalidRequest(f"%vgpu resize {shorten(text.strip())}: {error} For example {_examples(size, typed)}.") from None
    if limit is None and current.elastic:
        try:  # the limit it had, with the new size
            share = replace(share, limit_fraction=current.limit_fraction, limit_memory=current.limit_memory)
        except InvalidRequest:
            raise InvalidRequest(
                f"%vgpu resize {shorten(text.strip())}: the slice's limit ({current.describe_limit()}) does not go with "
                f"{share.describe()}; add {LIMIT_OPTION} LIMIT, or {LIMIT_OPTION} {NO_LIMIT} for a fixed slice."
            ) from None
    return share


def _examples(size: str, typed: str | None) -> str:
    """What a refused ``%vgpu resize`` could have been: with a limit of the size's kind, above it
    (the size as ``typed``, or the slice's own when none was); without a size that reads, both kinds."""
    try:
        share = parse_share(size)
    except InvalidRequest:
        return "`%vgpu resize 1/2` or `%vgpu resize 6GiB --limit 12GiB`"
    above = limit_above(share.fraction, share.memory)
    resized = f"`%vgpu resize {typed}`" if typed else ""
    if above is None:
        return resized or "`%vgpu resize 1/2`"
    with_limit = f"`%vgpu resize {f'{typed} ' if typed else ''}{LIMIT_OPTION} {above}`"
    return f"{resized} or {with_limit}" if resized else with_limit


def resize(state: KernelState, text: str) -> str:
    """Resize the kernel's slice to ``text`` (``0.5``, ``1/2``, ``50%``, ``6GiB``, and ``--limit
    LIMIT`` or ``--limit none`` for an elastic slice's limit); returns what changed."""
    facts = state.facts
    if not facts.sliced or not facts.slice_id:
        raise ResizeRefused(
            "This kernel has no GPU slice to resize; start a kernel with a slice (e.g. \"Python 3 (1/4 GPU)\")."
        )
    if not text.strip():
        raise ResizeRefused("Say the new size: `%vgpu resize 0.5`, `%vgpu resize 1/2` or `%vgpu resize 6GiB`.")
    if split_resize(text)[0] is not None:
        new_request(text, SliceRequest())  # a size and a limit that are not allowed are said before anything else
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
    old_limit = os.environ.get("JUPYTER_VGPU_BURST_SHARE") if facts.burst_limit is not None else None
    ledger = open_ledger()
    try:
        share = new_request(text, ledger.get(facts.slice_id).request)
        request = replace(share, gpus=max(1, len(facts.gpus)), logical_devices=facts.logical_devices)
        resized = resize_waiting(ledger, facts.slice_id, request)
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
    before = _describe(old_share, old_reserved, old_limit)
    burst = state.facts.burst_limit
    after = _describe(state.facts.fraction, state.facts.memory_reserved, os.environ.get("JUPYTER_VGPU_BURST_SHARE") if burst else None)
    gets = f"get {format_bytes(state.facts.memory_limit)} per GPU" if burst is None else f"grow up to {format_bytes(burst)} per GPU"
    return f"Slice {facts.slice_id} resized from {before} to {after}; frameworks imported from now on {gets}."


def resize_waiting(ledger: Ledger, slice_id: str, request: SliceRequest) -> Slice:
    """The ledger's resize; one that only kernels' bursts keep out waits for them (issue 42: never
    refused because of a burst), in the ledger's one waiting loop (:meth:`.Ledger.wait_in_line`):
    a place in line for the memory it lacks on that GPU, judged as the user's request, where the
    bursting kernels' servers see it and ask the bursts back; the resize is tried again at each
    turn, up to ``BURST_WAIT_SECONDS``. Interrupting the kernel gives up and leaves the line."""
    try:
        return ledger.resize(slice_id, request)
    except SliceUnavailable as error:
        if not burst_held(error):
            raise
        detail = error.detail or {}
    print(
        f"jupyter-vgpu: kernels bursting above their requests hold the room for {request.describe()}; waiting up to "
        f"{BURST_WAIT_SECONDS:g} s for them to give it back (interrupt the kernel to stop).",
        file=sys.stderr,
        flush=True,
    )
    path = os.environ.get("JPY_SESSION_NAME")  # the notebook (absolute), as the line names a waiting kernel
    if path and os.path.isabs(path) and not os.path.relpath(path).startswith(".."):
        path = os.path.relpath(path)  # the kernel runs in the notebook's folder
    place = SliceRequest(memory=int(detail["more"]), gpu=str(detail["gpu"]))
    holder = Holder.kernel(f"resize of slice {slice_id}", labels={"path": path} if path else None)

    def attempt(ticket: Ticket, final: bool) -> Slice | None:
        try:
            return ledger.resize(slice_id, request)
        except SliceUnavailable as error:
            if final or not burst_held(error):
                raise
            return None

    wanted = f"{request.describe()} (resize of slice {slice_id})"
    return run_blocking(lambda: ledger.wait_in_line(place, holder, attempt, wait=BURST_WAIT_SECONDS, wanted=wanted))


def _describe(fraction: float | None, reserved: int | None, limit: str | None = None) -> str:
    share = "?" if fraction is None else ("1 GPU" if fraction >= 1 else f"{describe_fraction(fraction)} GPU")
    return f"{share} ({format_bytes(reserved)} per GPU{f', up to {limit}' if limit else ''})"
