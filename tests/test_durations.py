"""How long something lasted, in words: never longer than it was (issue 33: "shut down after 2 min
idle" was said after 91 s). The labextension's `formatSpan` follows the same table (idle.spec.tsx)."""

from __future__ import annotations

import pytest

from jupyter_vgpu.units import format_duration


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 s"),
        (0.5, "0 s"),
        (42, "42 s"),
        (59.6, "59 s"),
        (60, "1 min"),
        (91, "1 min 31 s"),
        (119.9, "1 min 59 s"),
        (150, "2 min 30 s"),
        (599, "9 min 59 s"),
        (600, "10 min"),
        (2520.4, "42 min"),
        (3599.9, "59 min"),
        (3600, "1 h 0 min"),
        (5400, "1 h 30 min"),
        (86400, "24 h 0 min"),
    ],
)
def test_a_duration_is_cut_never_rounded_up(seconds: float, words: str) -> None:
    assert format_duration(seconds) == words


def test_a_duration_that_is_not_a_number_reads_as_none() -> None:
    assert format_duration(float("nan")) == "0 s"
    assert format_duration(-5) == "0 s"
