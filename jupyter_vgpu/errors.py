"""Errors a user can cause, each with a message that names the value and the fix.

Every layer raises these; every front end (CLI, provisioner, REST, magics) shows
``str(error)`` alone, never a traceback.
"""

from __future__ import annotations

from typing import Any


class VGPUError(Exception):
    """Base class for mistakes and refusals a user can act on."""


class InvalidRequest(VGPUError, ValueError):
    """A slice request (fraction, memory, GPU count, pinned GPU...) is malformed."""


class InvalidConfig(VGPUError, ValueError):
    """A configuration value (env var, traitlet, simulation file) is malformed."""


class SliceUnavailable(VGPUError):
    """The request is valid but does not fit now (and waiting did not help).

    ``detail`` is the structured explanation (``Refusal.to_dict``) when one was made."""

    def __init__(self, message: str = "", detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class NoGPU(SliceUnavailable):
    """There is no GPU to reserve on at all (no driver, no device): kernels may start on the CPU."""


class NeverFits(SliceUnavailable):
    """The request can never be placed on these GPUs (more than any GPU holds, more GPUs than the
    machine has): waiting or trying again cannot help, so ``jupyter vgpu run`` exits 69, not 75."""


class LeftLine(SliceUnavailable):
    """A place in line that is gone before it was granted: cancelled, or its process ended."""


class RequesterGone(LeftLine):
    """Whoever asked for the slice stopped waiting for it (a page reloaded or closed while its
    kernel waited in line): the request leaves the line and nothing is booked for it."""


class SliceNotFound(VGPUError, KeyError):
    """No slice with that id exists in the ledger."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "slice not found"


class NotPermitted(VGPUError, PermissionError):
    """The caller may not act on this slice (another user's) or exceeded a policy limit."""


class LedgerError(VGPUError):
    """The ledger file cannot be used (corrupt, unreadable, newer schema)."""


class LedgerBusy(LedgerError):
    """Another process has held the writers' turn longer than this one waits (it is stopped
    or hung); nothing was changed: try again later."""
