"""The in-kernel layer: fit frameworks into the kernel's slice, and the ``%vgpu`` magics.

Loaded by ``--ext=jupyter_vgpu`` (provisioned kernels) or ``%load_ext jupyter_vgpu``. Loading
imports no framework: post-import hooks configure TensorFlow, PyTorch, JAX and CuPy when the
user imports them. Must not import ``jupyter_vgpu.server``.
"""

from __future__ import annotations

import sys
from typing import Any

from . import hooks, monitor, oom
from .magics import VGPUMagics
from .state import KernelState, current, establish


def load_ipython_extension(ipython: Any) -> None:
    """Called by IPython when the extension loads (once per ``%load_ext``)."""
    state = establish()
    if state.facts.sliced:
        _fit_environment()
    oom.install(ipython)
    hooks.install()
    ipython.register_magics(VGPUMagics)
    if state.problem:
        print(f"jupyter-vgpu: {state.problem} Frameworks are not limited in this kernel.", file=sys.stderr)
    state.write_report()


def _fit_environment() -> None:
    """Name the slice's limit the way the framework releases installed in this kernel read it
    (before any of them is imported, and for every process the kernel starts)."""
    import os

    from ..slices.environment import fit_installed_frameworks

    fit_installed_frameworks(os.environ)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext jupyter_vgpu``: stop live views, remove ``%vgpu`` and the OOM handler.

    Framework limits already applied stay (they cannot be undone), and the import hooks stay
    registered (wrapt cannot remove them), so a later import is still fitted to the slice.
    """
    monitor.stop_all()
    oom.uninstall()
    ipython.magics_manager.magics["line"].pop("vgpu", None)


__all__ = ["KernelState", "current", "load_ipython_extension", "unload_ipython_extension"]
