"""Loading the kernel extension: the slice's environment, nothing heavy imported, extensions kept."""

from __future__ import annotations

import json
import re
import textwrap

from jupyter_vgpu.slices.reports import read_report
from jupyter_vgpu.units import GiB, MiB

from .harness import Workspace

HEAVY = ("tensorflow", "keras", "torch", "jax", "cupy", "jupyter_server", "ipywidgets", "jupyter_vgpu.server")


def test_kernel_sees_its_slice_environment(workspace: Workspace, start) -> None:
    slice_ = workspace.reserve(0.25)
    kernel = start(workspace.slice_env(slice_))
    env = kernel.eval("{k: v for k, v in __import__('os').environ.items() if k.startswith(('JUPYTER_VGPU', 'CUDA', 'XLA', 'CUPY'))}")
    assert env["JUPYTER_VGPU_SLICE_ID"] == slice_.id
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-5e1a0000-0000-4000-8000-00000000a100"
    assert int(env["JUPYTER_VGPU_MEMORY_RESERVED"]) == 4 * GiB
    assert int(env["JUPYTER_VGPU_MEMORY_LIMIT"]) == 4 * GiB - 512 * MiB  # a simulated GPU: compute capability unknown
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["CUPY_GPU_MEMORY_LIMIT"] == env["JUPYTER_VGPU_MEMORY_LIMIT"]


def test_extension_loads_without_importing_any_framework(workspace: Workspace, start) -> None:
    kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    assert kernel.eval("'jupyter_vgpu' in get_ipython().extension_manager.loaded")
    assert kernel.eval("'vgpu' in get_ipython().magics_manager.magics['line']")
    loaded = kernel.eval(f"[m for m in {list(HEAVY)!r} if m in __import__('sys').modules]")
    assert loaded == []


def test_extension_writes_the_slice_report_at_start(workspace: Workspace, start) -> None:
    slice_ = workspace.reserve(0.25)
    kernel = start(workspace.slice_env(slice_))
    report = read_report(workspace.ledger_path, slice_.id)
    assert report is not None
    assert report["pid"] == kernel.pid
    assert report["frameworks"] == {}


def test_users_own_ipython_extensions_are_kept(workspace: Workspace, start) -> None:
    extensions = workspace.root / "extensions"
    extensions.mkdir()
    (extensions / "my_extension.py").write_text(
        "def load_ipython_extension(ip):\n    ip.user_ns['my_extension_loaded'] = True\n"
    )
    profile = workspace.ipython_dir / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text("c.InteractiveShellApp.extensions = ['my_extension']\n")
    env = workspace.slice_env(workspace.reserve(0.25))
    env["PYTHONPATH"] = str(extensions)
    kernel = start(env)
    loaded = kernel.eval("sorted(get_ipython().extension_manager.loaded)")
    assert "my_extension" in loaded and "jupyter_vgpu" in loaded
    assert kernel.eval("my_extension_loaded")


def test_plain_load_ext_without_a_slice_shows_the_machine_and_how_to_get_one(workspace: Workspace, start) -> None:
    kernel = start(workspace.base_env(), extension=False)
    assert kernel.run("%load_ext jupyter_vgpu").ok
    outcome = kernel.run("%vgpu")
    assert outcome.ok
    [bundle] = outcome.displays
    text, html = bundle["text/plain"], bundle["text/html"]
    assert text.startswith("jupyter-vgpu · no slice  [simulated GPUs]")
    assert "This kernel has no GPU slice" in text
    assert '"Python 3 (1/4 GPU)"' in text and "jupyter vgpu run -p 0.25" in text
    assert re.search(r"\n  GPU 0 +Simulated A100 · 16.0 GiB total", text)
    assert "<table" in html and "Simulated A100" in html
    assert "<code>jupyter vgpu kernelspec install</code>" in html


def test_kernel_started_on_the_cpu_says_why(workspace: Workspace, start) -> None:
    kernel = start(workspace.cpu_env(reason="No NVIDIA GPU is available here. This kernel runs on the CPU."))
    [bundle] = kernel.run("%vgpu").displays
    text = bundle["text/plain"]
    assert text.startswith("jupyter-vgpu · CPU only")
    assert "This kernel runs without a GPU: No NVIDIA GPU is available here." in text


def test_a_malformed_slice_variable_is_one_clear_line(workspace: Workspace, start) -> None:
    env = workspace.slice_env(workspace.reserve(0.25))
    env["JUPYTER_VGPU_MEMORY_LIMIT"] = "lots"
    kernel = start(env)
    [bundle] = kernel.run("%vgpu").displays
    assert "JUPYTER_VGPU_MEMORY_LIMIT='lots' is not a number" in bundle["text/plain"]


def test_loading_twice_keeps_one_state(workspace: Workspace, start) -> None:
    kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    code = textwrap.dedent(
        """
        import jupyter_vgpu.kernel.state as s
        first = s.current()
        get_ipython().run_line_magic('reload_ext', 'jupyter_vgpu')
        print(__import__('json').dumps(s.current() is first))
        """
    )
    outcome = kernel.run(code)
    assert outcome.ok, outcome.error
    assert json.loads(outcome.stdout.strip()) is True
    assert kernel.run("%vgpu help").ok


def test_a_hook_that_fails_never_breaks_the_users_import(workspace: Workspace, start) -> None:
    # A package named cupy whose memory pool cannot be reached, as on a machine with a broken driver.
    package = workspace.root / "site" / "cupy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "def get_default_memory_pool():\n    raise RuntimeError('CUDA driver version is insufficient')\nready = True\n"
    )
    env = workspace.slice_env(workspace.reserve(0.25))
    env["PYTHONPATH"] = str(package.parent)
    kernel = start(env)
    imported = kernel.run("import cupy; print(cupy.ready)")
    assert imported.ok and imported.stdout.strip() == "True"
    assert imported.stderr.startswith(
        "jupyter-vgpu: could not fit CuPy into this kernel's GPU slice (CUDA driver version is insufficient); "
        "your import went on without a limit."
    )
    [bundle] = kernel.run("%vgpu").displays
    assert re.search(r"\n  CuPy +failed: RuntimeError: CUDA driver version is insufficient", bundle["text/plain"])
