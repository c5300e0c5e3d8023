"""The in-kernel layer: fit frameworks into the kernel's slice, and the ``%vgpu`` magics.

Loaded by ``--ext=jupyter_vgpu`` (provisioned kernels) or ``%load_ext jupyter_vgpu``. Loading
imports no framework: post-import hooks configure TensorFlow, PyTorch, JAX and CuPy when the
user imports them. Must not import ``jupyter_vgpu.server``.

Importing this package imports nothing else: :mod:`.hint`, which every IPython kernel of the
environment loads, pays only for itself; the rest is imported when the extension loads.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is not imported (see jupyter_vgpu/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from .state import KernelState, current


def is_slice_id(text: str) -> bool:
    """:func:`jupyter_vgpu.slices.records.is_slice_id`, written again here because a Python start
    may import nothing (tests/test_security.py checks that the two agree): the start-up hook
    (:mod:`.startup`) and the kernel's state read it here, where importing the package brought it,
    not from the ledger's records. Anything else, such as ``../../x``, is never used in a path."""
    return len(text) == 12 and not text.strip("0123456789abcdef")


def load_ipython_extension(ipython: Any) -> None:
    """Called by IPython when the extension loads (once per ``%load_ext``)."""
    from . import notices, oom
    from .magics import VGPUMagics
    from .state import establish

    state = establish()
    if not state.kernel:
        state.kernel = True  # this process writes the slice's report from now on
        _forget_process_report(state)
    if state.facts.sliced:
        _fit_environment()
    oom.install(ipython)
    _hook_frameworks()
    ipython.register_magics(VGPUMagics)
    if state.problem:
        print(f"jupyter-vgpu: {state.problem} Frameworks are not limited in this kernel.", file=sys.stderr)
    _check_tier(state)
    state.write_report()
    notices.start(ipython, state.facts.ledger_path, state.facts.slice_id, on_burst=lambda: _give_back(state))
    import os

    from ..launch import ENV_ELSEWHERE

    if ENV_ELSEWHERE not in os.environ:
        return  # a kernel of this host: the launchers' module is not imported (6 ms of every kernel's start)
    from ..launch.elsewhere import Whereabouts

    if (where := Whereabouts.from_env(os.environ)) is not None:  # a kernel its launcher runs elsewhere
        from . import reporter

        reporter.start(state)  # no server where it runs measures it: its report says its use
        if where.ended:
            notices.say_at_first_cell(ipython, where.ended)
        if where.unfenced:
            notices.say_at_first_cell(ipython, f"jupyter-vgpu: {where.unfenced}")


def _give_back(state: Any) -> list[str]:
    """What the frameworks release when a burst is asked back (imported then, not at every start)."""
    from ..frameworks import give_back

    return give_back(state)


def _hook_frameworks() -> None:
    """The post-import hooks: now if a framework was imported before the extension loaded (an
    IPython start-up file), else at the first framework import, through the start-up hook's
    finder (see .startup), so a kernel start does not pay for wrapt and the hooks."""
    from .startup import FRAMEWORK_MODULES, retire, wait_for_frameworks

    if FRAMEWORK_MODULES.isdisjoint(sys.modules):
        wait_for_frameworks()
        return
    from . import hooks

    hooks.install()
    retire()  # the start-up hook's finder is no longer needed


def _check_tier(state: KernelState) -> None:
    """A hard tier that does not hold this kernel (a preload that did not load, a cgroup not
    joined) is said at start."""
    import os

    from ..enforcement import by_tier

    tier = getattr(state.facts, "tier", None)
    if tier is not None and (problem := (plugin := by_tier(tier)).not_held(os.environ)):
        state.tier_problem = problem  # in the slice's report: status and the sidebar say it too
        held = plugin.held_instead()
        print(f"jupyter-vgpu: {problem}; this kernel is held to its slice by {held} only, not {tier.describe()}.", file=sys.stderr)


def _fit_environment() -> None:
    """Name the slice's limit the way the framework releases installed in this kernel read it
    (before any of them is imported, and for every process the kernel starts)."""
    import os

    from ..slices.environment import fit_installed_frameworks

    fit_installed_frameworks(os.environ)


def _forget_process_report(state: KernelState) -> None:
    """The start-up hook may have written a report for this process before the extension
    loaded (a framework imported by an IPython start-up file): the kernel's report replaces it."""
    facts = state.facts
    if facts.slice_id and facts.ledger_path:
        import os

        from ..slices.reports import remove_process_report

        try:
            remove_process_report(facts.ledger_path, facts.slice_id, os.getpid())
        except OSError:
            pass


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext jupyter_vgpu``: stop live views and notices, remove ``%vgpu`` and the OOM handler.

    Framework limits already applied stay (they cannot be undone), and the import hooks stay
    registered (wrapt cannot remove them), so a later import is still fitted to the slice.
    """
    from . import monitor, notices, oom

    monitor.stop_all()
    notices.stop()
    oom.uninstall()
    ipython.magics_manager.magics["line"].pop("vgpu", None)


def __getattr__(name: str) -> Any:
    """``KernelState`` and ``current`` without importing the state module at package import."""
    if name in ("KernelState", "current"):
        from . import state

        return getattr(state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KernelState", "current", "load_ipython_extension", "unload_ipython_extension"]
