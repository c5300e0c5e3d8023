"""The history chart of ``%vgpu monitor``: memory and utilisation over the last minutes, as SVG.

Pure functions of the measurements, so a test can draw a chart without a kernel. Colours are
JupyterLab's CSS variables (with the light theme's values as fallbacks), set through ``style``
so the chart follows the light and dark themes.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from ..units import format_bytes

#: Colours: JupyterLab's theme variables, the light theme's values where they are not defined.
MEMORY_COLOR = "var(--jp-brand-color1,#1976d2)"
RESERVED_COLOR = "var(--jp-warn-color1,#f57c00)"
UTIL_COLOR = "var(--jp-success-color1,#388e3c)"
TEXT_COLOR = "var(--jp-ui-font-color1,#222)"
GRID_COLOR = "var(--jp-border-color2,#e0e0e0)"

_LEFT, _RIGHT, _TOP = 64, 12, 8  # room for the y labels, the right edge, the top label
_GAP, _UTIL_HEIGHT, _BOTTOM = 10, 30, 18  # between the charts, the utilisation strip, the x labels


@dataclass(frozen=True)
class Point:
    """One measurement: ``age`` seconds before now, bytes used, utilisation in percent (or None)."""

    age: float
    used: int
    utilization: int | None = None


def history_svg(
    points: Sequence[Point], reserved: int | None, width: int = 560, height: int = 170, *, window: float = 600.0
) -> str:
    """Memory used over the last ``window`` seconds as an area, the reservation as a dashed line
    labelled ``reserved 4.0 GiB``, and utilisation (0-100 %) as a thin line in a strip below."""
    recent = [p for p in points if 0 <= p.age <= window]
    plot = _Plot(width, height, window, _memory_top(recent, reserved))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" style="max-width:100%;height:auto;font-family:var(--jp-ui-font-family,sans-serif);font-size:11px">',
        f"<title>{html.escape(_summary(recent, reserved))}</title>",
    ]
    parts += plot.frame()
    parts += plot.memory(_thin(recent, plot.inner_width))
    if reserved:
        parts += plot.reservation(reserved)
    parts += plot.utilization(_thin(recent, plot.inner_width))
    parts.append("</svg>")
    return "".join(parts)


def window_label(seconds: float) -> str:
    """``-10 min``, ``-90 s`` (with a minus sign): how far back the left edge of the chart is."""
    if seconds >= 120 or (seconds >= 60 and seconds % 60 == 0):
        return f"\u2212{seconds / 60:g} min"
    return f"\u2212{seconds:g} s"


#: Tops of the memory axis, in GiB: the chart's scale changes in steps a reader can follow.
_TOPS_GIB = (0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256)


def _memory_top(points: Sequence[Point], reserved: int | None) -> float:
    """The top of the memory axis: the first round figure above the highest use and the reservation."""
    highest = max([p.used for p in points] + [reserved or 0]) * 1.1
    for top in _TOPS_GIB:
        if top * 2**30 >= highest:
            return float(top * 2**30)
    return float(highest)


def _summary(points: Sequence[Point], reserved: int | None) -> str:
    now = format_bytes(points[-1].used) if points else "n/a"
    limit = f" of {format_bytes(reserved)} reserved" if reserved else ""
    return f"GPU memory used over time: {now} now{limit}"


def _thin(points: Sequence[Point], columns: int) -> list[Point]:
    """At most one point per two pixel columns, keeping each column's highest figures (peaks stay visible)."""
    slots = max(2, columns // 2)
    if len(points) <= slots:
        return list(points)
    oldest = max(p.age for p in points) or 1.0
    buckets: dict[int, list[Point]] = {}
    for point in points:
        buckets.setdefault(int((oldest - point.age) / oldest * (slots - 1)), []).append(point)
    return [_merge(group) for _, group in sorted(buckets.items())]


def _merge(group: Sequence[Point]) -> Point:
    known = [p.utilization for p in group if p.utilization is not None]
    return Point(min(p.age for p in group), max(p.used for p in group), max(known) if known else None)


class _Plot:
    """Coordinates of one chart: memory on top, utilisation strip below, time along both."""

    def __init__(self, width: int, height: int, window: float, top: float) -> None:
        self.width, self.height, self.window, self.top = width, height, window, top
        self.inner_width = width - _LEFT - _RIGHT
        self.util_bottom = height - _BOTTOM
        self.util_top = self.util_bottom - _UTIL_HEIGHT
        self.memory_bottom = self.util_top - _GAP
        self.memory_height = self.memory_bottom - _TOP

    def x(self, age: float) -> float:
        return round(_LEFT + self.inner_width * (1 - age / self.window), 1)

    def y(self, used: float) -> float:
        return round(self.memory_bottom - self.memory_height * min(used, self.top) / self.top, 1)

    def y_util(self, percent: float) -> float:
        return round(self.util_bottom - _UTIL_HEIGHT * max(0.0, min(percent, 100.0)) / 100, 1)

    def frame(self) -> list[str]:
        """Grid lines, the y labels of both charts and the time axis."""
        right = self.width - _RIGHT
        parts = []
        for fraction in (0.0, 0.5, 1.0):
            y = self.y(self.top * fraction)
            parts.append(_line(_LEFT, y, right, y, GRID_COLOR))
            parts.append(_text(_LEFT - 6, y + 4, format_bytes(self.top * fraction), anchor="end"))
        for y in (self.util_top, self.util_bottom):
            parts.append(_line(_LEFT, y, right, y, GRID_COLOR))
        parts.append(_text(_LEFT - 6, self.util_top + 9, "util 100%", anchor="end"))
        parts.append(_text(_LEFT - 6, self.util_bottom + 3, "0%", anchor="end"))
        label_y = self.height - 4
        parts.append(_text(_LEFT, label_y, window_label(self.window), anchor="start"))
        parts.append(_text(_LEFT + self.inner_width / 2, label_y, window_label(self.window / 2), anchor="middle"))
        parts.append(_text(right, label_y, "now", anchor="end"))
        return parts

    def memory(self, points: Sequence[Point]) -> list[str]:
        """The used memory as a line over a light area."""
        if not points:
            return [_text(_LEFT + self.inner_width / 2, self.memory_bottom - 6, "waiting for the first measurement", anchor="middle")]
        line = " ".join(f"{self.x(p.age)},{self.y(p.used)}" for p in points)
        base = self.memory_bottom
        area = f"{self.x(points[0].age)},{base} {line} {self.x(points[-1].age)},{base}"
        return [
            f'<polygon class="used-area" points="{area}" style="fill:{MEMORY_COLOR};fill-opacity:0.2;stroke:none"/>',
            f'<polyline class="used" points="{line}" style="fill:none;stroke:{MEMORY_COLOR};stroke-width:1.5"/>',
        ]

    def reservation(self, reserved: int) -> list[str]:
        """The slice's reservation: a dashed line with its size written above its right end."""
        y = self.y(reserved)
        right = self.width - _RIGHT
        return [
            f'<line class="reserved" x1="{_LEFT}" y1="{y}" x2="{right}" y2="{y}" '
            f'style="stroke:{RESERVED_COLOR};stroke-width:1.5;stroke-dasharray:6 4"/>',
            _text(right - 2, y - 4, f"reserved {format_bytes(reserved)}", anchor="end", color=RESERVED_COLOR),
        ]

    def utilization(self, points: Sequence[Point]) -> list[str]:
        """Utilisation as a thin line in its own strip (points without a figure are left out)."""
        known = [p for p in points if p.utilization is not None]
        if not known:
            return []
        line = " ".join(f"{self.x(p.age)},{self.y_util(p.utilization or 0)}" for p in known)
        return [f'<polyline class="util" points="{line}" style="fill:none;stroke:{UTIL_COLOR};stroke-width:1"/>']


def _line(x1: float, y1: float, x2: float, y2: float, color: str) -> str:
    return f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" style="stroke:{color};stroke-width:1"/>'


def _text(x: float, y: float, text: str, *, anchor: str, color: str = TEXT_COLOR) -> str:
    return f'<text x="{round(x, 1)}" y="{round(y, 1)}" text-anchor="{anchor}" style="fill:{color}">{html.escape(text)}</text>'
