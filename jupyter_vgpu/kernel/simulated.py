"""On simulated GPUs, what a sliced process's frameworks hold counts as its use of its GPUs.

A simulated GPU has no driver to say what each process holds: a framework's tensors live in host
memory. So once a sliced process on simulated GPUs has imported a framework, a daemon thread asks
the frameworks every :data:`INTERVAL` seconds what they hold (each answers in well under a
millisecond: :meth:`~jupyter_vgpu.frameworks.base.Framework.simulated_memory`) and, when that
changed, writes it for the simulated driver (:mod:`jupyter_vgpu.gpus.simulated_use`), split evenly
over the slice's GPUs, with the process's CPU load standing in for its GPU utilisation. Every
view then shows the slice's use as on a real GPU, under its "simulated" label. Nothing is asked
per cell, and nothing runs on real GPUs or in a process without a slice. A slice of the node
broker's GPUs says it to the broker too (``simulated_use``), whose simulated driver then lists it
for every user, as a real driver would: another user's server sees it in the line's room, and
the owner's server sees it above its request (issue 42's bursts between two users).

In a kernel, the CPU load counts only while a cell runs (or ran since the previous look): an
idle kernel's frameworks keep threads of their own (TensorFlow's thread pools, a ``tf.data``
prefetch filling its buffer) whose load would otherwise read as GPU work for ever, and the idle
reclaim would never see the kernel idle. A process without cells (``jupyter vgpu run``) is at
work while it lives.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import KernelState

#: Seconds between two looks at what the frameworks hold.
INTERVAL = 1.0

#: A change smaller than this (and no change of load) is not written again.
NOISE = 1 << 20

#: Seconds a look waits for the node broker to take what this process holds.
BROKER_TIMEOUT = 5.0

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
    cells = Cells()
    try:
        cells.attach()
    except Exception:
        pass  # no cells followed: the process counts as at work
    threading.Thread(target=_watch, args=(state, folder, cells), name="jupyter-vgpu-simulated-use", daemon=True).start()


class Cells:
    """Whether a kernel ran a cell since the previous look (IPython's cell events); a process
    without an IPython shell is always at work."""

    def __init__(self) -> None:
        self.kernel = False
        # Started by a framework's import, which in a kernel is a cell's: it runs now.
        self.running = True
        self.ran = True

    def attach(self) -> None:
        """Follow this process's IPython shell, if it has one (never imports IPython)."""
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        events = getattr(shell, "events", None)
        if events is None:
            return
        events.register("pre_run_cell", self._began)
        events.register("post_run_cell", self._ended)
        self.kernel = True

    def at_work(self) -> bool:
        """True when a cell runs now or ran since the previous call (or no cells here)."""
        if not self.kernel:
            return True
        busy = self.running or self.ran
        self.ran = self.running
        return busy

    def _began(self, info: object = None) -> None:
        self.running = self.ran = True

    def _ended(self, result: object = None) -> None:
        self.running = False


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


def _broker() -> Any:
    """The node broker's client when the slice is the broker's (``JUPYTER_VGPU_BROKER``), else None."""
    import os

    from ..ledger.broker_client import ENV_BROKER, BrokerClient

    socket_path = os.environ.get(ENV_BROKER, "").strip()
    return BrokerClient(socket_path, timeout=BROKER_TIMEOUT) if socket_path else None


def tell_broker(broker: Any, used: dict[str, int], utilization: dict[str, int]) -> tuple[Any, bool]:
    """Say to the node broker what this process holds (its GPUs are the node's: the broker lists
    it as this process's memory, and so every user's view and the line see it). Returns the client
    to ask next time (None once the broker cannot take it: an older broker, GPUs not simulated
    there) and whether it was told."""
    from ..errors import InvalidRequest, VGPUError
    from ..ledger.broker_client import NoAnswer

    try:
        broker.call("simulated_use", used=used, utilization=utilization)
    except InvalidRequest:
        return None, False
    except (NoAnswer, VGPUError):  # not reached, or not (yet) the holder of its slice: asked again at the next look
        return broker, False
    return broker, True


def _watch(state: KernelState, folder: Path, cells: Cells) -> None:
    import psutil

    from ..gpus.simulated_use import write_use

    process = psutil.Process()
    gpus = state.facts.gpus
    broker = _broker()
    written: tuple[int, int] | None = None
    while True:
        time.sleep(INTERVAL)
        try:
            used = held(state) or 0
            load = min(100, round(process.cpu_percent()))  # since the previous look
            if not cells.at_work():
                load = 0  # no cell ran: the frameworks' own threads are not GPU work
            # A small change is not written again, but going idle (or leaving it) always is.
            steady = written is not None and abs(load - written[1]) < 5 and (load == 0) == (written[1] == 0)
            if written is not None and abs(used - written[0]) < NOISE and steady:
                continue
            by_gpu, busy = {gpu: used // len(gpus) for gpu in gpus}, {gpu: load for gpu in gpus}
            write_use(folder, by_gpu, busy)
            told = True
            if broker is not None:
                broker, told = tell_broker(broker, by_gpu, busy)
            written = (used, load) if told else None
        except Exception:
            pass  # a view's figure is never worth breaking the user's process for
