"""On simulated GPUs, what a sliced process's frameworks hold counts as its use of its GPUs.

A simulated GPU has no driver to say what each process holds: a framework's tensors live in host
memory. So once a sliced process on simulated GPUs has imported a framework, a daemon thread asks
the frameworks every :data:`INTERVAL` seconds what they hold (each answers in well under a
millisecond: :meth:`~jupyter_vgpu.frameworks.base.Framework.simulated_memory`) and, when that
changed, writes it for the simulated driver (:mod:`jupyter_vgpu.gpus.simulated_use`), split evenly
over the slice's GPUs, with the process's CPU load standing in for its GPU utilisation. Every
view then shows the slice's use as on a real GPU, under its "simulated" label. Nothing is asked
per cell, and nothing runs on real GPUs or in a process without a slice.
"""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import KernelState

#: Seconds between two looks at what the frameworks hold.
INTERVAL = 1.0

#: A change smaller than this (and no change of load) is not written again.
NOISE = 1 << 20

_started = False
_lock = threading.Lock()


def start(state: KernelState) -> None:
    """Start the thread once per process, if it holds a slice of simulated GPUs; never raises."""
    global _started
    facts = state.facts
    if not (facts.sliced and facts.simulate and facts.ledger_path and facts.gpus):
        return
    with _lock:
        if _started:
            return
        _started = True
    from ..gpus.simulated_use import remove_use, use_folder

    folder = use_folder(Path(facts.ledger_path).parent)
    atexit.register(remove_use, folder)
    threading.Thread(target=_watch, args=(state, folder), name="jupyter-vgpu-simulated-use", daemon=True).start()


def held(state: KernelState) -> int | None:
    """What the imported frameworks hold in host memory now (None: none of them can tell)."""
    from ..frameworks import imported

    total: int | None = None
    for framework, module in imported(state):
        try:
            amount = framework.simulated_memory(module)
        except Exception:
            continue
        if amount is not None:
            total = (total or 0) + amount
    return total


def _watch(state: KernelState, folder: Path) -> None:
    import psutil

    from ..gpus.simulated_use import write_use

    process = psutil.Process()
    gpus = state.facts.gpus
    written: tuple[int, int] | None = None
    while True:
        time.sleep(INTERVAL)
        try:
            used = held(state) or 0
            load = min(100, round(process.cpu_percent()))  # since the previous look
            if written is not None and abs(used - written[0]) < NOISE and abs(load - written[1]) < 5:
                continue
            write_use(folder, {gpu: used // len(gpus) for gpu in gpus}, {gpu: load for gpu in gpus})
            written = (used, load)
        except Exception:
            pass  # a view's figure is never worth breaking the user's process for
