"""The errors a kernel start raises, as JupyterLab's "Error Starting Kernel" dialog shows them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tornado.web import HTTPError
from traitlets import TraitError

from ..errors import (
    InvalidConfig,
    InvalidRequest,
    LedgerError,
    LeftLine,
    NoGPU,
    NotPermitted,
    SliceUnavailable,
    VGPUError,
)
from ..units import shorten


class ShownToUser(HTTPError):
    """An error whose message jupyter_server's REST API passes to the user as it is.

    jupyter_server answers any other exception from a kernel start with "Unhandled error" and a
    traceback; for a tornado ``HTTPError`` it sends the message, which JupyterLab then shows in
    its "Error Starting Kernel" dialog.
    """

    status = 500

    def __init__(self, message: str) -> None:
        # jupyter_server's API answers with log_message as it is; keep the message out of args,
        # which tornado would %-format it with.
        HTTPError.__init__(self, self.status, message)
        self.message = message
        #: The id of the refusal recorded for it (``GET /api/vgpu/refusals/<id>``), once recorded.
        self.refusal_id: str | None = None
        self.logged = False  # said in the server log (OneLineRefusals)

    def __str__(self) -> str:
        return self.message


class InvalidKernelConfig(ShownToUser, InvalidRequest, TraitError):
    """A kernelspec or ``c.VGPUProvisioner`` value is not allowed (raised before any reservation)."""

    status = 400


class KernelSliceUnavailable(ShownToUser, SliceUnavailable):
    """No slice for this kernel now (GPUs full, waited too long, no GPU with ``no_gpu="fail"``)."""

    status = 503


class KernelStartRefused(ShownToUser, NotPermitted):
    """A policy (a JupyterHub admin's quota, enforced by the broker) refuses this kernel's slice."""

    status = 403


class KernelStartFailed(ShownToUser, VGPUError):
    """Another jupyter-vgpu problem at kernel start (a bug; the server log has the traceback)."""


class KernelSetupBroken(ShownToUser, VGPUError):
    """jupyter-vgpu's own settings or ledger cannot be used (a bad number, a corrupt ledger)."""

    status = 503


class OneLineRefusals(logging.Filter):
    """A refused start in the server log as one line, not a traceback: jupyter_client logs every
    failed start with ``log.exception`` (its ``in_pending_state``), and a refusal is an answer to
    the user, not a bug (a load run wrote twenty tracebacks). What was a bug was logged whole by
    :func:`as_shown` already."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ShownToUser):
            if error.logged:
                return False  # the multi-kernel manager logs it again
            error.logged = True
            record.exc_info = None
            record.exc_text = None
            record.msg = "jupyter-vgpu: kernel start refused (%s): %s"
            record.args = (error.status, (error.message.splitlines() or [""])[0])
        return True


def as_shown(error: BaseException, log: Any) -> BaseException:
    """The error as the user's kernel-start dialog should show it (one sentence, right status)."""
    if isinstance(error, (ShownToUser, asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
        return error
    if isinstance(error, (InvalidRequest, TraitError)):
        return InvalidKernelConfig(str(error))
    if isinstance(error, SliceUnavailable):
        return KernelSliceUnavailable(str(error))
    if isinstance(error, NotPermitted):
        return KernelStartRefused(str(error))
    if isinstance(error, (InvalidConfig, LedgerError)):
        return KernelSetupBroken(str(error))
    if isinstance(error, VGPUError):
        return KernelStartFailed(str(error))
    log.error("jupyter-vgpu: the kernel start failed", exc_info=error)
    return KernelStartFailed(f"jupyter-vgpu could not start this kernel ({shorten(error)}); the server log has the details.")


def reason(error: BaseException) -> str:
    """Why a start was refused, in one word for front ends: full | timed_out | cancelled |
    no_gpu | policy | config | broken."""
    if isinstance(error, LeftLine):
        return "cancelled"
    if isinstance(error, NoGPU):
        return "no_gpu"
    if isinstance(error, SliceUnavailable):
        return "timed_out" if error.detail is not None and "waited" in error.detail else "full"
    if isinstance(error, NotPermitted):
        return "policy"
    if isinstance(error, (InvalidRequest, TraitError)):
        return "config"
    return "broken"
