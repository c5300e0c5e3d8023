"""The ledger contract: what every ledger does, whoever keeps it.

Two implementations, siblings, and callers never know which one they hold (``open_ledger``
picks): :class:`~.sqlite.SQLiteLedger`, the user's own SQLite file, and
:class:`~.broker_client.BrokerLedger`, the client of the node broker (``jupyter vgpu broker``), which
owns the node's SQLite file and applies the admins' quotas. The broker serves the same
operations over its socket, named in :data:`OPERATIONS`.

What a caller may change is decided once, by the ledger that keeps the file: a user changes
their own slices and places in line; root (and the broker's admins) any.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import LeftLine, NeverFits, RequesterGone, SliceUnavailable, VGPUError
from ..slices.records import Holder, Slice, Ticket, Waiter
from ..slices.refusal import after_waiting
from ..slices.request import SliceRequest

if TYPE_CHECKING:
    from ..gpus import Inventory

#: The contract's operations that the broker serves, by their wire names (the method names).
#: Reading: slices, get, waiting, book_id. Reserving: reserve_now, enqueue, try_grant, leave_queue.
#: Holding: attach, update_labels, resize, release, claim, rebook. Housekeeping: reap, overcommitted.
#: How long a request that only kernels' bursts keep out waits in line for them even when it
#: asked not to wait (issue 42: never refused because of a burst): their servers' notice
#: (``burst_reclaim_notice``, 60 s by default) and a restart, with room to spare.
BURST_WAIT_SECONDS = 300.0

OPERATIONS = (
    "slices",
    "get",
    "waiting",
    "reserve_now",
    "enqueue",
    "try_grant",
    "leave_queue",
    "attach",
    "join_hold",
    "update_labels",
    "resize",
    "release",
    "reap",
    "overcommitted",
    "book_id",
    "claim",
    "rebook",
)


class Ledger(ABC):
    """Reserve, wait in line for, hold, resize and release GPU slices.

    Attributes every ledger has: ``path`` (the user's ledger path; kernels write their reports
    beside it), ``inventory`` (the GPUs, as this ledger sees them), ``context_allowance`` (bytes
    counted inside each slice for the CUDA context; None: by each GPU's compute capability, and
    each slice records the allowance it got) and ``poll_interval`` (seconds between two attempts
    of a request waiting in line).
    """

    path: Path
    inventory: Inventory
    context_allowance: int | None
    poll_interval: float

    @abstractmethod
    def location(self) -> str:
        """Where slices are kept, for headers: ``ledger /path/ledger.sqlite``."""

    def check_split(self) -> str | None:
        """Check that this process writes the same book as every other process (a SQLite file
        can split when something drops SQLite's locks); repair it if not. Returns what was
        wrong, or None. Nothing to check for a ledger kept by someone else (the broker)."""
        return None

    # -- reading --------------------------------------------------------------------------
    @abstractmethod
    def slices(self) -> list[Slice]:
        """Every slice, oldest first."""

    @abstractmethod
    def get(self, slice_id: str) -> Slice:
        """The slice with exactly this id (or a unique prefix of 6+ characters).

        Raises :class:`~jupyter_vgpu.errors.SliceNotFound`."""

    @abstractmethod
    def waiting(self) -> list[Waiter]:
        """Requests waiting in line, first in line first."""

    @abstractmethod
    def book_id(self) -> str:
        """Which book this is: it changes when the ledger is made afresh (``jupyter vgpu gc
        --reset-ledger``) or emptied, and so drops every slice, also those of processes that
        still run. A Jupyter server that sees it change books its running kernels' slices again
        (:meth:`rebook`)."""

    # -- reserving -------------------------------------------------------------------------
    @abstractmethod
    def reserve_now(self, request: SliceRequest, holder: Holder) -> Slice:
        """Reserve a slice if it fits now (and nobody waits in line before it); raises
        :class:`SliceUnavailable` saying what is free where and who holds it; :class:`NoGPU`
        when there is no GPU at all."""

    @abstractmethod
    def enqueue(self, request: SliceRequest, holder: Holder) -> Ticket:
        """Take a place in line; :meth:`try_grant` then turns it into a slice."""

    @abstractmethod
    def try_grant(self, ticket: Ticket, *, final: bool = True) -> Slice | None:
        """Grant the ticket's slice if it is first in line and fits; None while it should wait.
        Raises :class:`SliceUnavailable` when ``final`` and it does not fit, or when no amount
        of waiting can help (and then it has left the line). A ticket with its request's token,
        asked again after its slice was granted (the answer was lost), gets that slice."""

    @abstractmethod
    def leave_queue(self, ticket: Ticket) -> None:
        """Give up a place in line (nothing happens once granted or gone)."""

    # -- holding -------------------------------------------------------------------------------
    @abstractmethod
    def attach(self, slice_id: str, pid: int) -> Slice:
        """Make process ``pid`` the holder whose life keeps the slice (e.g. the kernel, once started)."""

    @abstractmethod
    def join_hold(self, slice_id: str, pid: int) -> str:
        """Put process ``pid`` into the hold of its slice's tier (:meth:`~jupyter_vgpu.enforcement.base.Enforcement.join`:
        the MPS memory-partitioning tier's cgroup, made where it is missing); returns where it is.
        Only the slice's owner (root: any); the broker takes only the asking process itself."""

    @abstractmethod
    def update_labels(self, slice_id: str, labels: Mapping[str, str | None]) -> Slice:
        """Merge labels into the slice's (None removes one), e.g. the notebook path."""

    @abstractmethod
    def resize(self, slice_id: str, request: SliceRequest) -> Slice:
        """Change the slice's share on the GPUs it already has (the caller checks that no
        framework has allocated yet); raises :class:`SliceUnavailable` if it does not fit there."""

    @abstractmethod
    def release(self, slice_id: str) -> Slice:
        """Free a slice; returns what it was."""

    @abstractmethod
    def claim(self, slice_id: str) -> str:
        """The slice's claim (:mod:`.claims`): what its holder keeps to book it again after a
        reset. Only the user it was granted to gets one (:class:`NotPermitted` otherwise, root too)."""

    @abstractmethod
    def rebook(self, record: Slice, claim: str, split: bool = False) -> Slice:
        """Book again a slice a running process still holds but the ledger lost: the same id,
        holder, GPUs and memory on each, for this ledger's actor, with the tier this ledger gives
        those GPUs now. Only with the slice's ``claim`` for the actor (:class:`NotPermitted`
        otherwise: an id is no proof), only in the seconds after a reset while new slices wait
        (``schema.RESET_GRACE``), or after this process's writes were lost to a ``split`` of the
        user's own file; refused (:class:`SliceUnavailable`) when it would over-commit a GPU or a
        GPU is gone, and (:class:`NotPermitted`) when the id is booked for another holder. Booking
        one that is already there returns it. A broker counts it against the caller's quotas like
        any request."""

    # -- housekeeping ---------------------------------------------------------------------------
    @abstractmethod
    def reap(self) -> list[Slice]:
        """Free the slices (and places in line) of holders that are no longer running."""

    @abstractmethod
    def overcommitted(self) -> list[tuple[str, int, int]]:
        """GPUs whose reservations exceed their capacity, ``(uuid, reserved, total)``, read from
        the file itself: always empty unless something is badly wrong."""

    def close(self) -> None:
        """Let go of what the ledger holds open (nothing, for a broker client)."""
        return None

    # -- built on the operations above ------------------------------------------------------
    def named(self, request: SliceRequest) -> SliceRequest:
        """``request`` with its pinned GPU named by index, as every view names GPUs
        (:meth:`SliceRequest.pin_named`): what this ledger says and stores of it. Unchanged
        without a pin, or when the GPUs cannot be read now (the reservation says why)."""
        if request.gpu is None or request.gpu_index is not None:
            return request
        try:
            return request.pin_named(self.inventory.snapshot())
        except (VGPUError, OSError):
            return request

    def reserve(
        self, request: SliceRequest, holder: Holder, *, wait: float = 0.0, waiting: Callable[[Ticket], None] | None = None
    ) -> Slice:
        """Reserve now, or wait in line (first come, first served) up to ``wait`` seconds;
        ``waiting`` hears about each attempt that has to go on waiting.

        For code without an event loop to give (a command, a notebook cell); on a loop use
        :meth:`reserve_async`. Both wait in :meth:`wait_in_line`."""
        request = self.named(request)
        if wait <= 0:
            try:
                return self.reserve_now(request, holder)
            except SliceUnavailable as error:
                if not burst_held(error):
                    raise
                wait = BURST_WAIT_SECONDS
        return run_blocking(lambda: self.reserve_async(request, holder, wait=wait, waiting=waiting))

    async def reserve_async(
        self,
        request: SliceRequest,
        holder: Holder,
        *,
        wait: float = 0.0,
        waiting: Callable[[Ticket], None] | None = None,
    ) -> Slice:
        """:meth:`reserve` for an event loop (the provisioner's): the blocking calls run on
        worker threads and the wait between attempts is the loop's, so a server that stops
        cancels a waiting start and the request leaves the line. ``waiting`` hears about each
        attempt that has to go on waiting."""
        if request.gpu is not None:  # reads the GPUs: not on the loop
            request = await asyncio.to_thread(self.named, request)
        if wait <= 0:
            try:
                return await asyncio.to_thread(self.reserve_now, request, holder)
            except SliceUnavailable as error:
                if not burst_held(error):
                    raise
                wait = BURST_WAIT_SECONDS  # kept out by bursts only: they are given back to a request in line

        def grant(ticket: Ticket, final: bool) -> Slice | None:
            return self.try_grant(ticket, final=final)

        return await self.wait_in_line(request, holder, grant, wait=wait, waiting=waiting)

    async def wait_in_line(
        self,
        place: SliceRequest,
        holder: Holder,
        attempt: Callable[[Ticket, bool], Slice | None],
        *,
        wait: float,
        waiting: Callable[[Ticket], None] | None = None,
        wanted: str | None = None,
    ) -> Slice:
        """The one waiting-in-line loop. It takes a place in line for ``place`` (what the request
        lacks, judged as the caller's request: quotas, places per user; what the servers' reclaim
        sees and gives room back for), then makes ``attempt(ticket, final)`` every
        :attr:`poll_interval` until it returns a slice; the last attempt, at ``wait`` seconds, is
        ``final`` and raises the refusal. A new slice's attempt is its turn (:meth:`try_grant`);
        a resize's is the resize itself. Cancelling it (a server that stops, an interrupted cell:
        :func:`run_blocking`) leaves the line. ``wanted`` names the request in what is said
        (``place`` by default)."""
        described = wanted or place.describe()
        ticket = await asyncio.to_thread(self.enqueue, place, holder)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        try:
            while True:
                final = loop.time() >= deadline
                granted = await asyncio.to_thread(attempt, ticket, final)
                if granted is not None:
                    return granted
                if waiting is not None:
                    waiting(ticket)
                await asyncio.sleep(min(self.poll_interval, max(0.0, deadline - loop.time())) or 0.01)
        except RequesterGone:
            raise  # said by whoever saw the requester go
        except LeftLine:
            waited = wait - max(0.0, deadline - loop.time())
            raise LeftLine(
                f"Stopped waiting in line for {described} after {waited:.0f} s: the place in line was cancelled."
            ) from None
        except NeverFits:
            raise  # no wait could help: said as it is, without "Waited 0 s in line"
        except SliceUnavailable as error:
            # what it waited: the whole wait, or less when the line ended it sooner (a broker's max_wait)
            waited = wait if loop.time() >= deadline else round(wait - (deadline - loop.time()), 1)
            text, detail = str(error), error.detail
            if detail is not None:
                text, advice = after_waiting(text, list(detail.get("advice") or []), waited)
                detail = {**detail, "waited": waited, "advice": advice}
            waited_for = "" if described in text else f" for {described}"  # said once: the refusal names it
            raise type(error)(f"Waited {waited:g} s in line{waited_for}. {text}", detail=detail) from None
        finally:
            await asyncio.shield(asyncio.to_thread(self.leave_queue, ticket))


T = TypeVar("T")


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one of the ledger's waits to its end for blocking code: with ``asyncio.run`` where the
    thread has no event loop (a command), else on a loop of its own on another thread (a notebook
    cell runs inside its kernel's loop, which this wait must not hold up). Ctrl-C, or a kernel's
    interrupt, cancels the wait (so its place in line is left) and is raised again."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    loop = asyncio.new_event_loop()
    task = loop.create_task(make())
    ended: list[BaseException] = []
    done = threading.Event()  # not Thread.join: an interrupted join can leave the thread marked ended (3.11)

    def run() -> None:
        try:
            loop.run_until_complete(task)
        except BaseException as error:  # said where the caller waits, below
            ended.append(error)
        finally:
            loop.close()
            done.set()

    threading.Thread(target=run, name="jupyter-vgpu wait in line", daemon=True).start()
    try:
        while not done.wait(0.1):  # the main thread hears an interrupt between waits
            pass
    except KeyboardInterrupt:
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:
            pass  # the wait had just ended
        done.wait()  # it leaves the line
        raise
    if ended:
        raise ended[0]
    return task.result()


def burst_held(error: SliceUnavailable) -> bool:
    """Whether only kernels' bursts keep the request out (the refusal's ``burst_held``)."""
    return not isinstance(error, NeverFits) and bool(error.detail and error.detail.get("burst_held"))
