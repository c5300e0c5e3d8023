"""A request in one unit against a cap in the other (hardening round five, H1): judged before it is
placed or waits, on the GPUs it may be placed on, so a request no GPU could grant within the cap
never takes a place in line (which would ask other users' bursts and idle kernels back)."""

from __future__ import annotations

import pytest

from jupyter_vgpu.errors import NotPermitted
from jupyter_vgpu.hub import quota as quotas
from jupyter_vgpu.hub.policy import Policy, Quota
from jupyter_vgpu.slices import SliceRequest, parse_share
from jupyter_vgpu.units import GiB


def quota_of(limits: dict[str, object]) -> Quota:
    return Policy.parse({"users": {"bob": limits}}, source="policy.json").quota("bob", [])


def on(*sizes_gib: float) -> quotas.Capacities:
    return lambda request: [int(s * GiB) for s in sizes_gib]


@pytest.mark.parametrize(
    ("limits", "share", "limit", "message"),
    [
        ({"max_per_kernel": "1/2"}, "9GiB", None, "bob: at most 1/2 GPU per kernel (user bob); asked for 9.0 GiB (9/16 GPU)."),
        ({"max_per_kernel": "6GiB"}, "1/2", None, "bob: at most 6.0 GiB per kernel (user bob); asked for 1/2 GPU (8.0 GiB)."),
        ({"max_total": "1/2"}, "9GiB", None, "bob: at most 1/2 GPU in total (user bob); already holds 0 GPU and asked for 9.0 GiB (9/16 GPU)."),
        (
            {"max_limit": "1/2"}, "2GiB", "8.5GiB",
            "bob: may burst to at most 1/2 GPU per kernel (user bob); asked for 2.0 GiB, up to 8.5 GiB (a limit of 17/32 GPU).",
        ),
        (
            {"max_limit": "6GiB"}, "1/4", "1/2",
            "bob: may burst to at most 6.0 GiB per kernel (user bob); asked for 1/4 GPU, up to 1/2 (a limit of 8.0 GiB).",
        ),
    ],
)  # fmt: skip
def test_a_request_in_one_unit_is_refused_over_a_cap_in_the_other(
    limits: dict[str, object], share: str, limit: str | None, message: str
) -> None:
    request = parse_share(share, limit)
    with pytest.raises(NotPermitted) as refused:
        quotas.check_request(quota_of(limits), request, [], queueing=True, capacities=on(16))
    assert str(refused.value) == message


def test_what_could_be_granted_on_some_gpu_it_may_use_is_not_refused() -> None:
    quota = quota_of({"max_per_kernel": "1/2", "max_total": "1/2"})
    nine = SliceRequest.parse(memory="9GiB")
    # On a 16 GiB and a 24 GiB GPU, 9 GiB is 3/8 of the larger: within 1/2 there.
    quotas.check_request(quota, nine, [], queueing=True, capacities=on(16, 24))
    # Pinned to the 16 GiB one, it is 9/16 wherever it goes: refused before it waits.
    with pytest.raises(NotPermitted, match="asked for 9.0 GiB on GPU 0 \\(9/16 GPU\\)"):
        quotas.check_request(quota, SliceRequest.parse(memory="9GiB", gpu="0"), [], queueing=True, capacities=on(16))
    # A share against a size: 1/2 of the smaller GPU (8 GiB) is within 10 GiB; of the larger only, not.
    sized = quota_of({"max_per_kernel": "10GiB"})
    quotas.check_request(sized, parse_share("1/2"), [], capacities=on(16, 24))
    with pytest.raises(NotPermitted, match="12.0 GiB"):
        quotas.check_request(sized, parse_share("1/2"), [], capacities=on(24))
    # Where no GPU is known, only what is of the cap's own unit is judged (then exactly, once placed).
    quotas.check_request(quota, nine, [], queueing=True)


def test_places_in_line_count_in_the_total_in_the_caps_unit() -> None:
    quota = quota_of({"max_total": "1/2"})
    waiting = [SliceRequest.parse(memory="4GiB")]  # 1/4 of a 16 GiB GPU
    quotas.check_request(quota, SliceRequest.parse(memory="4GiB"), [], waiting, queueing=True, capacities=on(16))
    with pytest.raises(NotPermitted, match="already holds 0 GPU and waits in line for 1/4 GPU and asked for 5.0 GiB \\(5/16 GPU\\)"):
        quotas.check_request(quota, SliceRequest.parse(memory="5GiB"), [], waiting, queueing=True, capacities=on(16))


def test_a_resize_is_judged_as_the_whole_new_size_beside_the_users_other_slices() -> None:
    quota = quota_of({"max_total": "1/2", "max_per_kernel": "1"})
    on_its_gpu = on(16)
    quotas.check_size(quota, parse_share("1/2"), [], capacities=on_its_gpu)  # its own old size is not counted
    with pytest.raises(NotPermitted, match="at most 1/2 GPU in total"):
        quotas.check_size(quota, parse_share("3/4"), [], capacities=on_its_gpu)
    with pytest.raises(NotPermitted, match="asked for 9.0 GiB \\(9/16 GPU\\)"):
        quotas.check_size(quota, SliceRequest.parse(memory="9GiB"), [], capacities=on_its_gpu)
