"""A kernel that runs elsewhere keeps its report's use current, for a server that cannot measure it.

A kernel on this host is measured by the server (NVML, or the simulated driver's per-process use).
A kernel its launcher runs on another machine (a cluster job: ``Whereabouts.from_env`` is not None)
can only be seen through its report, which it otherwise writes at start, at a framework's import
and at each ``%vgpu``. So such a kernel runs one daemon thread that asks the imported frameworks
every :data:`INTERVAL` seconds what they hold (their own counters: TensorFlow's memory info,
PyTorch's allocator, and on simulated GPUs what they hold in host memory, as
:mod:`.simulated` measures it), and writes the report again when that changed. Asking never
creates a CUDA context: a framework that has not started its runtime says nothing.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import KernelState

#: Seconds between two looks at what the frameworks hold.
INTERVAL = 2.0

#: A change smaller than this is not written again.
NOISE = 1 << 20

_started = False
_lock = threading.Lock()


def use_now(state: KernelState) -> int | None:
    """What this kernel's frameworks hold now (None: none of them can tell): their GPU counters,
    else, on simulated GPUs, what they hold in host memory."""
    from ..frameworks import framework_memory

    used, _ = framework_memory(state)
    if used is None and state.facts.simulate:
        from .simulated import held

        used = held(state)
    return used


def _simulated_use(state: KernelState) -> int | None:
    """On simulated GPUs, what this kernel's frameworks hold in host memory; else None."""
    if not state.facts.simulate:
        return None
    from .simulated import held

    return held(state)


def start(state: KernelState) -> bool:
    """Start the thread once per process, for a kernel with a slice report; whether it runs."""
    global _started
    facts = state.facts
    if not (state.kernel and facts.slice_id and facts.ledger_path):
        return False
    with _lock:
        if _started:
            return True
        _started = True
    state.elsewhere = True
    state.other_use = lambda: _simulated_use(state)
    threading.Thread(target=_watch, args=(state,), name="jupyter-vgpu-report-use", daemon=True).start()
    return True


def _watch(state: KernelState) -> None:
    written: int | None = None
    while True:
        time.sleep(INTERVAL)
        try:
            used = use_now(state)
            if used == written or (used is not None and written is not None and abs(used - written) < NOISE):
                continue
            state.observe(used)
            state.write_report()
            written = used
        except Exception:
            pass  # a view's figure is never worth breaking the user's kernel for
