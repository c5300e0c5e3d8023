"""The ledger behind a node broker: the :class:`~.ledger.Ledger` contract over a Unix socket.

When ``JUPYTER_VGPU_BROKER`` names the socket of ``jupyter vgpu broker``, :func:`open_ledger`
returns a :class:`BrokerLedger` instead of opening a SQLite file: the broker owns the node's
ledger, learns who asks from the socket's peer credentials and applies the admins' quotas.

Wire protocol: newline-delimited JSON, one request and one answer per connection::

    -> {"op": "reserve_now", "args": {"request": {...}, "holder": {...}}}
    <- {"ok": true, "result": ...}
    <- {"ok": false, "error": "NotPermitted", "message": "alice: at most 1/4 GPU per kernel ..."}

One connection per call keeps the client stateless: a broker that restarts between two calls
is not noticed, and a waiting request (enqueue, then try_grant until granted) survives it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import uuid
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .. import errors
from ..errors import LedgerError, SliceUnavailable, VGPUError
from ..gpus import GPU, GPUProcess, Inventory, Snapshot
from .ledger import OPERATIONS, Ledger
from .records import Holder, Slice, Ticket, Waiter
from .request import SliceRequest

ENV_BROKER = "JUPYTER_VGPU_BROKER"

#: Where ``jupyter vgpu broker`` listens and keeps the node's ledger unless told otherwise.
DEFAULT_SOCKET = "/run/jupyter-vgpu/broker.sock"
DEFAULT_LEDGER = "/var/lib/jupyter-vgpu/ledger.sqlite"

#: Longest answer the client accepts (a node with thousands of slices stays far below).
MAX_MESSAGE = 16 * 1024 * 1024

#: The errors that travel by name; anything else arrives as a plain VGPUError.
WIRE_ERRORS: dict[str, type[VGPUError]] = {
    cls.__name__: cls
    for cls in (
        errors.VGPUError,
        errors.InvalidRequest,
        errors.InvalidConfig,
        errors.SliceUnavailable,
        errors.NoGPU,
        errors.NeverFits,
        errors.LeftLine,
        errors.SliceNotFound,
        errors.NotPermitted,
        errors.LedgerError,
        errors.LedgerBusy,
    )
}


# -- wire shapes ---------------------------------------------------------------------------
def slice_to_wire(slice_: Slice) -> dict[str, Any]:
    """Every field of a slice, JSON-ready (tuples become lists, the request a dict)."""
    data = {f.name: getattr(slice_, f.name) for f in fields(Slice)}
    data["request"] = slice_.request.to_dict()
    data["tier"] = slice_.tier.value
    for key in ("gpus", "gpu_indices", "memory", "memory_total"):
        data[key] = list(data[key])
    return data


def slice_from_wire(data: dict[str, Any]) -> Slice:
    values = {f.name: data[f.name] for f in fields(Slice) if f.name in data}
    values["request"] = SliceRequest.from_dict(data["request"])
    for key in ("gpus", "gpu_indices", "memory", "memory_total"):
        values[key] = tuple(values[key])
    values["labels"] = dict(values.get("labels") or {})
    return Slice(**values)


#: On the wire, a holder's ``keeper`` that is the sender itself (the broker reads its pid from the
#: socket's credentials, right across pid namespaces).
CALLER = "caller"


def holder_to_wire(holder: Holder) -> dict[str, Any]:
    """The holder as sent; a pid that is the sender's own goes as None (the holder) or
    :data:`CALLER` (the keeper)."""
    keeper: int | str | None = holder.keeper
    if keeper is not None and keeper == os.getpid():
        keeper = CALLER
    return {
        "kind": holder.kind,
        "name": holder.name,
        "pid": None if holder.pid is None or holder.pid == os.getpid() else int(holder.pid),
        "labels": dict(holder.labels),
        "keeper": keeper,
        "token": holder.token,
    }


def holder_from_wire(data: Any, caller_pid: int) -> Holder:
    """The holder a client sent; its own pid (the caller) is ``caller_pid``."""
    if not isinstance(data, dict):
        raise errors.InvalidRequest("A holder must be a mapping of kind, name, pid, labels and keeper.")
    unknown = set(data) - {"kind", "name", "pid", "labels", "keeper", "token"}
    if unknown:
        raise errors.InvalidRequest(
            f"A holder has kind, name, pid, labels, keeper and token; not {', '.join(sorted(map(str, unknown)))[:200]}."
        )
    keeper = data.get("keeper")
    return Holder(
        data.get("kind"),  # type: ignore[arg-type]
        data.get("name"),  # type: ignore[arg-type]
        data.get("pid"),
        data.get("labels") or {},
        caller_pid if keeper == CALLER else keeper,
        data.get("token"),
    )


def waiter_to_wire(waiter: Waiter) -> dict[str, Any]:
    data = {f.name: getattr(waiter, f.name) for f in fields(Waiter)}
    data["request"] = waiter.request.to_dict()
    return data


def waiter_from_wire(data: dict[str, Any]) -> Waiter:
    values = {f.name: data[f.name] for f in fields(Waiter) if f.name in data}
    values["request"] = SliceRequest.from_dict(data["request"])
    if values.get("allowed_gpus") is not None:
        values["allowed_gpus"] = tuple(str(u) for u in values["allowed_gpus"])
    return Waiter(**values)


def snapshot_to_wire(snapshot: Snapshot) -> dict[str, Any]:
    data = snapshot.to_dict()
    data["taken_at"] = snapshot.taken_at
    return data


def snapshot_from_wire(data: dict[str, Any]) -> Snapshot:
    known = {f.name for f in fields(GPUProcess)}  # a newer broker may send more
    gpu_fields = {f.name for f in fields(GPU)}
    gpus = tuple(
        GPU(
            **{k: v for k, v in g.items() if k in gpu_fields and k != "processes"},
            processes=tuple(GPUProcess(**{k: v for k, v in p.items() if k in known}) for p in g.get("processes", ())),
        )
        for g in data.get("gpus", ())
    )
    return Snapshot(
        gpus=gpus,
        simulated=bool(data.get("simulated")),
        available=bool(data.get("available")),
        driver=data.get("driver"),
        message=data.get("message"),
        taken_at=float(data.get("taken_at") or time.time()),
    )


def error_to_wire(error: VGPUError) -> dict[str, Any]:
    name = next((cls.__name__ for cls in type(error).__mro__ if cls.__name__ in WIRE_ERRORS), "VGPUError")
    answer: dict[str, Any] = {"ok": False, "error": name, "message": str(error)}
    if isinstance(error, SliceUnavailable) and error.detail is not None:
        answer["detail"] = error.detail
    return answer


def error_from_wire(answer: dict[str, Any]) -> VGPUError:
    cls = WIRE_ERRORS.get(str(answer.get("error")), VGPUError)
    message = str(answer.get("message") or "The jupyter-vgpu broker refused the request.")
    if issubclass(cls, SliceUnavailable):
        detail = answer.get("detail")
        return cls(message, detail=detail if isinstance(detail, dict) else None)
    return cls(message)


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``):
    the broker's caller, or the broker as its client sees it."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


# -- the client ----------------------------------------------------------------------------
class NoAnswer(LedgerError):
    """The broker could not be reached or gave no answer: the request may or may not have been
    carried out (asking again with the same holder token finds out)."""


#: How long a client keeps trying to connect while nothing listens (a broker restarting): after
#: that it says the broker is not running. A broker that listens but is busy (its backlog full,
#: EAGAIN) is tried until the call's own timeout.
RECONNECT_SECONDS = 5.0


class BrokerClient:
    """Sends one request per connection to the broker's socket.

    Connecting waits in the kernel for room in the broker's backlog (another user may flood it)
    up to the call's timeout, and is retried with back-off (10 ms doubling to 0.5 s) while nothing
    listens (a restart) for :data:`RECONNECT_SECONDS`. Nothing has been sent before a connection
    stands, so a retry is always safe."""

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
        while it asked) is asked once more, on a new connection once the broker listens again
        (:data:`RECONNECT_SECONDS`, within the call's timeout), where that is safe: see
        :func:`safe_to_ask_again`. A call that ran out of time is not asked again here."""
        line = json.dumps({"op": op, "args": args}).encode() + b"\n"
        deadline = time.monotonic() + self.timeout
        attempts = 2 if safe_to_ask_again(op, args) else 1
        for attempt in range(1, attempts + 1):
            conn = self._connect(deadline)
            try:
                with conn:
                    conn.settimeout(max(0.1, deadline - time.monotonic()))
                    conn.sendall(line)
                    answer = _read_line(conn)
            except (ConnectionResetError, BrokenPipeError) as error:
                broken = f"did not answer: {error}"
            except OSError as error:
                raise NoAnswer(f"The jupyter-vgpu broker at {self.socket_path} did not answer: {error}.") from None
            else:
                if answer:
                    break
                broken = "closed the connection without an answer"
            if attempt == attempts or time.monotonic() >= deadline:
                raise NoAnswer(f"The jupyter-vgpu broker at {self.socket_path} {broken}.")
        try:
            data = json.loads(answer)
        except ValueError:
            raise LedgerError(f"The jupyter-vgpu broker at {self.socket_path} sent an answer that is not JSON.") from None
        if not isinstance(data, dict):
            raise LedgerError(f"The jupyter-vgpu broker at {self.socket_path} sent a malformed answer.")
        if not data.get("ok"):
            raise error_from_wire(data)
        return data.get("result")


def safe_to_ask_again(op: str, args: Mapping[str, Any]) -> bool:
    """Whether asking ``op`` again after a connection that broke mid-way can do no harm: it only
    reads, or it reserves with the holder's token (the broker answers a token it has seen with
    what the first asking got, never a second slice or place in line)."""
    if op in READS:
        return True
    holder = args.get("holder")
    return op in BY_TOKEN and isinstance(holder, Mapping) and bool(holder.get("token"))


#: Requests that change nothing (``info`` and ``snapshot`` are the broker's own).
READS = frozenset({"info", "snapshot", "slices", "get", "waiting", "overcommitted", "book_id"})
#: Requests that carry the holder's token (see :meth:`BrokerLedger._once`).
BY_TOKEN = frozenset({"reserve_now", "enqueue"})


def _read_line(conn: socket.socket) -> bytes:
    """One answer line; b"" when the connection closed before its end (no answer, or part of one)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        newline = chunk.find(b"\n")
        if newline >= 0:
            chunks.append(chunk[:newline])
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_MESSAGE:
            raise OSError("answer too large")
    return b"".join(chunks)


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
    """The :class:`~.ledger.Ledger` contract, each operation one call to the node broker.

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
        """Ask for a slice or a place in line with a token, and ask once more with the same token
        if no answer came: the broker may have carried out the first asking (it was stopped, the
        answer was lost), and then answers the second with what the first got, never a second one."""
        token = holder.token or uuid.uuid4().hex
        wire = {"request": request.to_dict(), "holder": holder_to_wire(replace(holder, token=token))}
        try:
            return self._call(op, **wire)
        except NoAnswer:
            time.sleep(min(1.0, self.poll_interval))
            return self._call(op, **wire)

    def reserve_now(self, request: SliceRequest, holder: Holder) -> Slice:
        return slice_from_wire(self._once("reserve_now", request, holder))

    def enqueue(self, request: SliceRequest, holder: Holder) -> Ticket:
        return Ticket(number=int(self._once("enqueue", request, holder)), request=request)

    def try_grant(self, ticket: Ticket, *, final: bool = True) -> Slice | None:
        answer = self._call("try_grant", ticket=ticket.number, final=final)
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

    def join_partition(self, slice_id: str, pid: int) -> str:
        # the broker (root) moves the process that asks: it knows that pid from the socket
        return str(self._call("join_partition", slice_id=str(slice_id), pid=None if pid == os.getpid() else int(pid)))

    def update_labels(self, slice_id: str, labels: Mapping[str, str | None]) -> Slice:
        return slice_from_wire(self._call("update_labels", slice_id=str(slice_id), labels=dict(labels)))

    def resize(self, slice_id: str, request: SliceRequest) -> Slice:
        return slice_from_wire(self._call("resize", slice_id=str(slice_id), request=request.to_dict()))

    def release(self, slice_id: str) -> Slice:
        return slice_from_wire(self._call("release", slice_id=str(slice_id)))

    def rebook(self, record: Slice) -> Slice:
        # pids that are this process's own go as the caller, as a holder's do (holder_to_wire)
        wire = slice_to_wire(record)
        wire["pid"] = None if record.pid in (None, os.getpid()) else int(record.pid)
        wire["keeper_pid"] = CALLER if record.keeper_pid == os.getpid() else record.keeper_pid
        return slice_from_wire(self._call("rebook", record=wire))

    # -- housekeeping ------------------------------------------------------------------------
    def reap(self) -> list[Slice]:
        return [slice_from_wire(s) for s in self._call("reap")]

    def overcommitted(self) -> list[tuple[str, int, int]]:
        return [(str(u), int(r), int(t)) for u, r, t in self._call("overcommitted")]
