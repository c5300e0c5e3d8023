"""Holding a request or a granted slice against a user's :class:`~.policy.Quota`.

Each refusal is a :class:`NotPermitted` that names the user, the limit, where the limit comes
from and what was asked: ``alice: at most 1/4 GPU per kernel (group students); asked for 1/2 GPU.``

Quotas count requests (what the ledger books), never limits: an elastic slice of 1/4 GPU, up to 1/2
counts 1/4 against ``max_per_kernel`` and ``max_total``. Its limit is held against ``max_limit``
alone, and a limit over it is refused, not lowered to it: bad input books nothing (issue 42).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import NotPermitted
from ..gpus import Snapshot
from ..slices import Slice, SliceRequest
from .policy import Quota, Share


def amount(slices: Iterable[Slice]) -> tuple[float, int]:
    """GPU-fractions and bytes held by ``slices`` (summed over each slice's GPUs)."""
    gpus = 0.0
    memory = 0
    for s in slices:
        gpus += sum(m / t for m, t in zip(s.memory, s.memory_total) if t)
        memory += sum(s.memory)
    return gpus, memory


def allowed_gpus(quota: Quota, snapshot: Snapshot, request: SliceRequest | None = None) -> frozenset[str] | None:
    """UUIDs of the GPUs this user may use (None: all); refuses a request pinned elsewhere."""
    allowed, source = quota.get("gpus")
    if allowed is None or quota.unlimited:
        return None
    chosen = [gpu for gpu in (snapshot.find(ident) for ident in allowed) if gpu is not None]
    names = ", ".join(str(g.index) for g in sorted(chosen, key=lambda g: g.index)) or "none"
    if not chosen:
        raise NotPermitted(f"{quota.user}: no GPU of this node is allowed ({source} allows {', '.join(allowed)}).")
    if request is not None and request.gpu is not None:
        pinned = snapshot.find(request.gpu)
        if pinned is not None and pinned.uuid not in {g.uuid for g in chosen}:
            raise NotPermitted(f"{quota.user}: may use GPU {names} only ({source}); asked for GPU {request.gpu}.")
    return frozenset(g.uuid for g in chosen)


def check_request(
    quota: Quota, request: SliceRequest, held: list[Slice], waiting: Iterable[SliceRequest] = (), *, queueing: bool = False
) -> None:
    """Before placement: the limits that can be judged from the request alone. The user's other
    requests waiting in line count as if they were held: nobody queues past a limit. With
    ``queueing`` the request asks for a place in line, which ``max_waiting`` bounds."""
    if quota.unlimited:
        return
    check_limit(quota, request)
    waiting = list(waiting)
    places, source = quota.get("max_waiting")
    if queueing and places is not None and len(waiting) >= places:
        raise NotPermitted(
            f"{quota.user}: at most {places} place{'s' if places != 1 else ''} in line at once ({source}); "
            f"already waits for {len(waiting)}; asked for {request.describe()}."
        )
    count, source = quota.get("max_slices")
    if count is not None and len(held) + len(waiting) >= count:
        if count == 0:
            raise NotPermitted(f"{quota.user}: may not reserve GPU slices ({source}: max_slices 0).")
        waits = f" and waits in line for {len(waiting)} more" if waiting else ""
        raise NotPermitted(
            f"{quota.user}: at most {count} slice{'s' if count != 1 else ''} at once ({source}); "
            f"already holds {len(held)}{waits}; asked for {request.describe()}."
        )
    gpus, memory = _requested(request)
    per_kernel: Share | None
    per_kernel, source = quota.get("max_per_kernel")
    if per_kernel is not None and _judgeable(per_kernel, gpus, memory) and per_kernel.exceeded_by(gpus or 0.0, memory or 0):
        raise NotPermitted(_per_kernel_message(quota.user, per_kernel, source, request.describe()))
    total: Share | None
    total, source = quota.get("max_total")
    if total is not None and _judgeable(total, gpus, memory):
        held_gpus, held_memory = amount(held)
        for other in waiting:
            other_gpus, other_memory = _requested(other)
            held_gpus += other_gpus or 0.0
            held_memory += other_memory or 0
        if total.exceeded_by(held_gpus + (gpus or 0.0), held_memory + (memory or 0)):
            raise NotPermitted(_total_message(quota.user, total, source, held_gpus, held_memory, request.describe()))


def check_limit(quota: Quota, request: SliceRequest) -> None:
    """Before placement: an elastic request's limit against ``max_limit``, where the two are of one
    kind (a fraction with a share of GPUs, a size with memory); :func:`check_slice` judges the rest."""
    cap: Share | None
    cap, source = quota.get("max_limit")
    if quota.unlimited or cap is None or not request.elastic:
        return
    if cap.no_burst:
        raise NotPermitted(_no_burst_message(quota.user, source, request.describe()))
    gpus, memory = _limit_requested(request)
    if _judgeable(cap, gpus, memory) and cap.exceeded_by(gpus or 0.0, memory or 0):
        raise NotPermitted(_limit_message(quota.user, cap, source, request.describe()))


def check_slice(quota: Quota, granted: Slice, others: list[Slice]) -> None:
    """After placement, exactly: the granted slice (or a resized one) against the limits."""
    if quota.unlimited:
        return
    cap: Share | None
    cap, source = quota.get("max_limit")
    if cap is not None and granted.request.elastic:
        if cap.no_burst:
            raise NotPermitted(_no_burst_message(quota.user, source, granted.request.describe()))
        limit_gpus, limit_memory = limit_amount(granted)
        if cap.exceeded_by(limit_gpus, limit_memory):
            asked = granted.request.describe()
            if (cap.memory is None) != (granted.request.limit_memory is None) or granted.request.gpus > 1:
                asked += f" (a limit of {cap.spent(limit_gpus, limit_memory)})"  # in the cap's unit, summed
            raise NotPermitted(_limit_message(quota.user, cap, source, asked))
    gpus, memory = amount([granted])
    per_kernel: Share | None
    per_kernel, source = quota.get("max_per_kernel")
    if per_kernel is not None and per_kernel.exceeded_by(gpus, memory):
        raise NotPermitted(_per_kernel_message(quota.user, per_kernel, source, _asked(granted, per_kernel)))
    total: Share | None
    total, source = quota.get("max_total")
    if total is not None:
        held_gpus, held_memory = amount(others)
        if total.exceeded_by(held_gpus + gpus, held_memory + memory):
            raise NotPermitted(_total_message(quota.user, total, source, held_gpus, held_memory, _asked(granted, total)))


def limit_amount(granted: Slice) -> tuple[float, int]:
    """GPU-fractions and bytes an elastic slice may burst to (summed over its GPUs)."""
    limits = [(granted.request.limit_on(total) or 0, total) for total in granted.memory_total]
    return sum(limit / total for limit, total in limits if total), sum(limit for limit, _ in limits)


def _limit_requested(request: SliceRequest) -> tuple[float | None, int | None]:
    if request.limit_fraction is not None:
        return min(1.0, request.limit_fraction) * request.gpus, None
    assert request.limit_memory is not None
    return None, request.limit_memory * request.gpus


def _requested(request: SliceRequest) -> tuple[float | None, int | None]:
    if request.fraction is not None:
        return request.fraction * request.gpus, None
    assert request.memory is not None
    return None, request.memory * request.gpus


def _judgeable(share: Share, gpus: float | None, memory: int | None) -> bool:
    return (share.memory is not None and memory is not None) or (share.gpus is not None and gpus is not None)


def _asked(granted: Slice, share: Share) -> str:
    gpus, memory = amount([granted])
    text = granted.request.describe()
    in_unit = share.spent(gpus, memory)
    return text if in_unit == text else f"{text} ({in_unit})"


def _per_kernel_message(user: str, limit: Share, source: str, asked: str) -> str:
    return f"{user}: at most {limit.describe()} per kernel ({source}); asked for {asked}."


def _limit_message(user: str, cap: Share, source: str, asked: str) -> str:
    return f"{user}: may burst to at most {cap.describe()} per kernel ({source}); asked for {asked}."


def _no_burst_message(user: str, source: str, asked: str) -> str:
    return f"{user}: may not burst beyond a request ({source}: max_limit 0); asked for {asked}; ask without a limit."


def _total_message(user: str, limit: Share, source: str, gpus: float, memory: int, asked: str) -> str:
    return (
        f"{user}: at most {limit.describe()} in total ({source}); already holds {limit.spent(gpus, memory)} "
        f"and asked for {asked}."
    )
