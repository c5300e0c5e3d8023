"""How a ``%vgpu`` sheet renders in a notebook, whatever the JupyterLab theme."""

from __future__ import annotations

import re

from jupyter_vgpu.kernel.sheet import Sheet


def test_the_simulated_badge_reads_in_light_and_dark_themes() -> None:
    html = Sheet("jupyter-vgpu · no slice", badge="simulated GPUs")._repr_html_()
    badge = re.search(r'<span style="([^"]+)">simulated GPUs</span>', html)
    assert badge, html
    style = dict(rule.split(":", 1) for rule in badge.group(1).split(";"))
    # --jp-warn-color3 is #ffe0b2 in the light, dark and high-contrast themes: a fixed dark text
    # reads on it in all of them (the dark theme's --jp-warn-color0 would not).
    assert style["background"] == "var(--jp-warn-color3,#ffe0b2)"
    assert style["color"] == "#5d3200"
    assert style["border"] == "1px solid var(--jp-warn-color1,#f57c00)"


def test_a_sheet_without_a_badge_has_none() -> None:
    assert "<span" not in Sheet("jupyter-vgpu · no slice")._repr_html_()
