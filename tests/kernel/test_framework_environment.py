"""The slice's limit in the environment, named as the installed framework releases read it:
checked against the installed jaxlib's own option parser, in a kernel and in `jupyter vgpu run`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_vgpu.slices.environment import for_installed_frameworks

from .harness import Kernel, Workspace

jaxlib = pytest.importorskip("jaxlib")

#: What jaxlib's GPU plugin will be given: it raises ValueError if both names are set.
JAX_OPTIONS = (
    "import json, jaxlib.xla_client as x; "
    "print(json.dumps({k: v for k, v in x.generate_pjrt_gpu_plugin_options().items() if k in ('memory_fraction', 'preallocate')}))"
)


def test_a_sliced_kernel_names_jax_s_fraction_as_its_jaxlib_reads_it(workspace: Workspace, start: Kernel) -> None:
    env = workspace.slice_env(workspace.reserve(0.25))
    expected = float(env["XLA_PYTHON_CLIENT_MEM_FRACTION"])
    env["XLA_CLIENT_MEM_FRACTION"] = "0.9"  # a conflicting value inherited from a shell
    kernel = start(env)
    outcome = kernel.run(JAX_OPTIONS)
    assert outcome.ok, outcome.error or outcome.stderr
    options = json.loads(outcome.stdout.strip().splitlines()[-1])
    assert options == {"memory_fraction": expected, "preallocate": False}
    assert kernel.env("XLA_PYTHON_CLIENT_MEM_FRACTION") == ""  # the deprecated name is gone


def test_jupyter_vgpu_run_gives_its_command_the_name_its_jaxlib_reads(vgpu_env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-q", "-p", "1/4", "--", sys.executable, "-c", JAX_OPTIONS],
        capture_output=True, text=True, timeout=120, env={**vgpu_env, **_path_env(), "XLA_CLIENT_MEM_FRACTION": "0.9"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    options = json.loads(result.stdout.strip().splitlines()[-1])
    assert 0.1 < options["memory_fraction"] < 0.25 and options["preallocate"] is False


def _path_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}


@pytest.mark.parametrize(
    ("versions", "inherited", "expected"),
    [
        ({"torch": "2.9.1"}, {}, {}),  # refuses per_process_memory_fraction: leave it alone
        ({"torch": "2.10.0+cpu"}, {}, {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.231"}),
        (
            {"torch": "2.10.0"},
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,per_process_memory_fraction:0.9"},
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,per_process_memory_fraction:0.231"},
        ),
        (
            {"torch": "2.11.0"},
            {"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
            {"PYTORCH_ALLOC_CONF": "expandable_segments:True,per_process_memory_fraction:0.231"},
        ),
        (  # 2.12 also raises at once where the driver refuses a cudaMalloc (HAMi-core, MPS)
            {"torch": "2.12.0"},
            {"PYTORCH_CUDA_ALLOC_CONF": "throw_on_cudamalloc_oom:False"},
            {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.231,throw_on_cudamalloc_oom:True"},
        ),
        ({"jaxlib": "0.4.31"}, {}, {}),
        ({"jaxlib": "0.4.33"}, {}, {"XLA_CLIENT_MEM_FRACTION": "0.231", "XLA_PYTHON_CLIENT_MEM_FRACTION": None}),
    ],
)
def test_which_variables_each_release_gets(versions: dict[str, str], inherited: dict[str, str], expected: dict[str, str | None]) -> None:
    env = {"JUPYTER_VGPU_MEMORY_FRACTION": "0.231", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.231", **inherited}
    assert for_installed_frameworks(env, versions.get) == expected
