"""A small document shown by the magics: aligned plain text in a terminal, a table in a notebook.

``display(sheet)`` sends both ``text/plain`` and ``text/html``; each front end picks one.
Text between backticks is a command the user can type: ``<code>`` in HTML, kept as is in text.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

_CODE = re.compile(r"`([^`]+)`")

#: The "simulated GPUs" badge. Every JupyterLab theme (light, dark, dark high contrast) makes
#: ``--jp-warn-color3`` a light orange (#ffe0b2), so the text is a fixed dark brown: 8.6:1 on
#: it. The dark theme's ``--jp-warn-color0`` (#f57c00) would be 2.1:1, and the inherited white
#: text 1.3:1. The border sets the badge off the white page of the light theme.
BADGE_STYLE = (
    "font-size:0.8em;padding:1px 6px;border-radius:8px;white-space:nowrap;"
    "background:var(--jp-warn-color3,#ffe0b2);color:#5d3200;border:1px solid var(--jp-warn-color1,#f57c00)"
)


@dataclass
class Section:
    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)

    def add(self, label: str, value: str) -> Section:
        self.rows.append((label, value))
        return self


@dataclass
class Sheet:
    """Title, a few sentences, sections of label/value rows, and closing notes."""

    title: str
    badge: str = ""
    intro: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def section(self, title: str) -> Section:
        section = Section(title)
        self.sections.append(section)
        return section

    # -- plain text -------------------------------------------------------------------
    def text(self) -> str:
        width = max((len(label) for s in self.sections for label, _ in s.rows), default=0)
        lines = [self.title + (f"  [{self.badge}]" if self.badge else "")]
        lines.extend(self.intro)
        for section in self.sections:
            lines.append("")
            lines.append(section.title)
            for label, value in section.rows:
                lines.append(f"  {label:<{width}}  {value}".rstrip())
        if self.notes:
            lines.append("")
            lines.extend(self.notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    # -- HTML ---------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        badge = f' <span style="{BADGE_STYLE}">{_html(self.badge)}</span>' if self.badge else ""
        parts = [
            '<div class="jupyter-vgpu-sheet">',
            f'<div style="font-weight:bold;margin-bottom:4px">{_html(self.title)}{badge}</div>',
        ]
        parts.extend(f'<div style="margin-bottom:4px">{_html(line)}</div>' for line in self.intro)
        if self.sections:
            parts.append('<table style="border-collapse:collapse;text-align:left">')
            for section in self.sections:
                parts.append(
                    f'<tr><th colspan="2" style="text-align:left;padding-top:6px">{_html(section.title)}</th></tr>'
                )
                for label, value in section.rows:
                    parts.append(
                        f'<tr><td style="text-align:left;padding-right:1.5em;opacity:0.75">{_html(label)}</td>'
                        f'<td style="text-align:left">{_html(value)}</td></tr>'
                    )
            parts.append("</table>")
        parts.extend(f'<div style="margin-top:4px">{_html(line)}</div>' for line in self.notes)
        parts.append("</div>")
        return "\n".join(parts)


def _html(text: str) -> str:
    return _CODE.sub(r"<code>\1</code>", html.escape(text))
