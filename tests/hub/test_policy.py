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
    config.write_text(
        'c.VGPUPolicy.groups = {"students": {"max_total": "1/2"}}\nc.VGPUPolicy.admin_users = ["carol"]\n'
        'c.VGPUPolicy.prometheus_url = "http://prometheus:9090/"\n'
    )
    policy = load_policy(config)
    assert policy.prometheus_url == "http://prometheus:9090"
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
        ({"prometheus_url": "prometheus:9090"}, "prometheus_url 'prometheus:9090' is not the URL of a Prometheus server: give http"),
        ({"prometheus_url": 9090}, "prometheus_url must be the URL of the site's Prometheus, not 9090"),
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


def test_idle_reclaim_comes_from_the_policy_through_the_broker_and_the_stricter_wins(tmp_path: Path) -> None:
    """Per group idle reclaim (issue 23): the broker tells each user's server the user's value
    (the most generous of their groups; 0 = never is the most generous), and the server takes
    the stricter of it and its own c.VGPUServer.idle_reclaim_after."""
    import json

    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.hub.broker import Broker, Caller, PolicySource
    from jupyter_vgpu.ledger.sqlite import SQLiteLedger
    from jupyter_vgpu.slices.terms import idle_reclaim_after

    data = {"default": {"idle_reclaim_after": 3600}, "groups": {"students": {"idle_reclaim_after": 600}, "staff": {"idle_reclaim_after": 0}}}
    policy = Policy.parse(data, source="test")
    assert policy.quota("sue", ["students"]).get("idle_reclaim_after") == (600.0, "group students")
    assert policy.quota("tom", ["students", "staff"]).get("idle_reclaim_after") == (0.0, "group staff")
    assert policy.quota("ann", []).get("idle_reclaim_after") == (3600.0, "default")
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(data))
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"))
    try:
        broker = Broker(ledger, PolicySource(path))
        info = broker.info(Caller(pid=1, uid=1000, gid=1000, user="sue", groups=("students",), admin=False))
    finally:
        ledger.close()
    assert info["idle_reclaim_after"] == 600.0
    assert idle_reclaim_after(0.0, info) == 600.0  # the server set none: the policy applies
    assert idle_reclaim_after(300.0, info) == 300.0  # the server's own is stricter
    assert idle_reclaim_after(900.0, info) == 600.0
    assert idle_reclaim_after(900.0, {"idle_reclaim_after": 0.0}) == 900.0  # a broker of before the limits list
    assert idle_reclaim_after(900.0, None) == 900.0


def test_a_bad_idle_reclaim_in_the_policy_is_named() -> None:
    with pytest.raises(InvalidConfig, match=r"groups\.students\.idle_reclaim_after 'soon' is not allowed"):
        Policy.parse({"groups": {"students": {"idle_reclaim_after": "soon"}}}, source="test")


def test_max_limit_is_a_share_or_0_for_no_bursting() -> None:
    """Issue 42: max_limit caps the limit one kernel may burst to, written like max_per_kernel;
    0 or false turns bursting off, and the most generous group wins as for every limit."""
    from jupyter_vgpu.hub.policy import NO_BURST

    data = {
        "default": {"max_limit": False},
        "groups": {"students": {"max_limit": "1/2"}, "tas": {"max_limit": "8GiB"}, "guests": {"max_limit": 0}},
        "users": {"alice": {"max_limit": "0"}},
    }
    policy = Policy.parse(data, source="test")
    assert policy.quota("sue", ["students"]).get("max_limit") == (Share(gpus=0.5), "group students")
    assert policy.quota("tom", ["tas"]).get("max_limit") == (Share(memory=8 << 30), "group tas")
    assert policy.quota("ann", ["guests", "students"]).get("max_limit") == (Share(gpus=0.5), "group students")
    assert policy.quota("gus", ["guests"]).get("max_limit") == (NO_BURST, "group guests")
    assert policy.quota("bob", []).get("max_limit") == (NO_BURST, "default")
    assert policy.quota("alice", ["students"]).get("max_limit") == (NO_BURST, "user alice")
    assert NO_BURST.no_burst and not Share(gpus=0.5).no_burst and not Share(memory=1).no_burst
    assert Policy.parse({}, source="test").quota("sue", []).get("max_limit") == (None, "")


@pytest.mark.parametrize("value", ["half", True, "-1/2", "1/0", [], "0GiB"])
def test_a_bad_max_limit_is_one_sentence_naming_it(value: object) -> None:
    with pytest.raises(InvalidConfig) as refused:
        Policy.parse({"groups": {"students": {"max_limit": value}}}, source="policy.json")
    from jupyter_vgpu.units import shorten

    assert str(refused.value) == (
        f"The policy in policy.json is not valid: groups.students.max_limit {shorten(value)} is not allowed; use the "
        'largest limit one kernel may burst to, a GPU share such as "1/4", "25%", 0.5 or 2 (GPUs), or memory such as '
        '"8GiB", or 0 or false for no bursting.'
    )


def test_max_limit_holds_a_requests_limit_and_never_counts_toward_quotas() -> None:
    """Quotas count requests; the limit is held against max_limit alone, and refused, not lowered."""
    from jupyter_vgpu.errors import NotPermitted
    from jupyter_vgpu.hub.quota import check_limit, check_request
    from jupyter_vgpu.slices import SliceRequest

    data = {"groups": {"students": {"max_per_kernel": "1/4", "max_total": "1/4", "max_limit": "1/2"}, "guests": {"max_limit": 0}}}
    policy = Policy.parse(data, source="test")
    sue, gus = policy.quota("sue", ["students"]), policy.quota("gus", ["guests"])
    check_request(sue, SliceRequest.parse("1/4", limit="1/2"), [])  # counts 1/4 against 1/4 per kernel and in total
    with pytest.raises(NotPermitted) as over:
        check_request(sue, SliceRequest.parse("1/4", limit="3/4"), [])
    assert str(over.value) == "sue: may burst to at most 1/2 GPU per kernel (group students); asked for 1/4 GPU, up to 3/4."
    with pytest.raises(NotPermitted) as off:
        check_limit(gus, SliceRequest.parse("1/4", limit="1/2"))
    assert str(off.value) == (
        "gus: may not burst beyond a request (group guests: max_limit 0); asked for 1/4 GPU, up to 1/2; ask without a limit."
    )
    check_limit(gus, SliceRequest.parse("1/4"))  # a fixed slice is no burst
    check_limit(policy.quota("root", []), SliceRequest.parse("1/4", limit="1"))


def test_the_burst_terms_are_the_policys_and_a_users_own_can_only_be_stricter(tmp_path: Path) -> None:
    """Issue 49, Major 1: the hub policy carries the burst notice and action per group and user
    like the other limits (a user in two groups gets the longer notice, the milder action); the
    broker hands them to the user's server, which takes its own only where they are stricter (a
    shorter notice, an action that gives more back): "warn" and a day's notice escape nothing."""
    import json

    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.hub.broker import Broker, Caller, PolicySource
    from jupyter_vgpu.ledger.sqlite import SQLiteLedger
    from jupyter_vgpu.slices.terms import burst_terms, policy_rows

    data = {
        "default": {"burst_reclaim_notice": 60, "burst_reclaim_action": "restart"},
        "groups": {"students": {"burst_reclaim_notice": 30}, "staff": {"burst_reclaim_notice": 300, "burst_reclaim_action": "warn"}},
        "users": {"alice": {"burst_reclaim_notice": 15}},
    }
    policy = Policy.parse(data, source="test")
    assert policy.quota("tom", ["students", "staff"]).get("burst_reclaim_notice") == (300.0, "group staff")
    assert policy.quota("tom", ["students", "staff"]).get("burst_reclaim_action") == ("warn", "group staff")
    assert policy.quota("alice", ["students"]).get("burst_reclaim_notice") == (15.0, "user alice")
    assert policy.quota("alice", ["students"]).get("burst_reclaim_action") == ("restart", "default")
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(data))
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"))
    try:
        info = Broker(ledger, PolicySource(path)).info(Caller(pid=1, uid=1000, gid=1000, user="alice", groups=("students",), admin=False))
    finally:
        ledger.close()
    escaping = burst_terms(86400.0, "warn", info)  # her own server's settings, as in the issue
    assert (escaping.notice, escaping.action) == (15.0, "restart")
    assert escaping.source == "the hub policy: user alice, default" and escaping.by_policy
    assert "15 s notice, then the kernel is restarted" in escaping.describe()
    stricter = burst_terms(5.0, "shutdown", info)
    assert (stricter.notice, stricter.action, stricter.by_policy) == (5.0, "shutdown", False)
    assert (burst_terms(60.0, "interrupt", None).notice, burst_terms(60.0, "interrupt", None).action) == (60.0, "interrupt")
    rows = dict(policy_rows(info))
    assert rows["notice before a burst someone needs is taken back"] == "15 s (user alice)"
    assert rows["then, to a kernel still bursting"].startswith("restart: the kernel is restarted")
    assert policy_rows(None) == []


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"burst_reclaim_action": "kill"}, r"users\.alice\.burst_reclaim_action 'kill' is not allowed; use one of 'restart', 'interrupt'"),
        ({"burst_reclaim_notice": "soon"}, r"users\.alice\.burst_reclaim_notice 'soon' is not allowed"),
        ({"burst_reclaim_notice": -1}, r"users\.alice\.burst_reclaim_notice -1 is not allowed"),
    ],
)
def test_a_bad_burst_term_in_the_policy_is_named(entry: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidConfig, match=words):
        Policy.parse({"users": {"alice": entry}}, source="test")
