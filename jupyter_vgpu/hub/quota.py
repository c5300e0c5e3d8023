"""Holding a request or a granted slice against a user's :class:`~.policy.Quota`.

Each refusal is a :class:`NotPermitted` that names the user, the limit, where the limit comes
from and what was asked: ``alice: at most 1/4 GPU per kernel (group students); asked for 1/2 GPU.``

Quotas count requests (what the ledger books), never limits: an elastic slice of 1/4 GPU, up to 1/2
counts 1/4 against ``max_per_kernel`` and ``max_total``. Its limit is held against ``max_limit``
alone, and a limit over it is refused, not lowered to it: bad input books nothing (issue 42).

A request in one unit is judged against a cap in the other before it is placed or waits in line,
on the GPUs it may be placed on (``capacities``: each one's memory): a size against a share on the
largest of them, a share against a size on the smallest, so what could be granted somewhere is
never refused, and what could be granted nowhere never takes a place in line (hardening round
five, H1: a place in line asks other users' bursts and idle kernels back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ..errors import NotPermitted
from ..gpus import Snapshot
from ..slices import Slice, SliceRequest
from .policy import Quota, Share

#: The memory (bytes) of each GPU a request may be placed on; empty where none is known.
Capacities = Callable[[SliceRequest], Sequence[int]]


def _unknown(request: SliceRequest) -> Sequence[int]:
    return ()


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
            raise NotPermitted(f"{quota.user}: may use GPU {names} only ({source}); asked for GPU {pinned.index}.")
    return frozenset(g.uuid for g in chosen)


def capacities_on(quota: Quota, snapshot: Snapshot) -> Capacities:
    """The memory of each GPU of ``snapshot`` a request may be placed on (its pinned GPU, within
    those the policy allows): where a size is judged against a share, and a share against a size."""

    def capacities(request: SliceRequest) -> list[int]:
        try:
            allowed = allowed_gpus(quota, snapshot, request)
        except NotPermitted:
            return []  # pinned where it may not go: refused as that, not on size
        pinned = None if request.gpu is None else snapshot.find(request.gpu)
        if request.gpu is not None and pinned is None:
            return []
        return [
            g.memory_usable
            for g in snapshot.gpus
            if (allowed is None or g.uuid in allowed) and (pinned is None or g.uuid == pinned.uuid)
        ]

    return capacities


def check_request(
    quota: Quota,
    request: SliceRequest,
    held: list[Slice],
    waiting: Iterable[SliceRequest] = (),
    *,
    queueing: bool = False,
    capacities: Capacities = _unknown,
) -> None:
    """Before placement: the limits that can be judged from the request alone (with the
    ``capacities`` of the GPUs it may be placed on, in either unit). The user's other requests
    waiting in line count as if they were held: nobody queues past a limit. With ``queueing`` the
    request asks for a place in line, which ``max_waiting`` bounds."""
    if quota.unlimited:
        return
    check_limit(quota, request, capacities)
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
    check_size(quota, request, held, waiting, capacities)


def check_size(
    quota: Quota,
    request: SliceRequest,
    others: list[Slice],
    waiting: Iterable[SliceRequest] = (),
    capacities: Capacities = _unknown,
) -> None:
    """``max_per_kernel`` and ``max_total`` for ``request`` beside the slices ``others`` and the
    requests ``waiting`` (each at the least it could come to): before a request is placed, waits,
    or a slice is resized to it (its ``others`` then leave the slice out)."""
    per_kernel: Share | None
    per_kernel, source = quota.get("max_per_kernel")
    asked = None if per_kernel is None else least(per_kernel, request, capacities(request))
    if per_kernel is not None and asked is not None and per_kernel.exceeded_by(*asked):
        raise NotPermitted(_per_kernel_message(quota.user, per_kernel, source, _asked_as(request, per_kernel, asked)))
    total: Share | None
    total, source = quota.get("max_total")
    if total is not None and (asked := least(total, request, capacities(request))) is not None:
        held_gpus, held_memory = amount(others)
        waits_gpus, waits_memory = 0.0, 0
        for other in waiting:
            other_gpus, other_memory = least(total, other, capacities(other)) or (0.0, 0)
            waits_gpus += other_gpus
            waits_memory += other_memory
        if total.exceeded_by(held_gpus + waits_gpus + asked[0], held_memory + waits_memory + asked[1]):
            holds = total.spent(held_gpus, held_memory)
            if waits_gpus or waits_memory:
                holds += f" and waits in line for {total.spent(waits_gpus, waits_memory)}"
            raise NotPermitted(_total_message(quota.user, total, source, holds, _asked_as(request, total, asked)))


def least(
    cap: Share, request: SliceRequest, capacities: Sequence[int], *, limit: bool = False
) -> tuple[float, int] | None:
    """The least ``request`` (its ``limit``) comes to in ``cap``'s unit, as ``(GPU-fractions,
    bytes)`` summed over its GPUs: exact in its own unit; in the other, on those of the GPUs of
    ``capacities`` that make it least (a size on the largest, a share on the smallest). None where
    that cannot be told (fewer known GPUs than it needs)."""
    if limit:
        fraction = None if request.limit_fraction is None else min(1.0, request.limit_fraction)
        memory = request.limit_memory
    else:
        fraction, memory = request.fraction, request.memory
    count = request.gpus
    if cap.memory is not None:
        if memory is not None:
            return 0.0, memory * count
        assert fraction is not None
        in_bytes = sorted(int(fraction * c) for c in capacities if c > 0)
        return None if len(in_bytes) < count else (0.0, sum(in_bytes[:count]))
    if fraction is not None:
        return fraction * count, 0
    assert memory is not None
    shares = sorted(memory / c for c in capacities if c > 0)
    return None if len(shares) < count else (sum(shares[:count]), 0)


def check_limit(quota: Quota, request: SliceRequest, capacities: Capacities = _unknown) -> None:
    """Before placement: an elastic request's limit against ``max_limit`` (in the other unit on
    the GPUs of ``capacities``, as :func:`least` says); :func:`check_slice` judges it exactly."""
    cap: Share | None
    cap, source = quota.get("max_limit")
    if quota.unlimited or cap is None or not request.elastic:
        return
    if cap.no_burst:
        raise NotPermitted(_no_burst_message(quota.user, source, request.describe()))
    asked = least(cap, request, capacities(request), limit=True)
    if asked is not None and cap.exceeded_by(*asked):
        in_unit = cap.spent(*asked)
        text = request.describe()
        if (cap.memory is None) != (request.limit_memory is None) or request.gpus > 1:
            text += f" (a limit of {in_unit})"  # in the cap's unit, summed, as check_slice says it
        raise NotPermitted(_limit_message(quota.user, cap, source, text))


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
            raise NotPermitted(
                _total_message(quota.user, total, source, total.spent(held_gpus, held_memory), _asked(granted, total))
            )


def limit_amount(granted: Slice) -> tuple[float, int]:
    """GPU-fractions and bytes an elastic slice may burst to (summed over its GPUs)."""
    limits = [(granted.request.limit_on(total) or 0, total) for total in granted.memory_total]
    return sum(limit / total for limit, total in limits if total), sum(limit for limit, _ in limits)


def _asked(granted: Slice, share: Share) -> str:
    gpus, memory = amount([granted])
    text = granted.request.describe()
    in_unit = share.spent(gpus, memory)
    return text if in_unit == text else f"{text} ({in_unit})"


def _asked_as(request: SliceRequest, share: Share, asked: tuple[float, int]) -> str:
    """``9.0 GiB (9/16 GPU)``: what was asked, and in the cap's unit where that is another."""
    text = request.describe()
    in_unit = share.spent(*asked)
    return text if (share.memory is None) == (request.memory is None) else f"{text} ({in_unit})"


def _per_kernel_message(user: str, limit: Share, source: str, asked: str) -> str:
    return f"{user}: at most {limit.describe()} per kernel ({source}); asked for {asked}."


def _limit_message(user: str, cap: Share, source: str, asked: str) -> str:
    return f"{user}: may burst to at most {cap.describe()} per kernel ({source}); asked for {asked}."


def _no_burst_message(user: str, source: str, asked: str) -> str:
    return f"{user}: may not burst beyond a request ({source}: max_limit 0); asked for {asked}; ask without a limit."


def _total_message(user: str, limit: Share, source: str, holds: str, asked: str) -> str:
    return f"{user}: at most {limit.describe()} in total ({source}); already holds {holds} and asked for {asked}."
