"""What the kernel layer records about each framework: the result type of the framework adapters.

Its own module, below both the adapters and the kernel's state, so neither imports the other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

#: Statuses a framework record can have, in the words the report and ``%vgpu`` use.
APPLIED = "applied"  # the framework's limit is set to the slice
PENDING = "pending"  # set up to apply when the framework initialises CUDA (PyTorch)
TOO_LATE = "too-late"  # the framework had initialised before the hook ran: no limit
SKIPPED = "skipped"  # nothing to do (no GPU for it to see, CPU-only build...)
FAILED = "failed"  # the hook raised; the user's import went on without a limit
RECORDED = "recorded"  # configured by environment variables set before start (JAX)


@dataclass
class FrameworkRecord:
    """What happened to one framework in this kernel."""

    title: str
    status: str
    detail: str
    preloaded: bool = False  # imported before the extension loaded
    updated: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "preloaded": self.preloaded}
