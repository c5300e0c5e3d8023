"""Every kernelspec an example notebook names is installed by both ways of getting the demo:
`binder/postBuild` and `./scripts/lab` (issue 47: on Binder the bursty example opened with "No such
kernel"). Their `jupyter vgpu kernelspec install` lines are run as written, into a folder of the
test's own (`--user` there instead of `--sys-prefix`), and the notebooks are read."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


def named_by_examples() -> dict[str, str]:
    """Kernel name -> the first notebook under examples/ that names it."""
    names: dict[str, str] = {}
    for notebook in sorted((ROOT / "examples").rglob("*.ipynb")):
        name = json.loads(notebook.read_text())["metadata"]["kernelspec"]["name"]
        names.setdefault(name, str(notebook.relative_to(ROOT)))
    return names


def install_lines(script: Path) -> list[list[str]]:
    """The script's `jupyter vgpu kernelspec install ...` commands, as argument lists."""
    lines = []
    for line in script.read_text().splitlines():
        words = shlex.split(line.split(">", 1)[0], comments=True)
        if words[:4] == ["jupyter", "vgpu", "kernelspec", "install"]:
            lines.append(words[4:])
    return lines


@pytest.mark.parametrize("script", ["binder/postBuild", "scripts/lab"])
def test_every_kernel_an_example_names_is_installed(script: str, tmp_path: Path) -> None:
    env = {**os.environ, "JUPYTER_DATA_DIR": str(tmp_path), "JUPYTER_PATH": str(tmp_path / "nothing-else")}
    commands = install_lines(ROOT / script)
    assert commands, f"{script} installs no kernelspec"
    for args in commands:
        args = ["--user" if a == "--sys-prefix" else a for a in args]
        done = subprocess.run([JUPYTER_VGPU, "kernelspec", "install", *args], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
    installed = {p.name for p in (tmp_path / "kernels").iterdir()}
    missing = {name: where for name, where in named_by_examples().items() if name not in installed}
    assert not missing, f"{script} does not install {missing} (it installs {sorted(installed)})"
