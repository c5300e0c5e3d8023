"""The node broker's wire protocol, shared by the broker and its client.

Wire protocol: newline-delimited JSON, one request and one answer per connection::

    -> {"op": "reserve_now", "args": {"request": {...}, "holder": {...}}}
    <- {"ok": true, "result": ...}
    <- {"ok": false, "error": "NotPermitted", "message": "alice: at most 1/4 GPU per kernel ..."}

One connection per call keeps the client stateless: a broker that restarts between two calls
is not noticed, and a waiting request (enqueue, then try_grant until granted) survives it.

Records travel as JSON objects of their fields; errors by class name (:data:`WIRE_ERRORS`); the
caller's own processes by pid, checked against the socket's peer credentials.
"""

from __future__ import annotations

import inspect
import os
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from .. import errors
from ..errors import InvalidRequest, SliceUnavailable, VGPUError
from ..gpus import GPU, GPUProcess, Snapshot
from ..slices.records import Holder, Slice, Ticket, Waiter
from ..slices.request import SliceRequest
from ..units import shorten

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


def safe_to_ask_again(op: str, args: Mapping[str, Any]) -> bool:
    """Whether asking ``op`` again after a connection that broke mid-way can do no harm: it only
    reads, or it reserves with the holder's token (the broker answers a token it has seen with
    what the first asking got, never a second slice or place in line)."""
    if op in READS or op in SAME_AGAIN:
        return True
    if op == "try_grant":  # a place in line with its token: granted already, it answers that slice
        place = args.get("ticket")
        return isinstance(place, Mapping) and bool(place.get("token"))
    holder = args.get("holder")
    return op in BY_TOKEN and isinstance(holder, Mapping) and bool(holder.get("token"))


#: Operations by the wire names clients of earlier releases send: ``join_partition`` is the
#: contract's generic ``join_hold`` since the tiers' life cycle (the same checks, the same answer).
RENAMED_OPERATIONS = {"join_partition": "join_hold"}

#: Requests that change nothing (``info`` and ``snapshot`` are the broker's own).
READS = frozenset({"info", "snapshot", "slices", "get", "waiting", "overcommitted", "book_id", "idle_times"})
#: Requests that carry the holder's token (see :meth:`BrokerLedger._once`).
BY_TOKEN = frozenset({"reserve_now", "enqueue"})
#: Requests that change nothing the second time (leaving a line one has left already, saying a
#: kernel's idleness again).
SAME_AGAIN = frozenset({"leave_queue", "idle"})


def read_line(conn: socket.socket) -> bytes:
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


#: The contract's arguments as they arrive on the wire, each turned into what the ledger takes.
_DECODE: dict[str, Any] = {
    "slice_id": lambda v: _text(v, "slice_id", 64),
    "request": lambda v: _request(v),
    "holder": None,  # needs the caller: see decode_arguments
    "ticket": lambda v: _ticket(v),
    "final": lambda v: bool(v),
    "pid": lambda v: None if v is None else _whole(v, "pid"),
    "labels": lambda v: v,
    "record": lambda v: _record(v),
    "claim": lambda v: _text(v, "claim", 64),
    "split": lambda v: v is True,
}


def decode_arguments(op: str, args: dict[str, Any], caller_pid: int) -> dict[str, Any]:
    """The arguments of contract operation ``op`` as they arrived on the wire, decoded into what the
    ledger's method takes, by its parameter names; no others (one sentence for what is wrong). A
    holder's pid that is the caller becomes ``caller_pid``."""
    from .contract import Ledger  # the contract names the arguments
    parameters = {n: p for n, p in inspect.signature(getattr(Ledger, op)).parameters.items() if n != "self"}
    names = list(parameters)
    unknown = sorted(set(args) - set(names), key=str)
    if unknown:
        raise InvalidRequest(f"{op} takes {', '.join(names) or 'no arguments'}; not {', '.join(map(shorten, unknown))}.")
    missing = [n for n, p in parameters.items() if p.default is inspect.Parameter.empty and n not in args]
    if missing:
        raise InvalidRequest(f"{op} needs {', '.join(missing)}.")
    return {
        name: holder_from_wire(value, caller_pid) if name == "holder" else _DECODE[name](value)
        for name, value in args.items()
    }


def _ticket(value: Any) -> Ticket:
    """A place in line: its number, or (a client that asks again after a lost answer) its
    number and its request's token."""
    if not isinstance(value, Mapping):
        return Ticket(number=_whole(value, "ticket"), request=SliceRequest())
    unknown = sorted(set(value) - {"number", "token"}, key=str)
    if unknown:
        raise InvalidRequest(f"ticket takes number and token; not {', '.join(map(shorten, unknown))}.")
    token = Holder.kernel("ticket", token=value.get("token")).token  # checked as a holder's token is
    return Ticket(number=_whole(value.get("number"), "ticket"), request=SliceRequest(), token=token)


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidRequest(f"{name} must be text of at most {limit} characters, not {shorten(value)}.")
    return value


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise InvalidRequest(f"{name} {shorten(value)} is not a positive whole number.")
    return value


def _record(data: Any) -> Slice:
    """A slice to book again, as a client sent it (its owner, and its pids' start times and
    stamps, are the broker's to find out; ``keeper_pid`` may be the caller)."""
    if not isinstance(data, dict):
        raise InvalidRequest("The slice to book again must be a mapping of its fields.")
    try:
        return slice_from_wire({**data, "request": _request(data.get("request")).to_dict()})
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidRequest(f"The slice to book again is malformed ({shorten(error)}).") from None


def _request(data: Any) -> SliceRequest:
    if not isinstance(data, dict):
        raise InvalidRequest("The request must be a mapping (fraction or memory, gpus, ...).")
    return SliceRequest.parse(
        data.get("fraction"),
        data.get("memory"),
        gpus=data.get("gpus", 1),
        gpu=data.get("gpu"),
        logical_devices=data.get("logical_devices", 1),
        placement=data.get("placement", "binpack"),
        limit_fraction=data.get("limit_fraction"),
        limit_memory=data.get("limit_memory"),
    )
