"""``%vgpu`` in a plain kernel: the environment's IPython config loads a small hint whose first
``%vgpu`` loads the real extension; a kernel the provisioner starts loads the real one instead."""

from __future__ import annotations

import shutil
from pathlib import Path

from kernels import EXTENSION, Kernel

from .harness import Workspace

#: What the wheel installs as ``<prefix>/etc/ipython/ipython_kernel_config.json``.
SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "ipython-config" / "ipython_kernel_config.json"
HINT = "jupyter_vgpu.kernel.hint"
#: Modules the hint must not import at load: the real extension and what it brings.
REAL = ("jupyter_vgpu.kernel.state", "jupyter_vgpu.kernel.magics", "jupyter_vgpu.slices", "wrapt", "ipywidgets")


def start_plain(kernels: list[Kernel], env: dict[str, str], *arguments: str) -> Kernel:
    kernel = Kernel.start("python3", env, arguments=arguments)
    kernels.append(kernel)
    return kernel


def install_shipped_config(workspace: Workspace) -> None:
    """Make the workspace's kernels read the shipped config (from their profile: the wheel's
    place, ``<prefix>/etc/ipython``, is the venv's, which tests do not write)."""
    profile = workspace.ipython_dir / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    shutil.copy(SHIPPED_CONFIG, profile / "ipython_kernel_config.json")


def loaded(kernel: Kernel) -> set[str]:
    """The extensions the kernel loaded, other than IPython's own (``storemagic``)."""
    return {name for name in kernel.eval("sorted(get_ipython().extension_manager.loaded)") if not name.startswith("IPython.")}


def test_vgpu_in_a_plain_kernel_explains_how_to_get_a_slice(workspace: Workspace, kernels: list[Kernel]) -> None:
    kernel = start_plain(kernels, workspace.base_env(), f"--InteractiveShellApp.extra_extensions={HINT}")
    outcome = kernel.run("%vgpu")
    assert outcome.ok, outcome.stderr
    [bundle] = outcome.displays
    text = bundle["text/plain"]
    assert text.startswith("jupyter-vgpu · no slice")
    assert "This kernel has no GPU slice, so nothing keeps its frameworks to a share of a GPU." in text
    assert 'pick a kernel such as "Python 3 (1/4 GPU)" in the launcher or the kernel picker' in text
    assert "`jupyter vgpu kernelspec install` adds them" in text
    assert "<code>jupyter vgpu kernelspec install</code>" in bundle["text/html"]


def test_vgpu_in_a_plain_kernel_says_what_others_have_reserved(workspace: Workspace, kernels: list[Kernel]) -> None:
    """A plain kernel's frameworks can take memory slices were promised: `%vgpu` said nothing of
    them (issue 33)."""
    workspace.reserve(0.25)
    workspace.reserve(0.5)
    kernel = start_plain(kernels, workspace.base_env(), f"--InteractiveShellApp.extra_extensions={HINT}")
    [bundle] = kernel.run("%vgpu").displays
    text = " ".join(bundle["text/plain"].split())
    assert "Other kernels and commands hold 2 GPU slices: 12.0 GiB of GPU 0: this kernel's frameworks are not kept out" in text
    assert "12.0 GiB reserved" in text and "free 4.0 GiB" in text, text  # the GPU's line, as %vgpu devices shows it


def test_the_first_vgpu_loads_the_extension_and_later_ones_use_it(workspace: Workspace, kernels: list[Kernel]) -> None:
    kernel = start_plain(kernels, workspace.base_env(), f"--InteractiveShellApp.extra_extensions={HINT}")
    assert kernel.run("%vgpu help").ok
    assert "jupyter_vgpu" in loaded(kernel)
    [bundle] = kernel.run("%vgpu help").displays
    assert "%vgpu monitor" in bundle["text/plain"]
    # issue 49: a resize works with a framework imported that has not taken GPU memory; help says so
    assert "before a framework has taken GPU memory (frameworks already imported get the new size)" in bundle["text/plain"]


def test_the_hint_alone_imports_nothing_of_the_extension(workspace: Workspace, kernels: list[Kernel]) -> None:
    kernel = start_plain(kernels, workspace.base_env(), f"--InteractiveShellApp.extra_extensions={HINT}")
    assert loaded(kernel) == {HINT}
    assert kernel.eval(f"[m for m in {list(REAL)!r} if m in __import__('sys').modules]") == []


def test_a_mistake_after_the_hint_is_the_real_extensions_one_line(workspace: Workspace, kernels: list[Kernel]) -> None:
    kernel = start_plain(kernels, workspace.base_env(), f"--InteractiveShellApp.extra_extensions={HINT}")
    outcome = kernel.run("%vgpu bogus")
    assert outcome.stderr.startswith("UsageError: %vgpu 'bogus' is not a command")
    assert "Traceback" not in outcome.stderr


def test_the_shipped_config_gives_every_plain_kernel_vgpu(workspace: Workspace, kernels: list[Kernel]) -> None:
    install_shipped_config(workspace)
    kernel = start_plain(kernels, workspace.base_env())
    assert loaded(kernel) == {HINT}
    [bundle] = kernel.run("%vgpu").displays
    assert "This kernel has no GPU slice" in bundle["text/plain"]


def test_a_provisioned_kernel_loads_the_extension_instead_of_the_hint(workspace: Workspace, kernels: list[Kernel]) -> None:
    install_shipped_config(workspace)
    slice_ = workspace.reserve(0.25)
    kernel = start_plain(kernels, workspace.slice_env(slice_), EXTENSION)  # the provisioner's --ext=jupyter_vgpu
    assert loaded(kernel) == {"jupyter_vgpu"}
    [bundle] = kernel.run("%vgpu").displays
    assert bundle["text/plain"].startswith(f"jupyter-vgpu · slice {slice_.id}")
