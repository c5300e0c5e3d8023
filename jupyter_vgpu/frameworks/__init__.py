"""One adapter per framework: how to fit it into the slice, and what it can tell about itself.

The registry (:data:`FRAMEWORKS`) is the only list of frameworks: the slice's environment
(``slices.environment``), the import hooks (``kernel.hooks``, and the start-up hook every sliced
Python process runs), ``%vgpu`` and the reports all ask it.

Adding a framework (one module plus its tests):

1. ``frameworks/<name>.py``: a :class:`~.base.Framework` subclass with ``name`` (the report key),
   ``title`` (what users read) and ``module`` (the import that triggers it); ``variables``,
   :meth:`~.base.Framework.environment` and :meth:`~.base.Framework.for_installed` if it reads
   its limit from the environment (with the release rules, citing their source in docs/gpu.md);
   :meth:`~.base.Framework.configure` (must not create a CUDA context) and what it can answer
   (devices, memory, out-of-memory errors, resize).
2. Add an instance to :data:`FRAMEWORKS` and its module to ``kernel.startup.FRAMEWORK_MODULES``
   (which cannot import this registry: it runs in every sliced process's start).
3. ``tests/test_frameworks.py`` checks every registered framework against the contract; add a
   test with the real framework (CPU build) in ``tests/kernel/`` and a GPU test in ``tests/gpu/``.

Adapters receive the framework module from the post-import hook (or from ``sys.modules``);
none of them imports a framework. Their methods may raise: :mod:`..hooks` and the magics
turn any failure into a record or a "not available" line, never into a broken import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .base import Framework
from .cupy import CuPy
from .jax import JAX
from .pytorch import PyTorch
from .tensorflow import TensorFlow

if TYPE_CHECKING:
    from .base import ProcessState
    from .records import FrameworkRecord

#: Every framework the kernel layer configures, in the order ``%vgpu`` lists them.
FRAMEWORKS: tuple[Framework, ...] = (TensorFlow(), PyTorch(), JAX(), CuPy())


def by_name(name: str) -> Framework:
    """The adapter whose report key is ``name`` (``tensorflow``, ``torch``, ``jax``, ``cupy``)."""
    for framework in FRAMEWORKS:
        if framework.name == name:
            return framework
    raise KeyError(name)


#: What differs on simulated GPUs when a burst is asked back: the simulation counts what the
#: frameworks' tensors hold now (:meth:`.base.Framework.simulated_memory`), where a real GPU counts
#: what their allocators took from the driver, which TensorFlow and JAX keep until the process ends.
SIMULATED_GIVE_BACK = (
    "on these simulated GPUs only what the frameworks' tensors hold in the host's memory counts, so deleting "
    "them (del, then gc.collect()) gives it back"
)


def give_back(state: ProcessState) -> list[str]:
    """Ask every imported framework to release what it caches (a burst asked back); what each
    did, in words. On simulated GPUs a framework that keeps what it grew to until a restart says
    that this is so on a real GPU, and :data:`SIMULATED_GIVE_BACK` what differs here. Never raises."""
    said = []
    simulated = False
    for framework, module in imported(state):
        try:
            done = framework.give_back(module)
        except Exception as error:
            done = f"{framework.title} could not release its cache ({type(error).__name__})"
        if done and framework.keeps_until_restart and state.facts.simulate:
            done, simulated = f"on a real GPU, {done}", True
        if done:
            said.append(done)
    return [*said, SIMULATED_GIVE_BACK] if simulated else said


def imported(state: ProcessState) -> list[tuple[Framework, Any]]:
    """The frameworks the user has imported, with their modules."""
    found = []
    for framework in FRAMEWORKS:
        module = state.imported(framework.module)
        if module is not None:
            found.append((framework, module))
    return found


def revisit(state: ProcessState, step: Literal["refresh", "reapply"]) -> dict[str, FrameworkRecord]:
    """Run ``step`` of every configured framework the user has imported; returns the new records
    (a step that raises becomes a failed record, never an exception in the user's cell)."""
    from .records import FAILED, FrameworkRecord

    changed: dict[str, FrameworkRecord] = {}
    for framework, module in imported(state):
        if framework.name not in state.records:
            continue
        try:
            record = getattr(framework, step)(module, state)
        except Exception as error:
            record = FrameworkRecord(framework.title, FAILED, f"{type(error).__name__}: {error}")
        if record is not None:
            changed[framework.name] = record
    return changed


def framework_memory(state: ProcessState) -> tuple[int | None, int | None]:
    """GPU memory the imported frameworks say they hold now and at peak (None: nobody can tell)."""
    used: int | None = None
    peak: int | None = None
    for framework, module in imported(state):
        try:
            now, most = framework.memory(module)
        except Exception:
            continue
        if now is not None:
            used = (used or 0) + now
        if most is not None:
            peak = (peak or 0) + most
    return used, peak


__all__ = ["FRAMEWORKS", "SIMULATED_GIVE_BACK", "Framework", "by_name", "framework_memory", "give_back", "imported", "revisit"]
