"""Readable out-of-memory: under the normal traceback, the slice, its use, and how to grow it.

Installed with IPython's ``set_custom_exc``. The framework's exception classes are only known
once the user imports it, so each import hook adds its classes with :func:`watch`. An existing
custom handler is kept: exceptions it was registered for still go to it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..frameworks import FRAMEWORKS, Framework, framework_memory
from ..units import format_bytes
from .state import current

if TYPE_CHECKING:
    from .state import KernelState

_shell: Any = None
_previous_types: tuple[type[BaseException], ...] = ()
_previous_handler: Any = None
_ours: dict[type[BaseException], Framework] = {}
_installed: tuple[type[BaseException], ...] = ()  # what we last gave set_custom_exc


def install(shell: Any) -> None:
    """Remember the shell and its current custom handler; classes come with :func:`watch`."""
    global _shell, _previous_types, _previous_handler, _installed
    if _shell is shell:
        return
    _shell = shell
    _previous_types = tuple(getattr(shell, "custom_exceptions", ()) or ())
    _previous_handler = getattr(shell, "CustomTB", None) if _previous_types else None
    _installed = _previous_types
    _ours.clear()
    for framework in FRAMEWORKS:
        module = sys.modules.get(framework.module)
        if module is not None:
            watch(framework, module)


def uninstall() -> None:
    """Give the shell back its previous handler."""
    global _shell, _installed
    ours_in_place = _shell is not None and tuple(getattr(_shell, "custom_exceptions", ()) or ()) == _installed
    if _shell is not None and _ours and ours_in_place:
        if _previous_types and _previous_handler is not None:
            _shell.set_custom_exc(_previous_types, _restore(_previous_handler))
        else:
            _shell.set_custom_exc((), None)
    _shell = None
    _installed = ()
    _ours.clear()


def _restore(bound: Any) -> Any:
    def handler(shell: Any, etype: Any, value: Any, tb: Any, tb_offset: Any = None) -> Any:
        return bound(etype, value, tb, tb_offset=tb_offset)

    return handler


def watch(framework: Framework, module: Any) -> None:
    """Handle ``framework``'s out-of-memory errors from now on (called by its import hook)."""
    global _previous_types, _previous_handler, _installed
    if _shell is None:
        return
    added = False
    for error in framework.oom_errors(module):
        if error not in _ours:
            _ours[error] = framework
            added = True
    if not added:
        return
    current = tuple(getattr(_shell, "custom_exceptions", ()) or ())
    if current != _installed:
        # someone (the user, another extension) set a handler since we last did: keep theirs
        _previous_types = tuple(cls for cls in current if cls not in _ours)
        _previous_handler = getattr(_shell, "CustomTB", None) if _previous_types else None
    _installed = _previous_types + tuple(_ours)
    _shell.set_custom_exc(_installed, _handle)


def _handle(shell: Any, etype: type[BaseException], value: BaseException, tb: Any, tb_offset: Any = None) -> Any:
    framework = next((f for cls, f in _ours.items() if isinstance(value, cls)), None)
    if framework is None or not framework.is_oom(value):
        if _previous_types and isinstance(value, _previous_types) and _previous_handler is not None:
            return _previous_handler(etype, value, tb, tb_offset=tb_offset)
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    if hasattr(value, "_render_traceback_"):
        stb = list(value._render_traceback_())
    else:
        stb = list(shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset))
    try:
        state = current()
        extra = explain(state, framework, value) if state is not None else []
    except Exception as error:  # the explanation must never hide the user's traceback
        extra = [f"jupyter-vgpu: (could not describe the slice: {error})"]
    try:
        shell._get_exc_info((etype, value, tb))  # sets sys.last_* so %debug works as usual
    except Exception:
        pass
    shell._showtraceback(etype, value, stb + extra)
    return None


def explain(state: KernelState, framework: Framework, error: BaseException) -> list[str]:
    """The lines shown under the traceback (the views' modules are imported here, when one is
    shown, not with the handler at every kernel's start)."""
    from .status import how_to_grow, slice_rows, used_how
    from .usage import measure

    facts = state.facts
    message = str(error)
    if not facts.sliced:
        if facts.no_gpu_reason:
            return ["", f"jupyter-vgpu: {framework.title} ran out of memory; this kernel has no GPU ({facts.no_gpu_reason})"]
        return []
    usage = measure(state)
    lines = [""]
    on_cpu = "CPU" in message and "GPU" not in message
    if on_cpu:
        lines.append(
            f"jupyter-vgpu: {framework.title} ran out of memory on the CPU, not in this kernel's GPU slice. The slice:"
        )
    else:
        lines.append(f"jupyter-vgpu: {framework.title} ran out of GPU memory in this kernel's slice.")
    width = 19
    for label, value in slice_rows(state, usage):
        lines.append(f"  {label:<{width}}{value}")
    used = usage.total_used
    peak = state.peak_used
    lines.append(
        f"  {'used':<{width}}{format_bytes(used)} now, {format_bytes(peak)} peak ({used_how(usage)})"
    )
    now, most = framework_memory(state)
    if most is not None:
        lines.append(f"  {'frameworks hold':<{width}}{format_bytes(now)} now, {format_bytes(most)} peak")
    record = state.records.get(framework.name)
    if record is not None:
        lines.append(f"  {framework.title:<{width}}{record.status}: {record.detail}")
    lines.append("To get a bigger slice:")
    lines.extend(f"  - {way}" for way in how_to_grow(state))
    return lines
