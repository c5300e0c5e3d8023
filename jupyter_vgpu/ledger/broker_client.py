"""The ledger behind a node broker: the :class:`~.contract.Ledger` contract over a Unix socket.

When ``JUPYTER_VGPU_BROKER`` names the socket of ``jupyter vgpu broker``, :func:`open_ledger`
returns a :class:`BrokerLedger` instead of opening a SQLite file: the broker owns the node's
ledger, learns who asks from the socket's peer credentials and applies the admins' quotas.

The wire protocol (shapes, errors, what may be asked again) is :mod:`.wire`.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import LedgerError, NotPermitted, SliceUnavailable
from ..gpus import Inventory, Snapshot
from ..slices.records import Holder, Slice, Ticket, Waiter
from ..slices.request import SliceRequest
from .contract import OPERATIONS, Ledger
from .wire import (
    CALLER,
    error_from_wire,
    holder_to_wire,
    peer_credentials,
    read_line,
    safe_to_ask_again,
    slice_from_wire,
    slice_to_wire,
    snapshot_from_wire,
    waiter_from_wire,
)

ENV_BROKER = "JUPYTER_VGPU_BROKER"

#: Where ``jupyter vgpu broker`` listens and keeps the node's ledger unless told otherwise.
DEFAULT_SOCKET = "/run/jupyter-vgpu/broker.sock"
DEFAULT_LEDGER = "/var/lib/jupyter-vgpu/ledger.sqlite"

class NoAnswer(LedgerError):
    """The broker could not be reached or gave no answer: the request may or may not have been
    carried out (asking again with the same holder token finds out)."""


#: How long a client keeps trying to connect while nothing listens (a broker restarting: its
#: supervisor starts it again and Python starts: seconds on a loaded node, 7 s in one
#: reproduction), and keeps asking again a request whose connection broke: after that it says the
#: broker is not running. A broker that listens but is busy (its backlog full, EAGAIN) is tried
#: until the call's own timeout.
RECONNECT_SECONDS = 15.0


class BrokerClient:
    """Sends one request per connection to the broker's socket.

    Connecting waits in the kernel for room in the broker's backlog (another user may flood it)
    up to the call's timeout, and is retried with back-off (10 ms doubling to 0.5 s) while nothing
    listens (a restart) for :data:`RECONNECT_SECONDS`. Nothing has been sent before a connection
    stands, so a retry is always safe; a request whose connection broke is asked again only where
    that is safe (:meth:`call`)."""

    def __init__(self, socket_path: str | Path, *, timeout: float = 60.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout

    def _connect(self, deadline: float) -> socket.socket:
        started = time.monotonic()
        delay = 0.01
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # A blocking connect waits in the kernel for room in the broker's backlog, woken the
            # moment it accepts, up to SO_SNDTIMEO (Linux); settimeout() would fail at once instead.
            left = max(0.1, deadline - time.monotonic())
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(left), int(left % 1 * 1e6)))
            try:
                conn.connect(str(self.socket_path))
            except (FileNotFoundError, ConnectionRefusedError) as error:
                conn.close()
                if time.monotonic() + delay > min(deadline, started + RECONNECT_SECONDS):
                    raise NoAnswer(
                        f"Cannot reach the jupyter-vgpu broker at {self.socket_path} ({error.strerror or error}); "
                        f"is `jupyter vgpu broker` running? Unset {ENV_BROKER} to use a ledger of your own."
                    ) from None
            except (BlockingIOError, InterruptedError, TimeoutError) as error:  # EAGAIN: its backlog stayed full
                conn.close()
                if time.monotonic() + delay > deadline:
                    raise NoAnswer(
                        f"The jupyter-vgpu broker at {self.socket_path} stayed too busy to accept a connection for "
                        f"{self.timeout:g} s ({error.strerror or error})."
                    ) from None
            except OSError as error:
                conn.close()
                raise NoAnswer(f"The jupyter-vgpu broker at {self.socket_path} did not answer: {error}.") from None
            else:
                self._check_peer(conn)
                return conn
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _check_peer(self, conn: socket.socket) -> None:
        """The process listening must be root or the owner of the socket's folder (who alone can
        put a socket there): in a folder others can write to, another user could listen first."""
        try:
            _, uid, _ = peer_credentials(conn)
            owner = os.stat(self.socket_path.parent).st_uid
        except (OSError, AttributeError):
            return  # no peer credentials here (not Linux): nothing to check against
        if uid not in (0, owner):
            conn.close()
            raise LedgerError(
                f"The process listening on {self.socket_path} runs as uid {uid}, neither root nor the owner of its "
                f"folder (uid {owner}): it is not the node's jupyter-vgpu broker; refusing to talk to it."
            )

    def call(self, op: str, **args: Any) -> Any:
        """Ask the broker; returns its result or raises the VGPUError it answered with.

        A request whose connection breaks before the answer (the broker was stopped or restarted
        while it asked) is asked again, where that is safe (:func:`safe_to_ask_again`), until an
        answer comes or :data:`RECONNECT_SECONDS` have passed since the first break (within the
        call's timeout): a broker that is dying may still take a connection in its last moments
        and then drop it too (a reproduction of run 16's failure), so once more is not enough. A call that ran out of
        time is not asked again here."""
        line = json.dumps({"op": op, "args": args}).encode() + b"\n"
        deadline = time.monotonic() + self.timeout
        safe = safe_to_ask_again(op, args)
        asked = 0
        broken_since: float | None = None
        delay = 0.05
        while True:
            conn = self._connect(deadline)
            asked += 1
            try:
                with conn:
                    conn.settimeout(max(0.1, deadline - time.monotonic()))
                    conn.sendall(line)
                    answer = read_line(conn)
            except (ConnectionResetError, BrokenPipeError) as error:
                broken = f"did not answer: {error}"
            except OSError as error:
                raise NoAnswer(f"The jupyter-vgpu broker at {self.socket_path} did not answer: {error}.") from None
            else:
                if answer:
                    break
                broken = "closed the connection without an answer"
            now = time.monotonic()
            broken_since = now if broken_since is None else broken_since
            if not safe or now + delay >= deadline or now - broken_since >= RECONNECT_SECONDS:
                times = f"asked {op} {asked} time{'s' if asked > 1 else ''}"
                raise NoAnswer(f"The jupyter-vgpu broker at {self.socket_path} {broken} ({times}).")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        try:
            data = json.loads(answer)
        except ValueError:
            raise LedgerError(f"The jupyter-vgpu broker at {self.socket_path} sent an answer that is not JSON.") from None
        if not isinstance(data, dict):
            raise LedgerError(f"The jupyter-vgpu broker at {self.socket_path} sent a malformed answer.")
        if not data.get("ok"):
            raise error_from_wire(data)
        return data.get("result")


class RemoteInventory(Inventory):
    """The broker's view of the node's GPUs (it alone talks to NVML or the simulation)."""

    def __init__(self, client: BrokerClient, info: dict[str, Any]) -> None:
        super().__init__(str(info.get("simulate") or ""))
        self._client = client
        self._source = str(info.get("gpus_source") or "GPUs")

    def describe(self) -> str:
        return f"{self._source} via the broker at {self._client.socket_path}"

    def snapshot(self, *, telemetry: bool = False) -> Snapshot:
        return snapshot_from_wire(self._client.call("snapshot", **({"telemetry": True} if telemetry else {})))


class BrokerLedger(Ledger):
    """The :class:`~.contract.Ledger` contract, each operation one call to the node broker.

    The broker takes who asks (user, uid, pid) from the socket's peer credentials, so a holder
    whose pid is this process's own is sent as "the caller" (right even from inside another
    pid namespace). ``path`` is this user's own ledger path, used only for the kernels' report
    files (the broker's ledger is not readable by users). Opening asks the broker for its
    settings, so an unreachable broker fails here, once.
    """

    def __init__(self, socket_path: str | Path, *, path: str | Path, timeout: float = 60.0) -> None:
        self.client = BrokerClient(socket_path, timeout=timeout)
        self.socket_path = Path(socket_path)
        self.path = Path(path)
        self.info: dict[str, Any] = dict(self.client.call("info"))
        self.inventory = RemoteInventory(self.client, self.info)
        allowance = self.info.get("context_allowance")
        self.context_allowance = None if allowance is None else int(allowance)
        self.poll_interval = float(self.info.get("poll_interval") or 0.25)

    def location(self) -> str:
        return f"node broker at {self.socket_path}"

    def _call(self, op: str, **args: Any) -> Any:
        assert op in OPERATIONS, op
        return self.client.call(op, **args)

    # -- reading ---------------------------------------------------------------------------
    def slices(self) -> list[Slice]:
        return [slice_from_wire(s) for s in self._call("slices")]

    def get(self, slice_id: str) -> Slice:
        return slice_from_wire(self._call("get", slice_id=str(slice_id)))

    def waiting(self) -> list[Waiter]:
        return [waiter_from_wire(w) for w in self._call("waiting")]

    def book_id(self) -> str:
        return str(self._call("book_id"))

    # -- reserving -------------------------------------------------------------------------
    def _once(self, op: str, request: SliceRequest, holder: Holder) -> Any:
        """Ask for a slice or a place in line with a token (``holder``'s, see :meth:`_tokened`),
        and ask once more with the same token if no answer came: the broker may have carried out
        the first asking (it was stopped, the answer was lost), and then answers the second with
        what the first got, never a second one."""
        wire = {"request": request.to_dict(), "holder": holder_to_wire(holder)}
        try:
            return self._call(op, **wire)
        except NoAnswer:
            time.sleep(min(1.0, self.poll_interval))
            return self._call(op, **wire)

    @staticmethod
    def _tokened(holder: Holder) -> Holder:
        return holder if holder.token else replace(holder, token=uuid.uuid4().hex)

    def reserve_now(self, request: SliceRequest, holder: Holder) -> Slice:
        return slice_from_wire(self._once("reserve_now", request, self._tokened(holder)))

    def enqueue(self, request: SliceRequest, holder: Holder) -> Ticket:
        holder = self._tokened(holder)
        return Ticket(number=int(self._once("enqueue", request, holder)), request=request, token=holder.token)

    def try_grant(self, ticket: Ticket, *, final: bool = True) -> Slice | None:
        # with its token, the place is asked again when the answer is lost (the broker restarted)
        place = {"number": ticket.number, "token": ticket.token} if ticket.token else ticket.number
        answer = self._call("try_grant", ticket=place, final=final)
        if answer.get("slice") is None:
            ticket.last_reason = str(answer.get("reason") or "")
            if final:  # the broker raises on final; this only guards a broker that did not
                raise SliceUnavailable(ticket.last_reason or "No slice could be granted.")
            return None
        return slice_from_wire(answer["slice"])

    def leave_queue(self, ticket: Ticket) -> None:
        self._call("leave_queue", ticket=ticket.number)

    # -- holding -----------------------------------------------------------------------------
    def attach(self, slice_id: str, pid: int) -> Slice:
        return slice_from_wire(self._call("attach", slice_id=str(slice_id), pid=None if pid == os.getpid() else int(pid)))

    def join_hold(self, slice_id: str, pid: int) -> str:
        # the broker (root) moves the process that asks: it knows that pid from the socket
        return str(self._call("join_hold", slice_id=str(slice_id), pid=None if pid == os.getpid() else int(pid)))

    def update_labels(self, slice_id: str, labels: Mapping[str, str | None]) -> Slice:
        return slice_from_wire(self._call("update_labels", slice_id=str(slice_id), labels=dict(labels)))

    def resize(self, slice_id: str, request: SliceRequest) -> Slice:
        return slice_from_wire(self._call("resize", slice_id=str(slice_id), request=request.to_dict()))

    def release(self, slice_id: str) -> Slice:
        return slice_from_wire(self._call("release", slice_id=str(slice_id)))

    def claim(self, slice_id: str) -> str:
        return str(self._call("claim", slice_id=str(slice_id)))

    def rebook(self, record: Slice, claim: str, split: bool = False) -> Slice:
        if split:
            raise NotPermitted("The broker's ledger does not split; a slice is booked again only after an admin reset it.")
        # pids that are this process's own go as the caller, as a holder's do (holder_to_wire)
        wire = slice_to_wire(record)
        wire["pid"] = None if record.pid in (None, os.getpid()) else int(record.pid)
        wire["keeper_pid"] = CALLER if record.keeper_pid == os.getpid() else record.keeper_pid
        return slice_from_wire(self._call("rebook", record=wire, claim=str(claim)))

    # -- kernels' idleness (the broker's own requests, outside the ledger contract) -------------
    def report_idle(self, slice_id: str, since: float | None) -> None:
        """Tell the broker that the kernel of this user's slice ``slice_id`` has been idle since
        ``since`` (Unix time), or is busy now (None), for the node's Prometheus page. The broker keeps
        it in memory until the slice ends or it is not said again for ``IDLE_STALE_SECONDS``."""
        self.client.call("idle", slice_id=str(slice_id), since=since)

    def idle_times(self) -> dict[str, float]:
        """Seconds each slice's kernel has been idle (0: busy), as its server said lately: this
        user's slices, every slice for root and the broker's admins."""
        answer = self.client.call("idle_times")
        return {str(k): float(v) for k, v in answer.items()} if isinstance(answer, dict) else {}

    # -- housekeeping ------------------------------------------------------------------------
    def reap(self) -> list[Slice]:
        return [slice_from_wire(s) for s in self._call("reap")]

    def overcommitted(self) -> list[tuple[str, int, int]]:
        return [(str(u), int(r), int(t)) for u, r, t in self._call("overcommitted")]
