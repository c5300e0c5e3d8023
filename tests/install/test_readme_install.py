"""README.md's install section says what works today (issue 33: `pip install jupyter-vgpu` found
nothing, the package is not on the public index yet). test_wheel.py runs its lines as written."""

from __future__ import annotations

import re
from pathlib import Path

from .test_wheel import REPO, install_lines

#: Installing from the public index: `pip install jupyter-vgpu`, `pip install 'jupyter-vgpu[hub]'`.
FROM_THE_INDEX = re.compile(r"pip install ['\"]?jupyter-vgpu\b")


def paragraphs(path: Path) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", path.read_text())]


def test_the_install_lines_build_from_the_clone_and_need_node_20() -> None:
    lines = install_lines()
    assert not any(FROM_THE_INDEX.search(line) for line in lines), lines
    assert any("python -m build" in line for line in lines) and lines[-1] == "jupyter lab"
    section = next(p for p in paragraphs(REPO / "README.md") if p.startswith("jupyter-vgpu is not on PyPI yet"))
    assert "Node.js 20 or newer" in section


def test_installing_from_the_index_is_offered_only_for_when_it_is_published() -> None:
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*.md"))]:
        for paragraph in paragraphs(path):
            if FROM_THE_INDEX.search(paragraph):
                assert re.search(r"[Oo]nce (jupyter-vgpu is )?published", paragraph), f"{path.name}: {paragraph[:300]}"
