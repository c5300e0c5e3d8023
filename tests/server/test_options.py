"""``c.VGPUServer.*`` options refuse values that cannot work, naming the value."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from jupyter_vgpu.server.extension import VGPUServer


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("monitor_interval", 0.01, "0.1 seconds or more"),
        ("over_limit_grace", -1.0, "0 or more"),
        ("over_limit_tolerance", -0.5, "0 or more"),
        ("history_points", 0, "1 or more"),
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
