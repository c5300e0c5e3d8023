"""The adapter contract every framework module implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..records import FrameworkRecord
    from ..state import KernelState


class Framework(ABC):
    """How jupyter-vgpu fits one framework into the kernel's slice.

    Subclasses set ``name`` (the report key), ``title`` (what users read) and ``module`` (the
    module whose import triggers :meth:`configure`), and override what they can answer.
    """

    name = ""
    title = ""
    module = ""

    @abstractmethod
    def configure(self, module: Any, state: KernelState) -> FrameworkRecord:
        """Called by the post-import hook right after the user's import of ``module``
        (or at once if it was imported before the extension loaded). Must not create a CUDA
        context. Returns what was applied; may raise (the hook records the failure)."""

    def holds_gpu(self, module: Any) -> str | None:
        """Why the slice can no longer change under this framework (a sentence), or None
        while a resize would still take effect. Called by ``%vgpu resize``."""
        return f"{self.title} is imported and was configured for the current size."

    def reapply(self, module: Any, state: KernelState) -> FrameworkRecord | None:
        """After a resize that :meth:`holds_gpu` allowed: move the limit to the new size.
        Returns the new record, or None when nothing needs doing."""
        return None

    def refresh(self, module: Any, state: KernelState) -> FrameworkRecord | None:
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

    def oom_errors(self, module: Any) -> tuple[type[BaseException], ...]:
        """The framework's out-of-memory exception classes."""
        return ()

    def is_oom(self, error: BaseException) -> bool:
        """True if ``error`` (one of :meth:`oom_errors`) really is an out-of-memory error."""
        return True
