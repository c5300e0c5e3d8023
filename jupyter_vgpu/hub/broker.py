"""The node broker: one process that owns the node's ledger and serves it over a Unix socket.

Who asks is read from the socket's peer credentials (``SO_PEERCRED``: the kernel fills in the
caller's uid and its pid translated into the broker's pid namespace), never from the request.
The broker then:

* records every slice as owned by the caller (user name from the password database);
* applies the :mod:`policy <.policy>` before and after placement, under one lock, so two
  requests of one user cannot both slip under a limit;
* lets a caller attach, relabel, resize and release only its own slices (admins: any) and
  attach only processes of its own uid, so nobody pins a slice to someone else's process;
* shows other users' slices without their notebook paths, labels or command lines;
* keeps, in memory, what each user's server says of its kernels' idleness (``idle``: for the
  caller's own slices only), for the node's Prometheus page (:meth:`Broker.idle_seconds`).

The socket itself is :mod:`.listener`. Clients are :class:`jupyter_vgpu.ledger.broker_client.BrokerLedger`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import psutil

from ..accounts import user_groups
from ..enforcement import by_tier
from ..errors import InvalidRequest, LeftLine, NotPermitted, SliceUnavailable, VGPUError
from ..gpus.model import GPUProcess, Snapshot
from ..gpus.simulated_use import drop_uses, write_use
from ..ledger import SQLiteLedger
from ..ledger.contract import OPERATIONS
from ..ledger.wire import (
    CALLER,
    RENAMED_OPERATIONS,
    decode_arguments,
    error_to_wire,
    slice_to_wire,
    snapshot_to_wire,
    waiter_to_wire,
)
from ..slices import Actor, Holder, SliceRequest, Ticket
from ..slices.holders import ProcessOwners, process_alive
from ..slices.holders import held as still_held
from ..slices.records import HIDDEN_HOLDER, Slice, Waiter
from ..slices.reports import IDLE_STALE_SECONDS
from ..units import shorten
from . import quota as quotas
from .callers import Caller as Caller  # re-exported: callers of the broker name it here
from .callers import PolicySource as PolicySource
from .callers import process_uid, user_name
from .policy import Quota

log = logging.getLogger("jupyter_vgpu.broker")


@dataclass(frozen=True)
class IdleFact:
    """What a user's server said of one of its kernels' slices: idle since ``since`` (None: busy),
    said at ``said_at``, by the slice's owner ``uid``."""

    uid: int
    since: float | None
    said_at: float


class Broker:
    """Answers ledger requests for callers identified by their peer credentials.

    Every operation of the ledger contract (:data:`~jupyter_vgpu.ledger.contract.OPERATIONS`) is
    served by the same method of the node's :class:`SQLiteLedger`, acting for the caller: that
    ledger alone decides what a caller may change. The broker adds the policy (quotas, allowed
    GPUs as a placement constraint, the longest wait) and hides other users' holders.
    """

    def __init__(self, ledger: SQLiteLedger, policy: PolicySource, *, simulate: str = "") -> None:
        self.ledger = ledger
        ledger.allowed_for_row = self._allowed_for_row  # the line's order knows each waiter's policy
        self._gpus_seen: tuple[float, Snapshot | None] = (0.0, None)
        self.policy = policy
        self.simulate = simulate
        self._grant_lock = threading.Lock()
        #: Why the broker took a place out of line (its longest wait passed), for the waiter's next ask.
        self._expired: dict[int, str] = {}
        self._owners = ProcessOwners()  # which slice each GPU process counts against, across calls
        self._owners_lock = threading.Lock()
        #: What users' servers said of their kernels' idleness, by slice id (:meth:`report_idle`).
        self._idle: dict[str, IdleFact] = {}
        self._idle_lock = threading.Lock()

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

    def acting_for(self, caller: Caller, request: SliceRequest | None = None) -> SQLiteLedger:
        """The node's ledger acting for ``caller``, placing only on the GPUs its policy allows."""
        allowed = None
        if request is not None:
            allowed = quotas.allowed_gpus(self.quota(caller), self.ledger.inventory.snapshot(), request)
        return self.ledger.acting_for(Actor(caller.user, caller.uid, caller.admin), allowed_gpus=allowed)

    # -- one request -------------------------------------------------------------------------
    def handle(self, caller: Caller, message: dict[str, Any]) -> dict[str, Any]:
        """Answer one decoded request: ``{"ok": true, "result": ...}`` or an error answer."""
        op = message.get("op")
        op = RENAMED_OPERATIONS.get(op, op) if isinstance(op, str) else op
        args = message.get("args") or {}
        try:
            if not isinstance(args, dict):
                raise InvalidRequest("The request's args must be a mapping.")
            if op == "info":
                return {"ok": True, "result": self.info(caller)}
            if op == "snapshot":
                telemetry = args.get("telemetry") is True
                return {"ok": True, "result": snapshot_to_wire(self.snapshot_for(caller, telemetry=telemetry))}
            if op == "simulated_use":
                return {"ok": True, "result": self.simulated_use(caller, args.get("used"), args.get("utilization"))}
            if op == "idle":
                return {"ok": True, "result": self.report_idle(caller, args.get("slice_id"), args.get("since"))}
            if op == "idle_times":
                return {"ok": True, "result": self.idle_times(caller)}
            if not isinstance(op, str) or op not in OPERATIONS:
                raise InvalidRequest(f"The broker does not know the request {shorten(op)}; upgrade the client or the broker.")
            return {"ok": True, "result": self.serve(caller, op, decode_arguments(op, args, caller.pid))}
        except SliceUnavailable as error:
            return error_to_wire(error)  # built by the ledger acting for the caller: others' holders unnamed
        except VGPUError as error:
            return error_to_wire(error)
        except Exception as error:  # a broker bug must not take the node's GPUs down with it
            log.exception("jupyter-vgpu broker: %s from %s failed", shorten(op), caller.user)
            return error_to_wire(VGPUError(f"The jupyter-vgpu broker failed on {shorten(op)}: {error}."))

    def serve(self, caller: Caller, op: str, args: dict[str, Any]) -> Any:
        """One contract operation for ``caller``, with the policy around what it asks for."""
        if "holder" in args:
            holder: Holder = args["holder"]
            keeper = None if holder.keeper is None else self._holder_pid(caller, holder.keeper)
            args["holder"] = replace(holder, pid=self._holder_pid(caller, holder.pid), keeper=keeper)
        if op == "join_hold":
            args["pid"] = self._joining_pid(caller, args.get("pid"))
        elif "pid" in args:
            args["pid"] = self._holder_pid(caller, args["pid"])
        if op == "reserve_now":
            return self._visible(caller, self._reserve_now(caller, args["request"], args["holder"]))
        if op == "enqueue":
            quota = self.quota(caller)
            with self._grant_lock:
                if (again := self.acting_for(caller).queued(args["holder"].token)) is not None:
                    return again  # asked again after a lost answer: the same place in line
                quotas.check_request(
                    quota, args["request"], self._held(caller), self._waiting_of(caller), queueing=True,
                    capacities=self._capacities(quota),
                )  # fmt: skip
                quotas.allowed_gpus(quota, self.ledger.inventory.snapshot(), args["request"])
                return self.acting_for(caller).enqueue(args["request"], args["holder"]).number
        if op == "try_grant":
            granted, reason = self._try_grant(caller, args["ticket"], bool(args.get("final", True)))
            return {"slice": None if granted is None else self._visible(caller, granted), "reason": reason}
        if op == "resize":
            return self._visible(caller, self._resize(caller, args["slice_id"], args["request"]))
        if op == "rebook":
            if args.get("split"):
                raise NotPermitted("The broker's ledger does not split; a slice is booked again only after an admin reset it.")
            return self._visible(caller, self._rebook(caller, args["record"], args["claim"]))
        result = getattr(self.acting_for(caller), op)(**args)
        if op in ("release", "reap"):
            self.drop_gone_uses()
        if op == "waiting":
            return [waiter_to_wire(self.visible_waiter(caller, w)) for w in self.with_allowed_gpus(result)]
        if isinstance(result, Slice):
            return self._visible(caller, result)
        if isinstance(result, list) and all(isinstance(s, Slice) for s in result):
            return [self._visible(caller, s) for s in result]
        return result

    def simulated_use(self, caller: Caller, used: Any, utilization: Any) -> bool:
        """What a process of one of the caller's slices says its frameworks hold on the simulated
        GPUs (:mod:`jupyter_vgpu.kernel.simulated`), listed as that process's memory on them as a
        driver would (:mod:`jupyter_vgpu.gpus.simulated_use`, in the broker's own folder): every
        user's server, ``jupyter vgpu status`` and the line then see it, as on real GPUs. Only on
        simulated GPUs, only for the asking process itself (the socket's peer), only while it is
        or descends from a holder of one of the caller's slices, only on that slice's GPUs, each
        figure within its GPU; the figure goes when the slice ends (hardening round five, M4)."""
        folder = self.ledger.inventory.use_folder
        if not self.simulate or folder is None:
            raise InvalidRequest("The broker's GPUs are not simulated: their driver says what each process holds.")
        if not isinstance(used, dict) or not isinstance(utilization or {}, dict):
            raise InvalidRequest("simulated_use takes used and utilization, each by GPU UUID.")
        gpus = self.ledger.inventory.snapshot().gpus
        sizes = {gpu.uuid: gpu.memory_total for gpu in gpus}
        indices = {gpu.uuid: gpu.index for gpu in gpus}
        held: dict[str, int] = {}
        busy: dict[str, int] = {}
        for gpu, amount in used.items():
            if gpu not in sizes:
                raise InvalidRequest(f"GPU {shorten(gpu)} is not one of the broker's simulated GPUs.")
            if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= sizes[gpu]:
                raise InvalidRequest(f"{shorten(amount)} bytes is not a use of GPU {gpu}.")
            load = (utilization or {}).get(gpu, 0)
            held[gpu] = amount
            busy[gpu] = load if isinstance(load, int) and not isinstance(load, bool) and 0 <= load <= 100 else 0
        mine = self._slice_of(caller)
        if mine is None:
            raise NotPermitted("Only a process of one of your slices says what it holds on the simulated GPUs.")
        for gpu in [g for g in held if g not in mine.gpus]:
            if held[gpu]:
                its = ", ".join(str(i) for i in mine.gpu_indices)
                raise NotPermitted(
                    f"GPU {indices[gpu]} is not a GPU of your slice {mine.id} (GPU {its}); "
                    "its processes hold memory on its GPUs only."
                )
            del held[gpu], busy[gpu]
        write_use(folder, held, busy, pid=caller.pid, slice_id=mine.id, uid=caller.uid)  # a folder per user (L-1)
        return True

    # -- kernels' idleness, as their servers judge it -------------------------------------------
    def report_idle(self, caller: Caller, slice_id: Any, since: Any) -> bool:
        """A user's server says that the kernel of ``slice_id`` has been idle since ``since`` (Unix
        time), or is busy now (``since`` None). Only for the caller's own slices: the owner's server
        alone judges its kernels (another user's slice, an admin's too, is refused). Kept in memory
        until the slice ends or the server has not said it again for ``IDLE_STALE_SECONDS``; it
        counts against nothing."""
        if not isinstance(slice_id, str) or not slice_id:
            raise InvalidRequest("idle takes the slice_id of one of your slices.")
        if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float)) or not 0 <= since <= 1e11):
            raise InvalidRequest(f"idle since {shorten(since)} is not a time (seconds since 1970), or null for busy now.")
        found = self.ledger.get(slice_id)
        if found.uid != caller.uid:
            raise NotPermitted(f"Slice {found.id} is not yours: only its owner's server says whether its kernel is idle.")
        now = time.time()
        with self._idle_lock:
            self._idle[found.id] = IdleFact(found.uid, None if since is None else min(float(since), now), now)
        return True

    def idle_seconds(self, slices: Any, now: float | None = None) -> dict[str, float]:
        """Seconds each of ``slices`` has been idle (0: busy), as its owner's server said lately;
        slices it said nothing of lately are left out."""
        now = time.time() if now is None else now
        seconds: dict[str, float] = {}
        with self._idle_lock:
            for s in slices:
                fact = self._idle.get(s.id)
                if fact is not None and fact.uid == s.uid and now - fact.said_at <= IDLE_STALE_SECONDS:
                    seconds[s.id] = 0.0 if fact.since is None else max(0.0, now - fact.since)
        return seconds

    def idle_times(self, caller: Caller) -> dict[str, float]:
        """The ``idle_times`` request: :meth:`idle_seconds` of the caller's own slices, every
        slice's for an admin (an exporter beside the broker, run as root)."""
        return self.idle_seconds([s for s in self.ledger.slices() if caller.admin or s.uid == caller.uid])

    def forget_idle(self) -> None:
        """Forget what was said of slices that have ended, and what has not been said again lately."""
        live = {s.id for s in self.ledger.slices()}
        now = time.time()
        with self._idle_lock:
            for sid in [sid for sid, fact in self._idle.items() if sid not in live or now - fact.said_at > IDLE_STALE_SECONDS]:
                del self._idle[sid]

    def _slice_of(self, caller: Caller) -> Slice | None:
        """The slice of the caller's user whose holder is the caller's process or its nearest
        ancestor that holds one (a command's program under its kernel's: the command's)."""
        holders = {s.pid: s for s in self._held(caller) if s.pid}
        try:
            chain = [caller.pid, *(p.pid for p in psutil.Process(caller.pid).parents())]
        except psutil.Error:
            return None
        return next((holders[pid] for pid in chain if pid in holders), None)

    def drop_gone_uses(self) -> None:
        """What processes said they hold for slices that have ended goes with them (M4: a child
        that outlived its kernel kept its figure, "used by processes without a slice")."""
        folder = self.ledger.inventory.use_folder
        if self.simulate and folder is not None:
            drop_uses(folder, {s.id for s in self.ledger.slices()})

    def info(self, caller: Caller) -> dict[str, Any]:
        source = self.policy.current()
        quota = self.quota(caller)
        return {
            "simulate": self.simulate,
            # a process of a slice says what it holds on the simulated GPUs (simulated_use)
            "simulated_use": bool(self.simulate) and self.ledger.inventory.use_folder is not None,
            "gpus_source": self.ledger.inventory.describe(),
            "context_allowance": self.ledger.context_allowance,
            "poll_interval": self.ledger.poll_interval,
            "user": caller.user,
            "admin": caller.admin,
            "policy": source.source,
            # the user's server applies it (it alone knows its kernels' activity)
            "idle_reclaim_after": quota.get("idle_reclaim_after")[0],
            # every limit for this user, with where it came from: the user's server applies the
            # reclaim terms (slices.terms), status and %vgpu show them all
            "limits": quota.describe(),
            "unlimited": quota.unlimited,
            # the site's Prometheus, for every user's cluster view (the server's own setting wins)
            "prometheus_url": source.prometheus_url or None,
        }

    # -- the policy around reserving -----------------------------------------------------------
    def _reserve_now(self, caller: Caller, request: SliceRequest, holder: Holder) -> Slice:
        quota = self.quota(caller)
        with self._grant_lock:
            if again := self.acting_for(caller).by_token(holder.token):
                return again  # asked again after a lost answer: what the first asking got
            held = self._held(caller)
            quotas.check_request(quota, request, held, self._waiting_of(caller), capacities=self._capacities(quota))
            granted = self.acting_for(caller, request).reserve_now(request, holder)
            self._check_granted(quota, granted, held)
        return granted

    def _try_grant(self, caller: Caller, ticket: Ticket, final: bool) -> tuple[Slice | None, str]:
        waiter = next((w for w in self.ledger.waiting() if w.ticket == ticket.number), None)
        if waiter is None:
            if (again := self.acting_for(caller).by_token(ticket.token)) is not None:
                return again, ""  # asked again after a lost answer: the slice the place was granted
            why = self._expired.pop(ticket.number, None)
            if why:  # the broker let it go: say why, not "cancelled"
                raise SliceUnavailable(why)
            raise LeftLine(f"Place {ticket.number} in line was cancelled (or its process ended).")
        quota = self.quota(caller)
        max_wait, source = quota.get("max_wait")
        overdue = max_wait is not None and time.time() - waiter.created >= max_wait
        view = self.acting_for(caller, waiter.request)
        with self._grant_lock:
            held = self._held(caller)
            try:
                waiting = self._waiting_of(caller, but=ticket.number)
                quotas.check_request(quota, waiter.request, held, waiting, capacities=self._capacities(quota))
            except NotPermitted:
                view.leave_queue(ticket)
                raise
            try:
                granted = view.try_grant(ticket, final=final or overdue)
            except SliceUnavailable as error:
                if overdue and not final:
                    raise SliceUnavailable(f"{caller.user}: waits at most {max_wait:g} s in line ({source}). {error}") from None
                raise
            if granted is None:
                return None, ticket.last_reason
            self._check_granted(quota, granted, held)
        return granted, ""

    def _resize(self, caller: Caller, slice_id: str, request: SliceRequest) -> Slice:
        quota = self.quota(caller)
        view = self.acting_for(caller)
        with self._grant_lock:
            found = view.get(slice_id)
            others = [s for s in self._held_by(found.uid) if s.id != found.id]
            if found.uid == caller.uid:
                # The user's whole request, judged before the ledger changes or the resize waits in
                # line for bursts given back (H1): a refused resize changes nothing and asks nothing back.
                def on_its_gpus(_: SliceRequest) -> tuple[int, ...]:
                    return found.memory_total

                quotas.check_limit(quota, request, on_its_gpus)
                quotas.check_size(quota, request, others, capacities=on_its_gpus)
            resized = view.resize(found.id, request)
            if found.uid == caller.uid:
                try:
                    quotas.check_slice(quota, resized, others)
                except NotPermitted:
                    self.ledger.resize(found.id, found.request)
                    raise
        return resized

    def _rebook(self, caller: Caller, record: Slice, claim: str) -> Slice:
        """Book again a slice that one of the caller's running processes holds and the node's
        ledger lost (an admin reset it): for the caller, with the slice's claim for the caller,
        held by its own process, on the GPUs its policy allows and within its quota (its number
        of slices with its places in line, its total), like any slice it gets."""
        keeper: Any = record.keeper_pid
        keeper = caller.pid if keeper == CALLER else keeper
        record = replace(
            record,
            pid=self._holder_pid(caller, record.pid),
            keeper_pid=None if keeper is None else self._holder_pid(caller, keeper),
        )
        quota = self.quota(caller)
        view = self.acting_for(caller, record.request)
        with self._grant_lock:
            held = self._held(caller)
            if record.id in {s.id for s in held}:
                return view.rebook(record, claim)  # booked already: found, not booked twice
            quotas.check_request(quota, record.request, held, self._waiting_of(caller), capacities=self._capacities(quota))
            booked = view.rebook(record, claim)
            self._check_granted(quota, booked, held)
        return booked

    def _check_granted(self, quota: Quota, granted: Slice, held: list[Slice]) -> None:
        try:
            quotas.check_slice(quota, granted, held)
        except NotPermitted:
            self.ledger.release(granted.id)
            raise

    # -- admin actions (the admin page calls these in-process) ---------------------------------
    def terminate(self, slice_id: str, *, by: str) -> Slice:
        """Release a slice and end its holder process (SIGTERM, if it is still the process that
        took the slice). A ``jupyter vgpu run`` command ends; a kernel's server may restart it."""
        found = self.ledger.get(slice_id)
        self.ledger.release(found.id)
        self.drop_gone_uses()
        if found.pid and found.pid != os.getpid():
            try:
                if process_alive(found.pid, found.pid_start, found.pid_stamp):
                    psutil.Process(found.pid).terminate()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        log.info("jupyter-vgpu broker: %s terminated the holder of slice %s of %s (%s).", by, found.id, found.owner, found.describe_holder())
        return found

    # -- helpers -----------------------------------------------------------------------------
    def snapshot_for(self, caller: Caller, *, telemetry: bool = False) -> Snapshot:
        """The GPUs as ``caller`` may see them: each process names the slice it counts against
        (only the broker knows every slice's holder), and another user's process comes without
        its pid (0) unless the caller is an admin. Memory and utilisation stay: they are the
        GPU's, and every view must add up to the same figures."""
        snapshot = self.ledger.inventory.snapshot(telemetry=telemetry)
        slices = self.ledger.slices()
        with self._owners_lock:
            owners = self._owners.owners(snapshot, {s.id: s.pid for s in slices})
        slice_uid = {s.id: s.uid for s in slices}

        def seen(proc: GPUProcess) -> GPUProcess:
            sid = owners.get(proc.pid)
            if caller.admin:
                return replace(proc, slice_id=sid)
            uid = slice_uid.get(sid) if sid is not None else process_uid(proc.pid)
            if uid == caller.uid:
                return replace(proc, slice_id=sid)
            return replace(proc, pid=0, slice_id=sid)

        return replace(snapshot, gpus=tuple(replace(g, processes=tuple(seen(p) for p in g.processes)) for g in snapshot.gpus))

    def visible(self, caller: Caller, s: Slice) -> Slice:
        """The slice as ``caller`` may see it: others' holders, labels, commands and pids hidden."""
        return s.seen_by(Actor(caller.user, caller.uid, caller.admin))

    def _visible(self, caller: Caller, s: Slice) -> dict[str, Any]:
        # with what the broker decided for its tier (HAMi-core's library: the broker's, not the caller's)
        return slice_to_wire(replace(self.visible(caller, s), tier_setup=by_tier(s.tier).setup()))

    def visible_waiter(self, caller: Caller, w: Waiter) -> Waiter:
        if caller.admin or w.uid == caller.uid:
            return w
        return replace(w, holder=HIDDEN_HOLDER[w.holder_kind], labels={}, pid=None)

    def _allowed_for_row(self, row: Any) -> frozenset[str] | None:
        """For the line's order: a request may pass an earlier one whose policy keeps it off the
        GPUs that are free."""
        return self.policy_gpus(row["owner"], row["uid"], SliceRequest.from_dict(json.loads(row["request"])))

    def with_allowed_gpus(self, waiters: list[Waiter]) -> list[Waiter]:
        """Each waiter with the GPUs its user's policy lets it use: a user's server frees an idle
        slice only for a waiter that the freed room would let in (server.reclaim)."""
        result = []
        for w in waiters:
            allowed = self.policy_gpus(w.owner, w.uid, w.request)
            result.append(w if allowed is None else replace(w, allowed_gpus=tuple(sorted(allowed))))
        return result

    def _gpus(self) -> Snapshot:
        """The node's GPUs, read at most once a second: one NVML pass serves a whole line."""
        seen, snapshot = self._gpus_seen
        if snapshot is None or time.monotonic() - seen > 1.0:
            snapshot = self.ledger.inventory.snapshot()
            self._gpus_seen = (time.monotonic(), snapshot)
        return snapshot

    def _capacities(self, quota: Quota) -> quotas.Capacities:
        return quotas.capacities_on(quota, self._gpus())

    def policy_gpus(self, owner: str, uid: int, request: SliceRequest) -> frozenset[str] | None:
        """The GPUs the policy lets ``owner``'s ``request`` use (None: any; empty: none here)."""
        if uid == 0:
            return None
        snapshot = self._gpus()
        quota = self.policy.current().quota(owner, user_groups(owner))
        try:
            return quotas.allowed_gpus(quota, snapshot, request)
        except NotPermitted:
            return frozenset()  # pinned to a GPU it may not use: nothing here lets it in

    def _holder_pid(self, caller: Caller, pid: int | None) -> int:
        """The caller itself, or a process of the caller's own uid (root: any)."""
        if pid is None:
            return caller.pid
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise InvalidRequest(f"pid {shorten(pid)} is not a process id.")
        owner = process_uid(pid)
        if owner is None:
            raise InvalidRequest(f"No process {pid} runs (in the broker's view of the node).")
        if caller.uid != 0 and owner != caller.uid:
            raise NotPermitted(f"Process {pid} belongs to {user_name(owner)}; a slice can be held only by your own processes.")
        return pid

    def _joining_pid(self, caller: Caller, pid: int | None) -> int:
        """A process joins its slice's cgroup itself: the caller, alive and still its user's (a pid
        the socket gave at connect could belong to another process since; 0 is a caller outside the
        broker's pid namespace, and writing 0 would move the broker itself)."""
        if pid is not None and pid != caller.pid:
            raise NotPermitted("A process joins its slice's memory partition itself; ask from that process.")
        if caller.pid <= 0 or process_uid(caller.pid) != caller.uid:
            raise NotPermitted("The asking process cannot be told apart here; ask from the process that joins.")
        return caller.pid

    def _held(self, caller: Caller) -> list[Slice]:
        """The caller's user's slices whose holders live (one whose process has just ended is not
        counted against a limit before the reaper frees it: L-4)."""
        return [s for s in self._held_by(caller.uid) if still_held(s)]

    def _waiting_of(self, caller: Caller, *, but: int | None = None) -> list[SliceRequest]:
        """What the caller's other places in line ask for (they count against its limits), those
        whose process has ended left out."""
        return [
            w.request
            for w in self.ledger.waiting()
            if w.uid == caller.uid and w.ticket != but and (w.pid is None or psutil.pid_exists(w.pid))
        ]

    def expire_waiters(self) -> list[Waiter]:
        """Take out of line every request that has waited longer than its user's ``max_wait``,
        on the broker's clock: a waiter that never asks again cannot outstay its limit."""
        expired = []
        now = time.time()
        for waiter in self.ledger.waiting():
            if waiter.uid == 0:
                continue
            max_wait, source = self.policy.current().quota(waiter.owner, user_groups(waiter.owner)).get("max_wait")
            if max_wait is None or now - waiter.created < max_wait:
                continue
            self.ledger.leave_queue(Ticket(waiter.ticket, waiter.request))
            self._expired[waiter.ticket] = (
                f"{waiter.owner}: waits at most {max_wait:g} s in line ({source}); "
                f"{waiter.request.describe()} was not free in time."
            )
            while len(self._expired) > 1024:
                self._expired.pop(next(iter(self._expired)))
            expired.append(waiter)
        return expired

    def _held_by(self, uid: int) -> list[Slice]:
        return [s for s in self.ledger.slices() if s.uid == uid]

    def reap_forever(self, interval: float, stop: threading.Event) -> None:
        """Free dead holders' slices every ``interval`` seconds (a restarted broker catches up at once)."""
        while not stop.is_set():
            try:
                for dead in self.ledger.reap():
                    log.info("jupyter-vgpu broker: freed slice %s of %s (%s): its process ended.", dead.id, dead.owner, dead.describe_holder())
                self.drop_gone_uses()
                self.forget_idle()
                for waiter in self.expire_waiters():
                    log.info("jupyter-vgpu broker: %s's request for %s waited past its limit.", waiter.owner, waiter.request.describe())
            except VGPUError as error:
                log.warning("jupyter-vgpu broker: reaping failed: %s", error)
            stop.wait(interval)
