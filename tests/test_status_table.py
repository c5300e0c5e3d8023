"""`jupyter vgpu status`'s slice table keeps one layout for every row at any terminal width
(issue 41): the holder sat on a slice's line for some rows and on the next for others."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

JUPYTER_VGPU = [str(Path(sys.executable).parent / "jupyter-vgpu")]

#: Holders of different lengths: a short command, a middling one, one longer than any column, and
#: one whose first word is longer than a narrow HOLDER column (`{long}`: a link to `sleep`).
COMMANDS = [
    ["sleep", "60"],
    ["sh", "-c", "sleep 60", "train-the-model-for-a-while"],
    ["sh", "-c", "sleep 60", "/home/someone/projects/" + "a-rather-long-folder-name/" * 3 + "analysis.ipynb"],
    ["{long}", "60"],
]


def status(columns: int, *args: str) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run([*JUPYTER_VGPU, "status", *args], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def holders(vgpu_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A `run` slice per command, their holders' words by slice id."""
    long = tmp_path / "train-the-model-on-one-gpu-for-a-while"
    long.symlink_to(shutil.which("sleep") or "/bin/sleep")
    commands = [[part.format(long=long) for part in command] for command in COMMANDS]
    started = [subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "0.1", "--", *command]) for command in commands]
    try:
        deadline = time.monotonic() + 30
        while len(slices := json.loads(status(100, "--json"))["slices"]) < len(COMMANDS):
            assert time.monotonic() < deadline, "the slices were not booked in time"
            time.sleep(0.2)
        yield {s["id"]: s["holder_text"] for s in slices}
    finally:
        for process in started:
            process.kill()
            process.wait(10)


@pytest.mark.parametrize("columns", [50, 80, 100, 120, 160])
def test_every_slice_row_has_its_holder_in_the_same_place(holders: dict[str, str], columns: int) -> None:
    lines = status(columns).splitlines()
    assert [line for line in lines if len(line) > columns] == []
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("SLICE"))
    # Where HOLDER is in the heading is where every row's holder starts: beside the figures (the
    # same column) or on a line under them (the same line of each row, the same indentation).
    offset = next(i for i in range(3) if "HOLDER" in lines[header + i])
    column = lines[header + offset].index("HOLDER")
    on_header_line = offset == 0
    for slice_id, holder in holders.items():
        row = next(i for i, line in enumerate(lines) if line.startswith(f"  {slice_id} "))
        assert lines[row + offset].find(holder[:8]) == column, f"{holder!r} is not where HOLDER is:\n" + "\n".join(lines)
        if not on_header_line:
            assert lines[row + offset][:column].strip() == "", "\n".join(lines)
    # Beside the figures where the terminal leaves the column 24 characters (status is at most
    # 120 wide), under them otherwise.
    assert on_header_line == (columns > 100), "\n".join(lines)
