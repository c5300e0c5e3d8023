"""`./scripts/docs-screenshots`, which retakes docs/sidebar.png and docs/dashboard.png from the
demo (`./scripts/lab`, simulated GPUs, two example notebooks run in Chromium), into a folder of
the test's: both pictures come out at the size the docs show, and the checkout gains nothing.

About a minute: two TensorFlow kernels, and the dashboard's minute of history.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.tensorflow]

REPO = Path(__file__).resolve().parents[2]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk comes first)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def leftovers() -> set[str]:
    """What git sees in the checkout beside its tracked files, ignored ones too (but .venv,
    which ./scripts/lab keeps up to date, and Python's caches)."""
    listing = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {
        line for line in listing.splitlines() if not line[3:].startswith(".venv/") and "__pycache__" not in line
    }


def test_the_docs_pictures_come_from_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "out"
    before = leftovers()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "docs-screenshots"), "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    said = done.stderr
    assert done.returncode == 0, said[-4000:]
    # The script waits for the notebook's simulated use to show before it takes the sidebar.
    assert "near-the-limit.ipynb uses 0.9" in said, said[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["dashboard.png", "sidebar.png"]
    assert png_size(out / "sidebar.png") == (1280, 720)  # the whole lab: panel, notebook, status bar
    width, height = png_size(out / "dashboard.png")  # the dashboard: header, GPU 0 and its slices
    assert 1100 <= width <= 1280 and 700 <= height <= 1600, (width, height)
    for name in ("sidebar.png", "dashboard.png"):
        assert 20_000 < (out / name).stat().st_size < 300_000, name  # a picture, small enough for the docs
    assert leftovers() == before
