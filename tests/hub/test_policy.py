"""Reading the policy: where each limit comes from, and what a mistake says."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_vgpu.errors import InvalidConfig
from jupyter_vgpu.hub.policy import Policy, Share, load_policy

pytestmark = pytest.mark.hub

POLICY = {
    "default": {"max_per_kernel": "1/2", "max_slices": 2},
    "groups": {"students": {"max_per_kernel": "1/4"}, "tas": {"max_per_kernel": "1/2", "max_total": "8GiB"}},
    "users": {"alice": {"max_per_kernel": 1}},
}


def test_own_entry_wins_then_the_most_generous_group_then_the_default() -> None:
    policy = Policy.parse(POLICY, source="test")
    assert policy.quota("alice", ["students"]).get("max_per_kernel") == (Share(gpus=1.0), "user alice")
    assert policy.quota("tom", ["students", "tas"]).get("max_per_kernel") == (Share(gpus=0.5), "group tas")
    assert policy.quota("tom", ["students", "tas"]).get("max_slices") == (2, "default")
    assert policy.quota("sue", ["students"]).get("max_total") == (None, "")
    assert policy.quota("root", []).unlimited


def test_a_config_file_supplies_c_vgpupolicy(tmp_path: Path) -> None:
    config = tmp_path / "jupyterhub_config.py"
    config.write_text('c.VGPUPolicy.groups = {"students": {"max_total": "1/2"}}\nc.VGPUPolicy.admin_users = ["carol"]\n')
    policy = load_policy(config)
    assert policy.quota("x", ["students"]).get("max_total") == (Share(gpus=0.5), "group students")
    assert policy.is_admin("carol", []) and not policy.is_admin("x", ["students"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"default": {"max_gpus": 1}}, "default: unknown limit 'max_gpus'"),
        ({"users": {"bob": {"max_slices": -1}}}, "users.bob.max_slices -1 is not allowed"),
        ({"groups": {"g": {"max_total": "1/0"}}}, "groups.g.max_total '1/0' divides by zero"),
        ({"quota": {}}, "unknown key 'quota'"),
        ({"default": {"max_total": "٣"}}, "default.max_total '٣' is not"),
        ({"default": {"max_waiting": -1}}, "default.max_waiting -1 is not allowed"),
    ],
)
def test_mistakes_name_the_entry_and_the_value(data: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        Policy.parse(data, source="policy.json")


def test_the_broker_bounds_waiting_where_the_policy_does_not() -> None:
    """Without max_wait a `--wait 100000` held the node's line as long as it liked, and without
    max_slices one user filled all 256 places (issue 19)."""
    from jupyter_vgpu.errors import NotPermitted
    from jupyter_vgpu.hub.quota import check_request
    from jupyter_vgpu.slices import SliceRequest

    quota = Policy.parse({}, source="policy.json").quota("alice", [])
    assert quota.get("max_wait") == (3600.0, "the broker's default")
    assert quota.get("max_waiting") == (8, "the broker's default")
    mine = Policy.parse({"users": {"alice": {"max_waiting": 1, "max_wait": 0}}}, source="policy.json").quota("alice", [])
    assert mine.get("max_wait") == (0.0, "user alice") and mine.get("max_waiting") == (1, "user alice")
    quarter = SliceRequest.parse(0.25)
    check_request(mine, quarter, [], [quarter])  # reserving now is not a place in line
    with pytest.raises(NotPermitted, match=r"alice: at most 1 place in line at once \(user alice\); already waits for 1"):
        check_request(mine, quarter, [], [quarter], queueing=True)
    assert Policy.parse({}, source="p").quota("root", []).unlimited
