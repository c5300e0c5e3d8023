"""A kernel start waiting in line for its slice, as the server log says it, and as the start
ends when whoever asked for it is gone (a page reloaded or closed while its kernel waited)."""

from __future__ import annotations

import time
from typing import Any

from ..errors import RequesterGone
from ..slices import Ticket
from .refusals import START_REQUEST


class LineLog:
    """What the server log says of a kernel start waiting in line: one line as it joins (with why
    it waits), one as it leaves, never a line per attempt (four a second flooded the log)."""

    def __init__(self, log: Any, kernel_id: str, asked: str) -> None:
        self.log = log
        self.kernel_id = kernel_id
        self.asked = asked
        self.joined: float | None = None

    def __call__(self, ticket: Ticket) -> None:
        self.asked = ticket.request.describe()  # as the ledger took it (a pinned GPU named by index)
        start = START_REQUEST.get()
        if start is not None and start.gone():  # a page that reloaded or closed while its kernel waited
            self.log.info("Kernel %s stopped waiting in line for %s: the page that asked for it is gone.", self.kernel_id, self.asked)
            self.joined = None
            raise RequesterGone(f"Stopped waiting in line for {self.asked}: the page that asked for this kernel is gone.")
        if self.joined is not None:
            return
        self.joined = time.monotonic()
        why = (ticket.last_reason or "").splitlines()[0] if ticket.last_reason else "the GPUs are full"
        self.log.info("Kernel %s waits in line for %s (place %s): %s", self.kernel_id, self.asked, ticket.number, why)

    def left(self, how: str) -> None:
        if self.joined is not None:
            waited = time.monotonic() - self.joined
            self.log.info("Kernel %s left the line after %.0f s, %s.", self.kernel_id, waited, how)
            self.joined = None
