"""Every Python process that holds a slice fits its frameworks at import, exactly as a kernel does.

The wheel installs ``jupyter_vgpu_startup.pth`` into site-packages. Python's :mod:`site` runs its
one line at every interpreter start; the line looks up ``JUPYTER_VGPU_SLICE_ID`` in
``os.environ`` (already imported by ``site``) and imports nothing unless it is set, so a process
without a slice pays for a dictionary lookup and for compiling that short line: the rest of it is
a string, compiled (``exec``) only where the variable is set (``benchmarks/startup.py`` measures it).

With the variable set (a kernel on a slice, a command under ``jupyter vgpu run``, and every
process they start: ``!python train.py``, DataLoader and ``multiprocessing`` workers, Ray or Dask
workers started from a notebook), :func:`activate` puts a small finder at the front of
``sys.meta_path``. It costs nothing until the process first imports a framework; then it
registers the same post-import hooks the kernel extension does (:func:`.hooks.install`, which
imports wrapt) and hands that import to wrapt's finder, so the framework is configured the moment
its import finishes. A process that never imports a framework never loads wrapt or the kernel
layer. A child inherits its parent's slice variables, so it is fitted to the same slice, never
more; it writes its own report beside the kernel's, which ``%vgpu`` and ``jupyter vgpu status``
list as the slice's configured processes.

Where the slice's tier has a hold its processes enter (``JUPYTER_VGPU_ENTER``: the MPS
memory-partitioning tier's cgroup), the process enters it here, before any of its code runs
(``ledger.join``, which asks the tier). It takes the variable out as it tries, so its children (in
the hold already, or with the reason it could not) do not try again: a broker that is down costs
one wait in a process tree, not one per process.

Nothing here may break a Python start or an import: every failure is swallowed (and said on
stderr when ``JUPYTER_VGPU_DEBUG`` is set).
"""

from __future__ import annotations

import os
import sys
import time

from . import is_slice_id  # the package's, imported with it

#: When this process began, for a slice's process (the notices of its slice from before are a
#: previous process's: :mod:`.notices`).
STARTED = time.time()

TYPE_CHECKING = False  # typing itself is not imported (see jupyter_vgpu/__init__.py)
if TYPE_CHECKING:
    from typing import Any

#: The name of the path file the wheel installs (a test checks the shipped file calls :func:`activate`).
PTH_NAME = "jupyter_vgpu_startup.pth"

#: The top-level modules whose first import sets the hooks up: every registered framework's
#: module (``tests/kernel/test_every_process.py`` checks this against the framework registry,
#: which is too costly to import here).
FRAMEWORK_MODULES = frozenset({"tensorflow", "torch", "jax", "cupy"})


class _FirstFrameworkImport:
    """A finder that waits for the first framework import, sets the hooks up, and leaves."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in FRAMEWORK_MODULES:
            return None
        retire()
        try:
            from . import hooks
            from .state import establish

            state = establish()
            if state.facts.sliced and not state.kernel:  # a kernel's extension fitted it at load
                from ..slices.environment import fit_installed_frameworks

                fit_installed_frameworks(os.environ)  # before the framework reads it (a parent usually did)
            hooks.install()
            for finder in sys.meta_path:  # wrapt's finder, which runs the hook once the import is done
                if type(finder).__module__.startswith("wrapt") and hasattr(finder, "find_spec"):
                    return finder.find_spec(fullname, path, target)
        except Exception as error:
            _debug(error)
        return None


_finder: _FirstFrameworkImport | None = None


def wait_for_frameworks() -> None:
    """What :func:`activate` does first, for the kernel extension: the finder at the front of
    ``sys.meta_path`` unless it is there or has done its work (a kernel without a slice, or
    without this hook, fits TensorFlow's logical devices at its import all the same)."""
    global _finder
    if _finder is None:
        _finder = _FirstFrameworkImport()
        sys.meta_path.insert(0, _finder)


def activate() -> None:
    """Wait for this process's first framework import (once; never raises). A process whose
    ``JUPYTER_VGPU_SLICE_ID`` is not a slice id does nothing."""
    if not is_slice_id(os.environ.get("JUPYTER_VGPU_SLICE_ID", "")):
        _debug(ValueError("JUPYTER_VGPU_SLICE_ID is not a slice id (12 hex digits)"))
        return
    try:
        wait_for_frameworks()
        if os.environ.get("JUPYTER_VGPU_ENTER"):  # the slice's tier has a hold: enter it before any CUDA call
            from ..ledger.join import enter_here

            enter_here()
    except Exception as error:  # a broken install must not stop every Python program
        _debug(error)


def retire() -> None:
    """Take the finder out (the hooks are registered, by it or by the kernel extension)."""
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def _debug(error: BaseException) -> None:
    if os.environ.get("JUPYTER_VGPU_DEBUG"):
        print(f"jupyter-vgpu: could not set up this process's slice: {error!r}", file=sys.stderr)
