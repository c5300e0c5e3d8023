"""The history chart of ``%vgpu monitor`` as a pure function: what the SVG shows."""

from __future__ import annotations

import re

from jupyter_vgpu.kernel.chart import Point, history_svg, window_label
from jupyter_vgpu.units import GiB


def polyline(svg: str, name: str) -> list[tuple[float, float]]:
    match = re.search(rf'<polyline class="{name}" points="([^"]+)"', svg)
    assert match, svg
    return [(float(x), float(y)) for x, y in (pair.split(",") for pair in match.group(1).split())]


def test_memory_is_a_line_over_time_with_now_at_the_right() -> None:
    svg = history_svg([Point(60, 1 * GiB, 10), Point(30, 3 * GiB, 50), Point(0, 2 * GiB, 90)], 4 * GiB, window=120)
    line = polyline(svg, "used")
    assert [x for x, _ in line] == sorted(x for x, _ in line)  # oldest on the left
    assert line[1][1] < line[2][1] < line[0][1]  # 3 GiB highest, then 2, then 1
    assert '<polygon class="used-area"' in svg
    assert ">\u22122 min</text>" in svg and ">\u22121 min</text>" in svg and ">now</text>" in svg


def test_the_reservation_is_a_dashed_line_labelled_with_its_size() -> None:
    svg = history_svg([Point(0, GiB)], 4 * GiB)
    assert re.search(r'<line class="reserved" [^>]*stroke:var\(--jp-warn-color1,#f57c00\);[^>]*stroke-dasharray', svg)
    assert ">reserved 4.0 GiB</text>" in svg


def test_the_memory_axis_reaches_past_the_reservation_and_the_peak() -> None:
    svg = history_svg([Point(0, 5 * GiB)], 4 * GiB)
    labels = re.findall(r'text-anchor="end"[^>]*>([\d.]+ \w+)</text>', svg)
    assert labels == ["0 B", "3.0 GiB", "6.0 GiB"]


def test_utilisation_is_a_second_line_on_its_own_scale() -> None:
    svg = history_svg([Point(2, GiB, 0), Point(1, GiB, None), Point(0, GiB, 100)], 4 * GiB, window=10)
    util = polyline(svg, "util")
    assert len(util) == 2  # the reading without a figure is left out
    assert util[0][1] > util[1][1]
    assert ">util 100%</text>" in svg and ">0%</text>" in svg


def test_a_kernel_without_a_slice_has_no_reservation_line() -> None:
    svg = history_svg([Point(0, GiB)], None)
    assert 'class="reserved"' not in svg and "reserved" not in svg.split("</title>")[1]


def test_before_the_first_measurement_the_chart_says_so() -> None:
    assert ">waiting for the first measurement</text>" in history_svg([], 4 * GiB)


def test_a_long_history_is_thinned_and_keeps_its_peak() -> None:
    points = [Point(600 - i, (5 if i == 301 else 1) * GiB, 10) for i in range(601)]
    svg = history_svg(points, 4 * GiB, width=560)
    line = polyline(svg, "used")
    assert len(line) <= 560 // 2
    assert min(y for _, y in line) == polyline(history_svg([Point(0, 5 * GiB)], 4 * GiB), "used")[0][1]


def test_colours_follow_the_jupyterlab_theme() -> None:
    svg = history_svg([Point(1, GiB, 5), Point(0, GiB, 5)], 4 * GiB)
    for variable in ("--jp-brand-color1", "--jp-warn-color1", "--jp-ui-font-color1", "--jp-success-color1"):
        assert f"var({variable}," in svg


def test_window_labels() -> None:
    assert window_label(600) == "\u221210 min"
    assert window_label(90) == "\u221290 s"
