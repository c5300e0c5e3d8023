"""The allocator guard (issue 24): in a slice, the allocator settings under which a framework's
limit is only a threshold (TensorFlow's CUDA async allocator, JAX's async or platform allocator)
are unset, in the slice's environment and at the framework's import, and %vgpu says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_vgpu.slices.environment import for_installed_frameworks


def test_the_slice_environment_drops_allocators_that_make_limits_thresholds() -> None:
    env = {
        "JUPYTER_VGPU_MEMORY_FRACTION": "0.218",
        "TF_GPU_ALLOCATOR": "cuda_malloc_async",
        "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
    }
    changes = for_installed_frameworks(env)
    assert changes["TF_GPU_ALLOCATOR"] is None and changes["XLA_PYTHON_CLIENT_ALLOCATOR"] is None
    assert changes["JUPYTER_VGPU_GUARDED"] == "TF_GPU_ALLOCATOR=cuda_malloc_async,XLA_PYTHON_CLIENT_ALLOCATOR=platform"
    # the default allocators stay; outside a slice nothing changes
    assert "TF_GPU_ALLOCATOR" not in for_installed_frameworks({"JUPYTER_VGPU_MEMORY_FRACTION": "0.2", "TF_GPU_ALLOCATOR": "bfc"})
    assert for_installed_frameworks({"TF_GPU_ALLOCATOR": "cuda_malloc_async"}) == {}


def test_a_command_in_a_slice_runs_without_them(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU_")}
    env.update(
        JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=str(tmp_path / "ledger.sqlite"),
        TF_GPU_ALLOCATOR="cuda_malloc_async", XLA_PYTHON_CLIENT_ALLOCATOR="cuda_async",
    )  # fmt: skip
    show = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('TF_GPU_ALLOCATOR', 'XLA_PYTHON_CLIENT_ALLOCATOR', 'JUPYTER_VGPU_GUARDED')}))"
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/4", "--", sys.executable, "-c", show],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "TF_GPU_ALLOCATOR": None,
        "XLA_PYTHON_CLIENT_ALLOCATOR": None,
        "JUPYTER_VGPU_GUARDED": "TF_GPU_ALLOCATOR=cuda_malloc_async,XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async",
    }


@pytest.mark.slow
def test_set_in_a_cell_before_the_import_it_is_unset_at_the_import_and_vgpu_says_so(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    from kernel.harness import Workspace, start  # type: ignore[import-not-found]

    workspace = Workspace(tmp_path)
    kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    try:
        code = "import os; os.environ['XLA_PYTHON_CLIENT_ALLOCATOR'] = 'cuda_async'\nimport jax\nprint(os.environ.get('XLA_PYTHON_CLIENT_ALLOCATOR'))"
        outcome = kernel.run(code)
        assert outcome.ok, outcome.error
        assert outcome.stdout.strip().splitlines()[-1] == "None"
        status = kernel.run("%vgpu")
        text = status.displays[0]["text/plain"]
        assert "allocator guard" in text and "XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async" in text
        assert "XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async unset: JAX's memory fraction applies to its default (BFC) allocator only." in text
    finally:
        kernel.stop()
