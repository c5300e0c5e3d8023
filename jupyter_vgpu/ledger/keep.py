"""Keeping a running holder's slice in the book: a process that holds a slice and has no Jupyter
server watching it (``jupyter vgpu run``) checks every few seconds which book its slice is in, and
when an admin reset the ledger (a new book id) books its slice again with its claim, within the
seconds the reset keeps new slices waiting (``schema.RESET_GRACE``). What happened is said to the
holder (``say``): booked again, or why not, so a command never runs unbooked in silence."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from ..errors import SliceNotFound, VGPUError
from ..slices.records import Slice
from .contract import Ledger

#: Seconds between two looks at the book: well inside the reset's grace (10 s).
EVERY = 1.0


class KeepBooked:
    """Watch ``slice_``'s book from a daemon thread while the holder runs; :meth:`stop` ends it."""

    def __init__(self, ledger: Ledger, slice_: Slice, say: Callable[[str], None], *, every: float = EVERY) -> None:
        self.ledger = ledger
        self.slice = slice_
        self.say = say
        self.every = every
        #: The process that holds the slice now (``attach`` moved it); the keeper is this process.
        self.pid = slice_.pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jupyter-vgpu-keep-booked", daemon=True)
        self._claim = ""
        self._book = ""

    def start(self) -> KeepBooked:
        try:
            self._claim = self.ledger.claim(self.slice.id)
            self._book = self.ledger.book_id()
        except VGPUError as error:  # a broker of a release before claims: nothing to keep it with
            self.say(f"this slice cannot be booked again if the ledger is reset ({error})")
            return self
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                book = self.ledger.book_id()
                if book == self._book:
                    continue
                self._book = book
                if self._is_booked():
                    continue
                record = replace(self.slice, pid=self.pid)
                booked = self.ledger.rebook(record, self._claim)
            except VGPUError as error:
                if self._stop.is_set():
                    return  # the command ended meanwhile: its slice needs no booking
                self.say(
                    f"the ledger was reset and slice {self.slice.id} could not be booked again: {error} Its GPU memory "
                    "is no longer reserved for this command; run it again to get a slice."
                )
                return
            self.slice = booked
            self.say(f"the ledger was reset; slice {booked.id} ({booked.request.describe()}) is booked again.")

    def _is_booked(self) -> bool:
        """Whether the book has the slice as this holder's (the same id, user and holder)."""
        try:
            found = self.ledger.get(self.slice.id)
        except SliceNotFound:
            return False
        return (found.id, found.uid, found.holder_kind, found.holder) == (
            self.slice.id, self.slice.uid, self.slice.holder_kind, self.slice.holder,
        )  # fmt: skip
