"""The adapter contract every framework module implements: both halves of fitting a framework into
a slice (the variables a process starts with, and the import hook), its words and version rules."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .records import FrameworkRecord


class SliceFacts(Protocol):
    """What an adapter reads of the slice (``kernel.state.SliceFacts`` has it, from the environment)."""

    @property
    def sliced(self) -> bool: ...
    @property
    def memory_limit(self) -> int | None: ...
    @property
    def burst_limit(self) -> int | None: ...
    @property
    def framework_limit(self) -> int | None: ...
    @property
    def logical_devices(self) -> int: ...
    @property
    def simulate(self) -> str: ...  # the simulated GPUs' spec; empty on real GPUs


class ProcessState(Protocol):
    """What an adapter reads and writes of its process (``kernel.state.KernelState`` is one): the
    adapters sit below the kernel layer and know it only by this."""

    @property
    def facts(self) -> SliceFacts: ...
    @property
    def records(self) -> dict[str, FrameworkRecord]: ...
    def record(self, name: str, record: FrameworkRecord) -> None: ...
    def imported(self, module_name: str) -> Any: ...


#: What the allocator guard unset in this process or a parent ("TF_GPU_ALLOCATOR=cuda_malloc_async,..."),
#: so %vgpu and the reports can say so.
GUARDED = "JUPYTER_VGPU_GUARDED"


def guarded_after(env: Mapping[str, str], removed: list[str]) -> str:
    """:data:`GUARDED` once ``removed`` ("NAME=value" items) are added to what ``env`` says."""
    seen = [item for item in env.get(GUARDED, "").split(",") if item]
    return ",".join(dict.fromkeys([*seen, *removed]))


def guard_now(framework: Framework, env: MutableMapping[str, str]) -> str:
    """Unset in ``env`` the allocator settings that would make ``framework``'s limit a mere
    threshold, add them to :data:`GUARDED`, and say so (empty when there was none)."""
    removed = []
    for name, value in framework.bypassing(env).items():
        env.pop(name, None)
        removed.append(f"{name}={value}")
    if not removed:
        return ""
    env[GUARDED] = guarded_after(env, removed)
    return f"{', '.join(removed)} unset: {framework.bypass_reason}"


class Framework(ABC):
    """How jupyter-vgpu fits one framework into the kernel's slice.

    Subclasses set ``name`` (the report key), ``title`` (what users read) and ``module`` (the
    module whose import triggers :meth:`configure`), and override what they can answer.
    """

    name = ""
    title = ""
    module = ""
    #: The environment variables :meth:`environment` and :meth:`for_installed` may set: a process
    #: that gets a slice starts without any inherited one (``slices.environment.without_slice``).
    variables: tuple[str, ...] = ()
    #: Allocator settings under which this framework's limit is no longer a cap (variable ->
    #: values, lower case); a slice's processes run without them (the allocator guard).
    bypasses: Mapping[str, frozenset[str]] = {}
    #: Why, in words, for %vgpu.
    bypass_reason = ""
    #: Its allocator keeps what it grew to until the process ends (what :meth:`give_back` says, of
    #: a real GPU; on simulated GPUs, which count its tensors, deleting them gives memory back).
    keeps_until_restart = False

    def bypassing(self, env: Mapping[str, str]) -> dict[str, str]:
        """The settings of ``env`` that :attr:`bypasses` names, with their values."""
        return {name: env[name] for name, values in self.bypasses.items() if env.get(name, "").strip().lower() in values}

    # -- the environment half: read before the framework starts (also by child processes) ----
    def environment(self, limit: int, fraction: str) -> dict[str, str]:
        """The variables of a process holding a slice: ``limit`` bytes per GPU for frameworks,
        ``fraction`` the same limit as a share of the smallest device ("0.231", rounded down)."""
        return {}

    def for_installed(
        self, env: Mapping[str, str], fraction: str, versions: Callable[[str], str | None]
    ) -> dict[str, str | None]:
        """What to change in a slice's ``env`` (None: unset) for the release of this framework
        installed here (``versions(distribution)``, None when not installed)."""
        return {}

    def would_give(self, limit: int, fraction: str, logical_devices: int) -> str:
        """The limit this framework gets from a slice on a real GPU, in words (``%vgpu`` shows it
        on simulated GPUs, where the framework sees no GPU to limit)."""
        return ""

    # -- the import half ---------------------------------------------------------------------

    @abstractmethod
    def configure(self, module: Any, state: ProcessState) -> FrameworkRecord:
        """Called by the post-import hook right after the user's import of ``module``
        (or at once if it was imported before the extension loaded). Must not create a CUDA
        context. Returns what was applied; may raise (the hook records the failure)."""

    def holds_gpu(self, module: Any) -> str | None:
        """Why the slice can no longer change under this framework (a sentence), or None
        while a resize would still take effect. Called by ``%vgpu resize``."""
        return f"{self.title} is imported and was configured for the current size."

    def reapply(self, module: Any, state: ProcessState) -> FrameworkRecord | None:
        """After a resize that :meth:`holds_gpu` allowed: move the limit to the new size.
        Returns the new record, or None when nothing needs doing."""
        return None

    def give_back(self, module: Any) -> str | None:
        """Release what the framework caches but no tensor holds, when the server asks for a
        burst back (issue 42). Returns what was done (or why nothing can be) as a clause, or
        None when there was nothing to release."""
        return None

    def refresh(self, module: Any, state: ProcessState) -> FrameworkRecord | None:
        """Called before ``%vgpu`` shows the records: a chance to finish work that waited for
        the framework (e.g. a limit that needs CUDA). Returns a new record or None."""
        return None

    def devices(self, module: Any) -> list[str]:
        """The devices the framework sees, one line each, without initialising it."""
        return []

    def memory(self, module: Any) -> tuple[int | None, int | None]:
        """Bytes of GPU memory the framework holds now and at peak, where that is cheap and
        needs no initialisation; ``(None, None)`` otherwise."""
        return None, None

    # -- on simulated GPUs ----------------------------------------------------------------------
    def simulated_environment(self) -> dict[str, str]:
        """Variables a process holding a slice of simulated GPUs starts with, so that this
        framework can tell what it holds in host memory (:meth:`simulated_memory`)."""
        return {}

    def simulated_memory(self, module: Any) -> int | None:
        """On simulated GPUs (where the framework's tensors live in host memory): the bytes it
        holds now, which count as the process's use of its simulated GPUs. Only where that is
        cheap (well under a millisecond; it is asked every second) and starts nothing; None when
        the framework cannot tell."""
        return None

    def oom_errors(self, module: Any) -> tuple[type[BaseException], ...]:
        """The framework's out-of-memory exception classes."""
        return ()

    def is_oom(self, error: BaseException) -> bool:
        """True if ``error`` (one of :meth:`oom_errors`) really is an out-of-memory error."""
        return True


def release(text: str | None) -> tuple[int, ...]:
    """``"2.10.0+cpu"`` -> ``(2, 10, 0)``, ``"2.10.0rc1"`` -> ``(2, 10, 0)``; ``()`` when unknown."""
    match = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()
