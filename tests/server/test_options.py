"""``c.VGPUServer.*`` options refuse values that cannot work, naming the value."""

from __future__ import annotations

import logging

import pytest
from traitlets import TraitError

from jupyter_vgpu.server.extension import VGPUServer


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("monitor_interval", 0.01, "use 0.1 to 3600 seconds"),
        ("monitor_interval", 1e308, "use 0.1 to 3600 seconds"),
        ("over_limit_grace", -1.0, "use 0 to 86400"),
        ("over_limit_tolerance", -0.5, "use 0 to 10"),
        ("history_points", 0, "use 1 to 10000"),
        ("watchdog_events", -1, "use 1 to 10000"),
        ("reap_interval", float("inf"), "use 0 to 3600"),
        ("idle_reclaim_after", -60.0, "use 0 to 31622400"),
        ("idle_reclaim_notice", 1e9, "use 0 to 86400"),
        ("idle_reclaim_demand_seconds", float("nan"), "use 0 to 86400"),
        ("dashboard_step", -1.0, "use 0 to 3600"),
        ("burst_reclaim_notice", -5.0, "use 0 to 86400"),
        ("burst_reclaim_notice", float("inf"), "use 0 to 86400"),
    ],
)
def test_a_value_that_cannot_work_is_refused_with_its_name(option: str, value: float, words: str) -> None:
    with pytest.raises(TraitError) as refused:
        VGPUServer(**{option: value})
    assert f"c.VGPUServer.{option}" in str(refused.value) and words in str(refused.value)


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(TraitError) as refused:
        VGPUServer(over_limit_action="kill")
    assert "over_limit_action" in str(refused.value) and "'kill'" in str(refused.value)


def test_an_unknown_burst_reclaim_action_is_refused() -> None:
    with pytest.raises(TraitError) as refused:
        VGPUServer(burst_reclaim_action="kill")
    assert "burst_reclaim_action" in str(refused.value) and "'kill'" in str(refused.value)


def test_an_unknown_idle_reclaim_mode_is_refused() -> None:
    with pytest.raises(TraitError) as refused:
        VGPUServer(idle_reclaim_mode="sometimes")
    assert "idle_reclaim_mode" in str(refused.value) and "'sometimes'" in str(refused.value)


def test_one_bad_option_falls_back_alone_and_never_weakens_the_watchdog() -> None:
    """over_limit_action=shutdown with history_points=0 ran with action warn: traitlets rolls the
    whole batch back (issue 19). Now only the bad option keeps its default, and says so."""
    from traitlets.config import Config

    config = Config({"VGPUServer": {"over_limit_action": "shutdown", "history_points": 0, "monitor_interval": 0.5}})
    server = VGPUServer()
    said: list[logging.LogRecord] = []
    listener = logging.Handler()
    listener.emit = said.append  # type: ignore[method-assign]
    server.log.addHandler(listener)
    server.update_config(config)
    assert server.over_limit_action == "shutdown" and server.monitor_interval == 0.5
    assert server.history_points == 60
    assert any("c.VGPUServer.history_points keeps its default (60)" in r.getMessage() for r in said)
