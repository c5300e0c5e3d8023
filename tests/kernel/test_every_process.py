"""Every Python process that holds a slice is fitted to it at import, not only the kernel (issue 20):
a TensorFlow script under ``jupyter vgpu run``, ``!python`` from a sliced kernel and its own
children, each through the start-up hook the wheel installs (``jupyter_vgpu_startup.pth``).
A process without a slice loads nothing of jupyter-vgpu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_vgpu.kernel.startup import PTH_NAME
from jupyter_vgpu.slices import Slice
from jupyter_vgpu.slices.reports import configured_processes

from .harness import Kernel, Workspace, module_kernel

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")

#: How many logical CPU devices TensorFlow made (the CPU build splits the CPU as it would a GPU).
TF_DEVICES = "import tensorflow as tf; print(len(tf.config.list_logical_devices('CPU')))"


def test_the_start_up_hook_is_installed_beside_the_package() -> None:
    import site

    found = [Path(folder) / PTH_NAME for folder in site.getsitepackages() if (Path(folder) / PTH_NAME).exists()]
    assert found, f"{PTH_NAME} is not in {site.getsitepackages()}"
    assert "jupyter_vgpu.kernel.startup" in found[0].read_text()


def test_a_process_without_a_slice_loads_nothing_of_jupyter_vgpu(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_VGPU", "CUDA_"))}
    result = subprocess.run(
        [sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules if m.startswith(('jupyter_vgpu', 'wrapt'))))"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_start_up_hook_waits_for_every_registered_framework() -> None:
    from jupyter_vgpu.frameworks import FRAMEWORKS
    from jupyter_vgpu.kernel.startup import FRAMEWORK_MODULES

    assert {f.module for f in FRAMEWORKS} == FRAMEWORK_MODULES


FAKE_CUPY = "import cupy, sys, json; from jupyter_vgpu.kernel.state import current; print(json.dumps(sorted(current().records)), 'wrapt' in sys.modules)"


def test_a_sliced_process_loads_the_hooks_only_when_it_imports_a_framework(vgpu_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("")  # stands in for CuPy: the hook runs on any module of that name
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    idle = subprocess.run(
        [JUPYTER_VGPU, "run", "-q", "-p", "0.25", "--", sys.executable, "-c",
         "import sys; print('jupyter_vgpu.kernel.startup' in sys.modules, 'wrapt' in sys.modules)"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert idle.returncode == 0 and idle.stdout.split() == ["True", "False"], idle.stdout + idle.stderr
    imported = subprocess.run(
        [JUPYTER_VGPU, "run", "-q", "-p", "0.25", "--", sys.executable, "-c", FAKE_CUPY],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == ['["cupy"]', "True"], imported.stdout + imported.stderr


@pytest.mark.tensorflow
def test_a_tensorflow_script_under_run_gets_the_slices_logical_devices(vgpu_env: dict[str, str]) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [JUPYTER_VGPU, "run", "-q", "-p", "0.25", "--logical-devices", "2", "--", sys.executable, "-c", TF_DEVICES],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "2"  # 1 before: the script mapped the whole device


# -- children of a sliced kernel -------------------------------------------------------------------
@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Slice, Kernel]]:
    yield from module_kernel(tmp_path_factory, "children", fraction=0.25, logical_devices=2)


CHILD = """
import subprocess, sys
out = subprocess.run([sys.executable, "-c", {code!r}], capture_output=True, text=True, env={{**__import__('os').environ, 'TF_CPP_MIN_LOG_LEVEL': '3'}})
print(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:])
"""


@pytest.mark.tensorflow
def test_a_python_child_of_a_sliced_kernel_and_its_child_get_the_slice(kernel: tuple[Workspace, Slice, Kernel]) -> None:
    _, _, k = kernel
    child = k.run(CHILD.format(code=TF_DEVICES), timeout=240)
    assert child.ok and child.stdout.strip() == "2", (child.stdout, child.error)
    grandchild = k.run(CHILD.format(code=CHILD.format(code=TF_DEVICES)), timeout=240)
    assert grandchild.ok and grandchild.stdout.strip() == "2", (grandchild.stdout, grandchild.error)


LIVE_CHILD = """
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", "import tensorflow, time; print('ready', flush=True); time.sleep(120)"],
                          stdout=subprocess.PIPE, text=True, env={**__import__('os').environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
assert worker.stdout.readline().strip() == 'ready'
print(worker.pid)
"""


@pytest.mark.tensorflow
def test_vgpu_and_status_say_which_processes_of_the_slice_are_configured(kernel: tuple[Workspace, Slice, Kernel]) -> None:
    workspace, slice_, k = kernel
    started = k.run(LIVE_CHILD, timeout=240)
    assert started.ok, started.error
    worker = int(started.stdout.strip())
    try:
        listed = {p["pid"]: p for p in configured_processes(workspace.ledger_path, slice_.id)}
        assert listed[worker]["frameworks"]["tensorflow"]["status"] == "applied"
        assert "import tensorflow" in listed[worker]["command"]
        [bundle] = k.run("%vgpu").displays
        shown = bundle["text/plain"]
        assert f"pid {worker}" in shown and "tensorflow applied" in shown, shown
        status = subprocess.run(
            [JUPYTER_VGPU, "status"], env=workspace.base_env(), capture_output=True, text=True, timeout=60
        )
        assert f"configured in pid {worker}" in status.stdout and "tensorflow applied" in status.stdout, status.stdout
    finally:
        k.run(f"import os, signal; os.kill({worker}, signal.SIGKILL); worker.wait()")
    deadline = time.monotonic() + 10
    while worker in {p["pid"] for p in configured_processes(workspace.ledger_path, slice_.id)}:
        assert time.monotonic() < deadline, "an ended process is still listed"
        time.sleep(0.1)
    assert json.dumps(configured_processes(workspace.ledger_path, slice_.id)).count('"kernel": false') == 0
