"""The node broker: one process that owns the node's ledger and serves it over a Unix socket.

Who asks is read from the socket's peer credentials (``SO_PEERCRED``: the kernel fills in the
caller's uid and its pid translated into the broker's pid namespace), never from the request.
The broker then:

* records every slice as owned by the caller (user name from the password database);
* applies the :mod:`policy <.policy>` before and after placement, under one lock, so two
  requests of one user cannot both slip under a limit;
* lets a caller attach, relabel, resize and release only its own slices (admins: any) and
  attach only processes of its own uid, so nobody pins a slice to someone else's process;
* shows other users' slices without their notebook paths, labels or command lines.

The socket itself is :mod:`.listener`. Clients are :class:`jupyter_vgpu.slices.remote.BrokerLedger`.
"""

from __future__ import annotations

import logging
import os
import pwd
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from ..errors import InvalidConfig, InvalidRequest, NotPermitted, SliceUnavailable, VGPUError
from ..gpus import Inventory, Snapshot
from ..slices import Ledger, Slice, SliceRequest, Ticket, Waiter
from ..slices.remote import error_to_wire, slice_to_wire, snapshot_to_wire, waiter_to_wire
from . import quota as quotas
from .policy import Policy, Quota, load_policy, user_groups

log = logging.getLogger("jupyter_vgpu.broker")

HOLDER_KINDS = ("kernel", "command")
HIDDEN = {"kernel": "another user's kernel", "command": "another user's command"}


@dataclass(frozen=True)
class Caller:
    """Who is on the other end of a connection, from ``SO_PEERCRED``."""

    pid: int
    uid: int
    gid: int
    user: str
    groups: tuple[str, ...]
    admin: bool


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class PolicySource:
    """The policy in force, re-read on :meth:`reload` (SIGHUP) or when its file changes.

    A policy file that stops being valid is reported in the log and the last good policy
    stays in force; at start a bad file is an error (:class:`InvalidConfig`).
    """

    def __init__(self, path: str | Path | None, *, check_every: float = 1.0) -> None:
        self.path = Path(path) if path else None
        self.check_every = check_every
        self.error: str | None = None
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp: tuple[float, int] | None = None
        self.policy = self._read() if self.path else Policy()

    def _file_stamp(self) -> tuple[float, int] | None:
        assert self.path is not None
        try:
            info = self.path.stat()
        except OSError:
            return None
        return (info.st_mtime, info.st_size)

    def _read(self) -> Policy:
        assert self.path is not None
        self._stamp = self._file_stamp()
        return load_policy(self.path)

    def reload(self) -> bool:
        """Read the file again; True if a new policy is in force."""
        if self.path is None:
            return False
        with self._lock:
            try:
                self.policy = self._read()
            except InvalidConfig as error:
                self.error = str(error)
                log.error("jupyter-vgpu broker: %s Keeping the last good policy (%s).", error, self.policy.source)
                return False
            self.error = None
            log.info("jupyter-vgpu broker: policy reloaded from %s.", self.path)
            return True

    def current(self) -> Policy:
        """The policy, re-read first if its file changed (checked at most every ``check_every`` s)."""
        if self.path is not None and time.monotonic() - self._checked >= self.check_every:
            self._checked = time.monotonic()
            if self._file_stamp() != self._stamp:
                self.reload()
        return self.policy


class _AllowedInventory(Inventory):
    """The node's inventory narrowed to the GPUs a user may use, so placement only sees those."""

    def __init__(self, base: Inventory, uuids: frozenset[str]) -> None:
        super().__init__(base.simulate)
        self._base = base
        self._uuids = uuids

    def describe(self) -> str:
        return self._base.describe()

    def snapshot(self) -> Snapshot:
        snap = self._base.snapshot()
        return replace(snap, gpus=tuple(g for g in snap.gpus if g.uuid in self._uuids))


class Broker:
    """Answers ledger requests for callers identified by their peer credentials."""

    def __init__(
        self,
        ledger: Ledger,
        policy: PolicySource,
        *,
        simulate: str = "",
    ) -> None:
        self.ledger = ledger
        self.policy = policy
        self.simulate = simulate
        self._grant_lock = threading.Lock()
        self._narrowed: dict[frozenset[str], Ledger] = {}

    # -- who asks ----------------------------------------------------------------------------
    def caller(self, pid: int, uid: int, gid: int) -> Caller:
        user = user_name(uid)
        groups = tuple(user_groups(user))
        admin = uid == 0 or self.policy.current().is_admin(user, list(groups))
        return Caller(pid=pid, uid=uid, gid=gid, user=user, groups=groups, admin=admin)

    def quota(self, caller: Caller) -> Quota:
        if caller.uid == 0:
            return Quota(caller.user, unlimited=True)
        return self.policy.current().quota(caller.user, list(caller.groups))

    # -- one request -------------------------------------------------------------------------
    def handle(self, caller: Caller, message: dict[str, Any]) -> dict[str, Any]:
        """Answer one decoded request: ``{"ok": true, "result": ...}`` or an error answer."""
        op = message.get("op")
        args = message.get("args") or {}
        method = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        try:
            if method is None or not isinstance(args, dict):
                raise InvalidRequest(f"The broker does not know the request {op!r}; upgrade the client or the broker.")
            return {"ok": True, "result": method(caller, **args)}
        except VGPUError as error:
            return error_to_wire(error)
        except TypeError as error:
            return error_to_wire(InvalidRequest(f"Malformed {op} request: {error}."))
        except Exception as error:  # a broker bug must not take the node's GPUs down with it
            log.exception("jupyter-vgpu broker: %s from %s failed", op, caller.user)
            return error_to_wire(VGPUError(f"The jupyter-vgpu broker failed on {op}: {error}."))

    # -- reading -----------------------------------------------------------------------------
    def op_info(self, caller: Caller) -> dict[str, Any]:
        source = self.policy.current()
        return {
            "simulate": self.simulate,
            "gpus_source": self.ledger.inventory.describe(),
            "context_allowance": self.ledger.context_allowance,
            "poll_interval": self.ledger.poll_interval,
            "user": caller.user,
            "admin": caller.admin,
            "policy": source.source,
        }

    def op_snapshot(self, caller: Caller) -> dict[str, Any]:
        return snapshot_to_wire(self.ledger.inventory.snapshot())

    def op_slices(self, caller: Caller) -> list[dict[str, Any]]:
        return [slice_to_wire(self.visible(caller, s)) for s in self.ledger.slices()]

    def op_get(self, caller: Caller, slice_id: str) -> dict[str, Any]:
        return slice_to_wire(self.visible(caller, self.ledger.get(str(slice_id))))

    def op_waiting(self, caller: Caller) -> list[dict[str, Any]]:
        return [waiter_to_wire(self.visible_waiter(caller, w)) for w in self.ledger.waiting()]

    def op_describe_free(self, caller: Caller) -> str:
        return self.scrub(caller, self.ledger.describe_free())

    def op_overcommitted(self, caller: Caller) -> list[tuple[str, int, int]]:
        return self.ledger.overcommitted()

    def op_reap(self, caller: Caller) -> list[dict[str, Any]]:
        return [slice_to_wire(self.visible(caller, s)) for s in self.ledger.reap()]

    # -- reserving ---------------------------------------------------------------------------
    def op_reserve(
        self, caller: Caller, request: dict[str, Any], holder_kind: str, holder: str,
        pid: int | None = None, labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        parsed = _request(request)
        fields = self._holder_fields(caller, holder_kind, holder, pid, labels)
        quota = self.quota(caller)
        with self._grant_lock:
            held = self._held(caller)
            quotas.check_request(quota, parsed, held)
            ledger = self._ledger_for(quota, parsed)
            try:
                granted = ledger.reserve(parsed, **fields)
            except SliceUnavailable as error:
                raise SliceUnavailable(self.scrub(caller, str(error))) from None
            self._check_granted(ledger, quota, granted, held)
        return slice_to_wire(granted)

    def op_enqueue(
        self, caller: Caller, request: dict[str, Any], holder_kind: str, holder: str,
        pid: int | None = None, labels: dict[str, str] | None = None,
    ) -> int:
        parsed = _request(request)
        fields = self._holder_fields(caller, holder_kind, holder, pid, labels)
        quota = self.quota(caller)
        quotas.check_request(quota, parsed, self._held(caller))
        quotas.allowed_gpus(quota, self.ledger.inventory.snapshot(), parsed)
        return self.ledger.enqueue(parsed, **fields).number

    def op_try_grant(self, caller: Caller, ticket: int, final: bool = True) -> dict[str, Any]:
        waiter = self._own_ticket(caller, ticket)
        quota = self.quota(caller)
        max_wait, source = quota.get("max_wait")
        overdue = max_wait is not None and time.time() - waiter.created >= max_wait
        place = Ticket(number=waiter.ticket, request=waiter.request)
        with self._grant_lock:
            held = self._held(caller)
            try:
                quotas.check_request(quota, waiter.request, held)
            except NotPermitted:
                self.ledger.leave_queue(place)
                raise
            ledger = self._ledger_for(quota, waiter.request)
            try:
                granted = ledger.try_grant(place, final=bool(final) or overdue)
            except SliceUnavailable as error:
                reason = self.scrub(caller, str(error))
                if overdue and not final:
                    reason = f"{caller.user}: waits at most {max_wait:g} s in line ({source}). {reason}"
                raise SliceUnavailable(reason) from None
            if granted is None:
                return {"slice": None, "reason": self.scrub(caller, place.last_reason)}
            self._check_granted(ledger, quota, granted, held)
        return {"slice": slice_to_wire(granted), "reason": ""}

    def op_leave_queue(self, caller: Caller, ticket: int) -> None:
        try:
            self._own_ticket(caller, ticket)
        except SliceUnavailable:
            return  # granted or gone already
        self.ledger.leave_queue(Ticket(number=int(ticket), request=SliceRequest()))

    # -- holders -----------------------------------------------------------------------------
    def op_attach(self, caller: Caller, slice_id: str, pid: int | None = None) -> dict[str, Any]:
        found = self._own_slice(caller, slice_id, "attach a process to")
        holder_pid = self._holder_pid(caller, pid)
        return slice_to_wire(self.ledger.attach(found.id, holder_pid))

    def op_update_labels(self, caller: Caller, slice_id: str, labels: dict[str, Any]) -> dict[str, Any]:
        found = self._own_slice(caller, slice_id, "relabel")
        if not isinstance(labels, dict):
            raise InvalidRequest("Labels must be a mapping of names to text.")
        clean = {str(k): (None if v is None else str(v)) for k, v in labels.items()}
        return slice_to_wire(self.ledger.update_labels(found.id, **clean))

    def op_resize(self, caller: Caller, slice_id: str, request: dict[str, Any]) -> dict[str, Any]:
        parsed = _request(request)
        quota = self.quota(caller)
        uid = 0 if caller.admin else caller.uid
        with self._grant_lock:
            found = self.ledger.get(str(slice_id))
            if not caller.admin and found.uid != caller.uid:
                raise NotPermitted(f"Slice {found.id} belongs to {found.owner}; you can resize only your own slices.")
            others = [s for s in self._held_by(found.uid) if s.id != found.id]
            try:
                resized = self.ledger.resize(found.id, parsed, uid=uid)
            except SliceUnavailable as error:
                raise SliceUnavailable(self.scrub(caller, str(error))) from None
            if found.uid == caller.uid:
                try:
                    quotas.check_slice(quota, resized, others)
                except NotPermitted:
                    self.ledger.resize(found.id, found.request, uid=0)
                    raise
        return slice_to_wire(resized)

    def op_release(self, caller: Caller, slice_id: str) -> dict[str, Any]:
        freed = self.ledger.release(str(slice_id), uid=0 if caller.admin else caller.uid)
        return slice_to_wire(freed)

    # -- admin actions (the admin page calls these in-process) ---------------------------------
    def terminate(self, slice_id: str, *, by: str) -> Slice:
        """Release a slice and end its holder process (SIGTERM, if it is still the process that
        took the slice). A ``jupyter vgpu run`` command ends; a kernel's server may restart it."""
        found = self.ledger.get(slice_id)
        self.ledger.release(found.id, uid=0)
        if found.pid and found.pid != os.getpid():
            try:
                proc = psutil.Process(found.pid)
                if found.pid_start is None or abs(proc.create_time() - found.pid_start) < 0.01:
                    proc.terminate()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        log.info("jupyter-vgpu broker: %s terminated the holder of slice %s of %s (%s).", by, found.id, found.owner, found.describe_holder())
        return found

    # -- helpers -----------------------------------------------------------------------------
    def visible(self, caller: Caller, s: Slice) -> Slice:
        """The slice as ``caller`` may see it: others' holders, labels and commands hidden."""
        if caller.admin or s.uid == caller.uid:
            return s
        return replace(s, holder_kind="other", holder=HIDDEN.get(s.holder_kind, "another user's process"), labels={})

    def visible_waiter(self, caller: Caller, w: Waiter) -> Waiter:
        if caller.admin or w.owner == caller.user:
            return w
        return replace(w, holder_kind="other", holder=HIDDEN.get(w.holder_kind, "another user's process"), labels={})

    def scrub(self, caller: Caller, text: str) -> str:
        """Replace other users' holder descriptions (notebook paths, command lines) in a message."""
        if caller.admin or not text:
            return text
        for s in self.ledger.slices():
            if s.uid != caller.uid:
                shown = s.describe_holder()
                if shown:
                    text = text.replace(shown, HIDDEN.get(s.holder_kind, "another user's process"))
        return text

    def _holder_fields(
        self, caller: Caller, holder_kind: str, holder: str, pid: int | None, labels: dict[str, str] | None
    ) -> dict[str, Any]:
        if holder_kind not in HOLDER_KINDS:
            raise InvalidRequest(f"holder_kind {holder_kind!r} is not allowed; use one of: {', '.join(HOLDER_KINDS)}.")
        if not isinstance(holder, str) or len(holder) > 4096:
            raise InvalidRequest("holder must be text of at most 4096 characters.")
        if labels is not None and not isinstance(labels, dict):
            raise InvalidRequest("labels must be a mapping of names to text.")
        return {
            "holder_kind": holder_kind,
            "holder": holder,
            "pid": self._holder_pid(caller, pid),
            "owner": caller.user,
            "uid": caller.uid,
            "labels": {str(k): str(v) for k, v in (labels or {}).items()},
        }

    def _holder_pid(self, caller: Caller, pid: int | None) -> int:
        """The caller itself, or a process of the caller's own uid (root: any)."""
        if pid is None:
            return caller.pid
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise InvalidRequest(f"pid {pid!r} is not a process id.")
        try:
            owner = psutil.Process(pid).uids().real
        except psutil.NoSuchProcess:
            raise InvalidRequest(f"No process {pid} runs (in the broker's view of the node).") from None
        if caller.uid != 0 and owner != caller.uid:
            raise NotPermitted(f"Process {pid} belongs to {user_name(owner)}; a slice can be held only by your own processes.")
        return pid

    def _held(self, caller: Caller) -> list[Slice]:
        return self._held_by(caller.uid)

    def _held_by(self, uid: int) -> list[Slice]:
        return [s for s in self.ledger.slices() if s.uid == uid]

    def _own_slice(self, caller: Caller, slice_id: str, action: str) -> Slice:
        found = self.ledger.get(str(slice_id))
        if not caller.admin and found.uid != caller.uid:
            raise NotPermitted(f"Slice {found.id} belongs to {found.owner}; you can {action} only your own slices.")
        return found

    def _own_ticket(self, caller: Caller, ticket: int) -> Waiter:
        for waiter in self.ledger.waiting():
            if waiter.ticket == int(ticket):
                if not caller.admin and waiter.owner != caller.user:
                    raise NotPermitted(f"Place {ticket} in line belongs to {waiter.owner}, not to {caller.user}.")
                return waiter
        raise SliceUnavailable("This request left the line (its process ended or it was cancelled).")

    def _ledger_for(self, quota: Quota, request: SliceRequest) -> Ledger:
        allowed = quotas.allowed_gpus(quota, self.ledger.inventory.snapshot(), request)
        if allowed is None:
            return self.ledger
        if allowed not in self._narrowed:
            self._narrowed[allowed] = Ledger(
                self.ledger.path,
                _AllowedInventory(self.ledger.inventory, allowed),
                context_allowance=self.ledger.context_allowance,
                poll_interval=self.ledger.poll_interval,
            )
        return self._narrowed[allowed]

    def _check_granted(self, ledger: Ledger, quota: Quota, granted: Slice, held: list[Slice]) -> None:
        try:
            quotas.check_slice(quota, granted, held)
        except NotPermitted:
            ledger.release(granted.id, uid=0)
            raise

    def reap_forever(self, interval: float, stop: threading.Event) -> None:
        """Free dead holders' slices every ``interval`` seconds (a restarted broker catches up at once)."""
        while not stop.is_set():
            try:
                for dead in self.ledger.reap():
                    log.info("jupyter-vgpu broker: freed slice %s of %s (%s): its process ended.", dead.id, dead.owner, dead.describe_holder())
            except VGPUError as error:
                log.warning("jupyter-vgpu broker: reaping failed: %s", error)
            stop.wait(interval)


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
    )
