"""Post-import hooks: configure each framework the moment the user imports it.

``wrapt.register_post_import_hook`` calls the hook once, after the module's own import has
finished, for every spelling that imports it (``import tensorflow``, ``import keras`` with the
TensorFlow backend, ``from tensorflow import keras``). If the module was imported before the
extension loaded, wrapt calls the hook at once; the record then says so.

An exception in a wrapt hook would fail the user's import, so every hook catches everything,
records it, and says it once on stderr.
"""

from __future__ import annotations

import sys
from typing import Any

from ..frameworks import FRAMEWORKS, Framework, revisit
from ..frameworks.records import FAILED, TOO_LATE, FrameworkRecord
from .state import current

_registered = False
_warned: set[str] = set()


def install() -> None:
    """Note which frameworks are already imported, then hook all of them (once per process: a
    kernel whose start-up hook (:mod:`.startup`) registered them before any import loads the
    extension later, and a framework imported in between was configured at its import)."""
    global _registered
    if _registered:
        return
    import wrapt  # here, not at the module's import: %vgpu's refresh needs none of it

    _registered = True
    state = current()
    if state is not None:
        state.preloaded.update(f.module for f in FRAMEWORKS if f.module in sys.modules)
    for framework in FRAMEWORKS:
        wrapt.register_post_import_hook(_hook_for(framework), framework.module)


def _hook_for(framework: Framework) -> Any:
    def on_import(module: Any) -> None:
        configure(framework, module)

    on_import.__name__ = f"jupyter_vgpu_configure_{framework.name}"
    return on_import


def configure(framework: Framework, module: Any) -> None:
    """Fit ``framework`` into the slice, record the outcome; never raises."""
    state = current()
    if state is None:
        return
    preloaded = framework.module in state.preloaded
    try:
        record = framework.configure(module, state)
    except Exception as error:
        record = FrameworkRecord(framework.title, FAILED, f"{type(error).__name__}: {error}")
        say_once(
            framework.name,
            f"jupyter-vgpu: could not fit {framework.title} into this kernel's GPU slice ({error}); "
            "your import went on without a limit. `%vgpu` shows the details.",
        )
    if preloaded:
        record.preloaded = True
        record.detail = f"imported before jupyter-vgpu loaded; {record.detail}"
    if record.status == TOO_LATE:
        say_once(framework.name, f"jupyter-vgpu: {framework.title}: {record.detail}.")
    try:
        state.record(framework.name, record)
    except Exception:
        pass
    if state.facts.simulate:  # its tensors live in host memory: they count as its simulated GPU use
        from . import simulated

        simulated.start(state)
    if "jupyter_vgpu.kernel.oom" in sys.modules:  # a kernel (the extension loaded it); a plain process has no shell
        try:
            sys.modules["jupyter_vgpu.kernel.oom"].watch(framework, module)
        except Exception:
            pass


def refresh() -> None:
    """Let adapters finish work that waited for their framework (before ``%vgpu`` shows it)."""
    state = current()
    if state is None:
        return
    state.record_all(revisit(state, "refresh"))


def say_once(key: str, message: str) -> None:
    """Print ``message`` on stderr the first time ``key`` has something to say."""
    if key in _warned:
        return
    _warned.add(key)
    print(message, file=sys.stderr)
