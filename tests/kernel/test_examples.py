"""Every example runs as a user runs it on the demo's simulated GPUs, on its own kernelspec, and
what it states is what happens (issue 25: the examples promised TensorFlow was limited under
`jupyter vgpu run` while it was not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.tensorflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")
NOTEBOOKS = sorted(EXAMPLES.rglob("*.ipynb"))


@pytest.fixture
def demo_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vgpu_env: dict[str, str]) -> dict[str, str]:
    """The kernelspecs ./scripts/lab installs, in a data folder of the test's own."""
    data = tmp_path / "data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing-else"))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    for args in (["--defaults"], ["-p", "1/2", "--logical-devices", "2"], ["-m", "1GiB"], ["-m", "1GiB", "--limit", "3GiB"]):  # as scripts/lab does
        done = subprocess.run([JUPYTER_VGPU, "kernelspec", "install", *args, "--user"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    return dict(os.environ)


def _outputs(nb: nbformat.NotebookNode) -> str:
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", "") or json.dumps(out.get("data", {}).get("text/plain", "")))
    return "\n".join(text)


@pytest.mark.slow  # half a minute or more on a loaded machine
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_each_example_notebook_runs_on_its_own_sliced_kernel(demo_kernels: dict[str, str], path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    name = nb.metadata["kernelspec"]["name"]
    client = NotebookClient(nb, kernel_name=name, timeout=300, resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on any failing cell
    shown = _outputs(nb)
    assert "SIMULATED" in shown or "simulated" in shown, "the notebook's %vgpu does not say the GPUs are simulated"
    if "mirrored-strategy" in path.name:
        assert "replicas in sync: 2" in shown  # its kernelspec's 2 devices, made by the hook
    elif "near-the-limit" in path.name:
        # its tensors, in host memory on the simulated GPU, are the slice's use, near its limit
        assert "holding 960 MiB of the slice's 1024 MiB" in shown and "holding 1152 MiB" in shown
        assert "960 MiB of 1.0 GiB, 94% (simulated: what its frameworks hold in the host's memory" in shown, shown
    elif "bursty" in path.name:
        assert "holding 2048 MiB: above the request, within the limit" in shown
        assert "1024 MiB guaranteed" not in shown and "of up to 3.0 GiB (1.0 GiB guaranteed)" in shown, shown
        assert "above the request: this kernel's while nobody needs it" in shown
        assert "the colleague asks for" in shown and "and waits: True" in shown  # kept out by the burst, not refused
        assert "the colleague got the GPU" in shown  # in, once the step that held the burst ended
        said = [line for line in shown.splitlines() if line.startswith("jupyter vgpu: ")]  # the colleague's run
        assert said and not [line for line in said if "GPU-" in line], said  # its GPU by index, as the panel names it
        assert said[-1].startswith("jupyter vgpu: slice ") and " on GPU 0 (" in said[-1], said
        assert "-c import sys import tensorflow as tf big = tf.ones(" in shown  # %vgpu lists the step on one line
    else:
        assert "JUPYTER_VGPU_SLICE_ID" in shown  # the provisioner's environment, as the notebook says


def test_train_py_under_run_is_fitted_to_its_slice(vgpu_env: dict[str, str]) -> None:
    # examples/vgpu-run-from-a-terminal.md: "TensorFlow, PyTorch, JAX and CuPy are limited to the slice".
    result = subprocess.run(
        [JUPYTER_VGPU, "run", "-p", "1/4", "--logical-devices", "2", "--", sys.executable, "train.py"],
        cwd=EXAMPLES, env={**os.environ, "EPOCHS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[SIMULATED GPUs, not real hardware]" in result.stderr
    (devices,) = [line for line in result.stdout.splitlines() if line.startswith("logical devices:")]
    assert devices.count("CPU:") == 2, devices  # the slice's 2 logical devices (the CPU build splits the CPU)
    assert "fraction: 0.25" in result.stdout
