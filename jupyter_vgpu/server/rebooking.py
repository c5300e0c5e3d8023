"""Booking this server's kernels' slices again when the ledger lost them: an admin reset it
(``jupyter vgpu gc --reset-ledger``: a new book id) or this process's writes were lost to a split.

A kernel's slice counts as there only as its own (its id, for this user, held for this kernel): an
id alone proves nothing, since every user sees every id. Each kernel's claim is asked once, when
its slice is first seen (:mod:`jupyter_vgpu.ledger.claims`), and brought to the rebook. A kernel
whose slice cannot be booked again is told at its next cell (``take_untold``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from ..errors import NotPermitted, VGPUError
from ..gpus import Snapshot
from ..ledger import Ledger
from ..slices import Slice
from ..slices.holders import Attribution
from ..slices.usage import SliceUsage, slice_usage


class Rebooking:
    """The monitor's rebook step, with what it remembers between ticks."""

    def __init__(self, ledger: Ledger, *, uid: int, server_pid: int, log: logging.Logger) -> None:
        self.ledger = ledger
        self.uid = uid
        self.server_pid = server_pid
        self.log = log
        self._book: str | None = None  # the ledger's book id at the last tick (a new one: it was reset)
        self._kernel_slices: dict[str, Slice] = {}  # kernel id -> the slice it held at the last tick
        self._claims: dict[str, str] = {}  # their claims (what books them again after a reset)
        self._untold: list[tuple[SliceUsage, str]] = []  # kernels whose slice was not booked again
        self._unbooked: dict[str, str] = {}  # kernel id -> the slice id it still runs with, not booked again

    def unbooked(self) -> set[str]:
        """The slice ids this server's running kernels still have though the ledger lost them:
        their reports and notices are the kernel's until it ends (the provisioner removes them)."""
        return set(self._unbooked.values())

    def take_untold(self) -> list[tuple[SliceUsage, str]]:
        """The kernels to tell that their slice is gone, and what; each once."""
        untold, self._untold = self._untold, []
        return untold

    def step(
        self, slices: list[Slice], kernel_pids: Mapping[str, int | None] | None, split: str | None, snapshot: Snapshot
    ) -> list[Slice]:
        """Book again the slices of this server's running kernels that the ledger lost: it was
        made afresh (``gc --reset-ledger``: its book id changed) or this process's writes were
        lost to a split. Each keeps its id, GPUs and sizes, while new slices wait a few seconds
        after a reset (``store.RESET_GRACE``). A slice released on purpose while the book stayed
        the same is left alone. A kernel whose slice cannot be booked again is told."""
        if kernel_pids is None:
            return slices
        self._unbooked = {k: sid for k, sid in self._unbooked.items() if k in kernel_pids}
        # a kernel's slice is there only as its own: its id, for this user, held for this kernel
        present = {(s.id, s.holder) for s in slices if s.uid == self.uid and s.holder_kind == "kernel"}
        missing = [(k, kept) for k, kept in self._kernel_slices.items() if (kept.id, k) not in present and k in kernel_pids]
        lost = reset = False
        if missing:  # released on purpose, or lost with the book: its id tells (asked only now: a broker answers over its socket)
            book = self.ledger.book_id()
            reset = self._book is not None and book != self._book
            lost = split is not None or reset
            self._book = book
        taken = {s.id for s in slices}
        # A new book is a reset, though this process may have met it as a split too (`gc --reset-ledger`
        # moves aside, or SQLite's check of the damaged file deletes, the log this process had open).
        why = "was reset" if reset or split is None else "split from this server's"
        for kernel_id, kept in missing:
            pid = kernel_pids.get(kernel_id) or self.server_pid  # the server holds it during a restart
            try:
                if not lost:
                    if kept.id not in taken:
                        continue  # released on purpose (a shutdown, `jupyter vgpu release`, an admin)
                    raise NotPermitted(f"Slice {kept.id} is booked for another holder now.")
                claim = self._claims.get(kept.id, "")
                slices.append(self.ledger.rebook(replace(kept, pid=pid), claim, split=split is not None))
            except VGPUError as error:
                self.log.warning(
                    "jupyter-vgpu: slice %s of %s could not be booked again after the ledger %s: %s",
                    kept.id, kept.describe_holder(), why, error,
                )  # fmt: skip
                message = (
                    f"the ledger {why} and this kernel's GPU slice could not be booked again: {error} Its GPU memory "
                    "is no longer reserved for it; restart the kernel to get a slice."
                    if lost else
                    f"this kernel's GPU slice id is held by someone else now ({error}); its GPU memory is no longer "
                    "reserved for it: restart the kernel to get a slice."
                )  # fmt: skip
                self._untold.append((slice_usage(kept, pid, Attribution(), snapshot, None), message))
                self._unbooked[kernel_id] = kept.id
            else:
                self.log.info(
                    "jupyter-vgpu: booked slice %s of %s (%s on GPU %s) again: the ledger %s.",
                    kept.id, kept.describe_holder(), kept.request.describe(),
                    ", ".join(map(str, kept.gpu_indices)), why,
                )  # fmt: skip
        held = {s.holder: s for s in slices if s.holder_kind == "kernel" and s.holder in kernel_pids and s.uid == self.uid}
        if not held:
            self._book = None  # read afresh when this server's kernels hold slices again
        elif self._book is None:
            self._book = self.ledger.book_id()  # the book these slices are in
        self._kernel_slices = held
        self._claims = {s.id: self._claims[s.id] if s.id in self._claims else self._claim(s.id) for s in held.values()}
        return slices

    def _claim(self, slice_id: str) -> str:
        """The claim of this server's kernel's slice, asked once: what books it again after a reset."""
        try:
            return self.ledger.claim(slice_id)
        except VGPUError as error:  # a broker of a release before claims; a key that is not the keeper's
            self.log.warning("jupyter-vgpu: no claim for slice %s, so it cannot be booked again after a reset: %s", slice_id, error)
            return ""

