"""The JupyterLab extension's own checks, from pytest: its copy of the server's words
(``labextension/src/vocabulary.json``) is current, and its lint (ESLint, Prettier) and unit tests
(Jest) pass. No browser: these run node in ``labextension/``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.vocabulary import vocabulary

LABEXTENSION = Path(__file__).resolve().parents[2] / "labextension"
VOCABULARY_JSON = LABEXTENSION / "src" / "vocabulary.json"
#: The venv's jlpm (jupyter_builder), beside this Python; the package.json scripts call `jlpm` too.
JLPM = Path(sys.executable).parent / "jlpm"
#: How much of a failed command's output the failure shows.
TAIL_CHARS = 6000


def test_the_labextension_vocabulary_is_the_servers() -> None:
    shipped: Any = json.loads(VOCABULARY_JSON.read_text())
    assert shipped == vocabulary(), (
        f"{VOCABULARY_JSON.relative_to(LABEXTENSION.parent)} differs from jupyter_vgpu.vocabulary.vocabulary(); "
        "regenerate it with `python -m jupyter_vgpu.vocabulary > labextension/src/vocabulary.json`"
    )


def _jlpm(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `jlpm <args>` in labextension/, skipping when node or the node modules are missing."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (the labextension's checks run on Node.js)")
    if not (LABEXTENSION / "node_modules").is_dir():
        pytest.skip("labextension/node_modules is missing (run `jlpm install` in labextension/)")
    assert JLPM.exists(), f"no jlpm beside {sys.executable} (install jupyter_builder into this environment)"
    env = {key: value for key, value in os.environ.items() if key != "FORCE_COLOR"}
    env.update(PATH=os.pathsep.join([str(JLPM.parent), os.environ.get("PATH", "")]), NO_COLOR="1", CI="true")
    return subprocess.run(
        [str(JLPM), *args],
        cwd=LABEXTENSION,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
        check=False,
    )


def _tail(output: str) -> str:
    return output if len(output) <= TAIL_CHARS else "...\n" + output[-TAIL_CHARS:]


@pytest.mark.parametrize("script", ["lint:check", "test"])
def test_the_labextension_script_passes(script: str) -> None:
    result = _jlpm("run", script)
    assert result.returncode == 0, (
        f"`jlpm run {script}` in labextension/ exited {result.returncode}:\n{_tail(result.stdout)}"
    )
