"""The ledger in a SQLite file: the user's own, or the node's when the broker keeps it.

The file itself (schema, transactions) is :mod:`.store`; what it holds is :mod:`.records`.
Every reservation places against one :mod:`occupancy <.occupancy>` of the GPUs, computed
inside the writers' turn, so two processes never place against the same free memory. A slice
whose holder process is gone (pid plus start time, so a reused pid does not count) is
reclaimed by the next reservation, the server's monitor or ``jupyter vgpu gc``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, LeftLine, NeverFits, NoGPU, NotPermitted, SliceNotFound, SliceUnavailable
from ..gpus import Inventory, Snapshot, partition
from ..gpus.context import context_allowance
from ..units import format_bytes, shorten
from .holders import attribute, boot_clock, process_alive, process_start, start_stamp
from .ledger import Ledger
from .occupancy import GPUOccupancy, Occupancy, occupancy_of
from .placement import Placement, place
from .records import Actor, Holder, Slice, Ticket, Tier, Waiter, clean_labels, is_slice_id
from .refusal import Refusal
from .request import SliceRequest
from .store import RESET_GRACE, LedgerFile, book_id, reset_grace_left

__all__ = ["SQLiteLedger"]

#: A slice id is 12 hex digits; a prefix names one when it has at least this many.
MIN_PREFIX = 6

#: A place in line whose requester has not asked for it for this many seconds is dropped: a
#: waiting request asks every poll interval (a fraction of a second), one that stopped (its
#: process hangs or ignores the line) must not hold everyone else back.
STALE_WAITER = 30.0

#: At most this many requests wait in line at once (a bound on what anyone can queue).
MAX_WAITING = 256

#: A place in line that waited this long is no longer passed on the GPUs it is likeliest to get
#: (see :meth:`SQLiteLedger._backfill`); younger ones are passed by requests that fit now.
BACKFILL_SECONDS = 120.0


def held(slice_: Slice) -> bool:
    """A slice is held while its holder runs, or its keeper (the server that restarts its kernel)."""
    if process_alive(slice_.pid, slice_.pid_start, slice_.pid_stamp):
        return True
    return slice_.keeper_pid is not None and process_alive(slice_.keeper_pid, slice_.keeper_start, slice_.keeper_stamp)


class SQLiteLedger(Ledger):
    """Reserve, release and list slices in the SQLite file at ``path``.

    One instance per process is enough; it is safe to share between threads. It acts for
    ``actor`` (default: this process's user); :meth:`acting_for` gives a view of the same file
    that acts for someone else and may keep placement to some GPUs (the broker's callers).
    """

    def __init__(
        self,
        path: str | Path,
        inventory: Inventory,
        *,
        context_allowance: int | None = None,
        poll_interval: float = 0.25,
        actor: Actor | None = None,
        waiter_timeout: float = STALE_WAITER,
        name: str | None = None,
        read_only_ok: bool = False,
    ) -> None:
        self.inventory = inventory
        self.name = name  # how messages name this ledger (the broker's: not its private path)
        self.waiter_timeout = waiter_timeout
        self.context_allowance = context_allowance
        self.poll_interval = poll_interval
        self.actor = actor or Actor.this_process()
        self.allowed_gpus: frozenset[str] | None = None
        #: The GPUs an earlier place in line may use (its row; None: any): the broker's policy. A
        #: request passes an earlier one that cannot be placed on what its policy allows.
        self.allowed_for_row: Callable[[sqlite3.Row], frozenset[str] | None] = lambda row: None
        self.file = LedgerFile(path, read_only_ok=read_only_ok)  # (status reads a ledger it cannot change)
        self.path = self.file.path
        self._recorded_gpus: list[tuple[tuple[str, int, str, int], ...] | None] = [None]

    def allowance_for(self, gpu: GPUOccupancy) -> int:
        """The CUDA-context allowance on ``gpu``: the setting, or by its compute capability."""
        if self.context_allowance is not None:
            return self.context_allowance
        return context_allowance(gpu.gpu.compute_capability)

    def acting_for(self, actor: Actor, *, allowed_gpus: Collection[str] | None = None) -> SQLiteLedger:
        """The same file (one connection), acting for ``actor``, placing only on ``allowed_gpus``."""
        view = replace_ledger(self)
        view.actor = actor
        view.allowed_gpus = None if allowed_gpus is None else frozenset(allowed_gpus)
        return view

    def location(self) -> str:
        return self.name or f"ledger {self.path}"

    def close(self) -> None:
        self.file.close()

    def check_split(self) -> str | None:
        return self.file.check_split()

    # -- reading --------------------------------------------------------------------------
    def slices(self) -> list[Slice]:
        with self.file.transaction(write=False) as db:
            return self._read_slices(db)

    def get(self, slice_id: str) -> Slice:
        with self.file.transaction(write=False) as db:
            return self._find(db, slice_id)

    def waiting(self) -> list[Waiter]:
        with self.file.transaction(write=False) as db:
            rows = db.execute("SELECT * FROM queue ORDER BY ticket").fetchall()
        return [
            Waiter(
                ticket=row["ticket"],
                position=position,
                owner=row["owner"],
                uid=row["uid"],
                holder_kind=row["holder_kind"],
                holder=row["holder"],
                pid=row["pid"],
                request=SliceRequest.from_dict(json.loads(row["request"])),
                labels=json.loads(row["labels"]),
                created=row["created"],
            )
            for position, row in enumerate(rows, start=1)
        ]

    def book_id(self) -> str:
        with self.file.transaction(write=False) as db:
            return book_id(db)

    def occupancy(self) -> Occupancy:
        """Every GPU now, as placement sees it (process trees walked afresh)."""
        snapshot = self.inventory.snapshot()
        slices = self.slices()
        return occupancy_of(snapshot, slices, attribute(snapshot, {s.id: s.pid for s in slices}))

    def _read_slices(self, db: sqlite3.Connection, where: str = "", args: tuple[Any, ...] = ()) -> list[Slice]:
        rows = db.execute(f"SELECT * FROM slices {where} ORDER BY created, id", args).fetchall()
        gpu_rows: dict[str, list[sqlite3.Row]] = {}
        for g in db.execute("SELECT * FROM slice_gpus ORDER BY slice_id, gpu_index").fetchall():
            gpu_rows.setdefault(g["slice_id"], []).append(g)
        result = []
        for row in rows:
            gs = gpu_rows.get(row["id"], [])
            result.append(
                Slice(
                    id=row["id"],
                    owner=row["owner"],
                    uid=row["uid"],
                    holder_kind=row["holder_kind"],
                    holder=row["holder"],
                    pid=row["pid"],
                    pid_start=row["pid_start"],
                    gpus=tuple(g["gpu_uuid"] for g in gs),
                    gpu_indices=tuple(g["gpu_index"] for g in gs),
                    memory=tuple(g["memory"] for g in gs),
                    memory_total=tuple(g["memory_total"] for g in gs),
                    context_allowance=row["context_allowance"],
                    logical_devices=row["logical_devices"],
                    request=SliceRequest.from_dict(json.loads(row["request"])),
                    labels=json.loads(row["labels"]),
                    created=row["created"],
                    tier=Tier(row["tier"]),
                    mig_devices=tuple(g["mig_device"] for g in gs if g["mig_device"]),
                    mig_profiles=tuple(g["mig_profile"] or "" for g in gs if g["mig_device"]),
                    keeper_pid=row["keeper_pid"],
                    keeper_start=row["keeper_start"],
                    pid_stamp=row["pid_stamp"],
                    keeper_stamp=row["keeper_stamp"],
                )
            )
        return result

    def _find(self, db: sqlite3.Connection, slice_id: str) -> Slice:
        """The slice whose id is exactly ``slice_id``, or the only one it is a literal prefix of."""
        text = str(slice_id).strip()
        found = self._read_slices(db, "WHERE id = ?", (text,))
        if not found and len(text) >= MIN_PREFIX and text.isalnum():
            # a literal prefix: substr(), not LIKE, so % and _ are only themselves
            found = self._read_slices(db, "WHERE substr(id, 1, ?) = ?", (len(text), text))
        if len(found) != 1:
            raise SliceNotFound(f"No slice {shorten(text)} in the {self.location()}; `jupyter vgpu status` lists them.")
        return found[0]

    def _mine(self, db: sqlite3.Connection, slice_id: str, action: str) -> Slice:
        """The slice, if this ledger's actor may ``action`` it (the one ownership check)."""
        found = self._find(db, slice_id)
        if not self.actor.may_change(found.uid):
            raise NotPermitted(f"Slice {found.id} belongs to {found.owner}; you can {action} only your own slices.")
        return found

    # -- reserving ----------------------------------------------------------------------
    def reserve_now(self, request: SliceRequest, holder: Holder) -> Slice:
        snapshot = self._available_snapshot()
        fields = self._holder_fields(request, holder)
        with self.file.transaction() as db:
            granted, reason = self._grant(db, snapshot, request, fields, ticket=None)
        if granted is None:
            raise reason
        return granted

    def by_token(self, token: str | None) -> Slice | None:
        """The slice this ledger's actor got with request token ``token``, if any."""
        if not token:
            return None
        with self.file.transaction(write=False) as db:
            found = self._read_slices(db, "WHERE uid = ? AND token = ?", (self.actor.uid, token))
        return found[0] if found else None

    def queued(self, token: str | None) -> int | None:
        """The place in line this ledger's actor got with request token ``token``, if any."""
        if not token:
            return None
        with self.file.transaction(write=False) as db:
            row = db.execute("SELECT ticket FROM queue WHERE uid = ? AND token = ?", (self.actor.uid, token)).fetchone()
        return None if row is None else int(row["ticket"])

    def enqueue(self, request: SliceRequest, holder: Holder) -> Ticket:
        fields = self._holder_fields(request, holder)
        with self.file.transaction() as db:
            if holder.token:  # asked again after a lost answer: the same place in line
                row = db.execute(
                    "SELECT ticket FROM queue WHERE uid = ? AND token = ?", (fields["uid"], holder.token)
                ).fetchone()
                if row is not None:
                    return Ticket(number=row["ticket"], request=request)
            waiting = db.execute("SELECT count(*) FROM queue").fetchone()[0]
            if waiting >= MAX_WAITING:
                raise SliceUnavailable(
                    f"{waiting} requests already wait in line for a slice (at most {MAX_WAITING}); try again later."
                )
            cursor = db.execute(
                "INSERT INTO queue (owner, uid, holder_kind, holder, pid, pid_start, request, labels, created, polled,"
                " keeper_pid, keeper_start, pid_stamp, keeper_stamp, asked, token) VALUES (:owner, :uid, :holder_kind,"
                " :holder, :pid, :pid_start, :request, :labels, :created, :created, :keeper_pid, :keeper_start,"
                " :pid_stamp, :keeper_stamp, :asked, :token)",
                {**fields, "asked": boot_clock()},
            )
            assert cursor.lastrowid is not None
            return Ticket(number=cursor.lastrowid, request=request)

    def leave_queue(self, ticket: Ticket) -> None:
        with self.file.transaction() as db:
            row = db.execute("SELECT uid FROM queue WHERE ticket = ?", (int(ticket.number),)).fetchone()
            if row is None:
                return
            if not self.actor.may_change(row["uid"]):
                raise NotPermitted(f"Place {ticket.number} in line is not yours.")
            db.execute("DELETE FROM queue WHERE ticket = ?", (int(ticket.number),))

    def try_grant(self, ticket: Ticket, *, final: bool = True) -> Slice | None:
        snapshot = self._available_snapshot()
        with self.file.transaction() as db:
            row = db.execute("SELECT * FROM queue WHERE ticket = ?", (int(ticket.number),)).fetchone()
            if row is None:
                raise LeftLine(f"Place {ticket.number} in line was cancelled (or its process ended).")
            if not self.actor.may_change(row["uid"]):
                raise NotPermitted(f"Place {ticket.number} in line belongs to {row['owner']}, not to {self.actor.user}.")
            db.execute(
                "UPDATE queue SET polled = ?, asked = ? WHERE ticket = ?", (time.time(), boot_clock(), int(ticket.number))
            )
            request = SliceRequest.from_dict(json.loads(row["request"]))
            try:
                granted, reason = self._grant(db, snapshot, request, dict(row), ticket=int(ticket.number))
            except SliceUnavailable:  # waiting cannot help: leave the line at once
                db.execute("DELETE FROM queue WHERE ticket = ?", (int(ticket.number),))
                raise
        if granted is None:
            ticket.last_reason = str(reason)
            if final:
                raise reason
        return granted

    def _available_snapshot(self) -> Snapshot:
        snapshot = self.inventory.snapshot()
        if not snapshot.available:
            raise NoGPU(snapshot.message or "No GPU is available.")
        return snapshot

    def _occupancy(self, db: sqlite3.Connection, snapshot: Snapshot, slices: list[Slice]) -> Occupancy:
        """The GPUs as this ledger's actor may see them: what others hold counts in full, but
        their holders are not named (so refusals and explanations built from it are theirs to read)."""
        attribution = attribute(snapshot, {s.id: s.pid for s in slices})
        return occupancy_of(snapshot, [s.seen_by(self.actor) for s in slices], attribution)

    def _grant(
        self, db: sqlite3.Connection, snapshot: Snapshot, request: SliceRequest, fields: dict[str, Any], ticket: int | None
    ) -> tuple[Slice | None, SliceUnavailable]:
        """Inside a write transaction: place and record the slice, or say why not."""
        if fields.get("token"):  # asked again after a lost answer: what the first asking got
            again = self._read_slices(db, "WHERE uid = ? AND token = ?", (fields["uid"], fields["token"]))
            if again:
                if ticket is not None:
                    db.execute("DELETE FROM queue WHERE ticket = ?", (ticket,))
                return again[0], SliceUnavailable()
        if (left := reset_grace_left(db)) > 0:  # the servers book their running kernels' slices first
            return None, SliceUnavailable(
                f"The {self.location()} was reset {RESET_GRACE - left:.0f} s ago and the Jupyter servers are booking "
                f"their running kernels' slices in it again; new slices wait until that is done, at most {left:.0f} s more."
            )
        self._record_gpus(db, snapshot)
        slices = self._read_slices(db)
        dead = {s.id for s in self._reap(db, slices)}
        live = [s for s in slices if s.id not in dead]
        earlier = self._ahead(db, request, fields["uid"], ticket)
        gpus = self._occupancy(db, snapshot, live).gpus
        placement = place(request, gpus, allowance=self.allowance_for, allowed=self.allowed_gpus)
        if placement.permanent:
            raise NeverFits(f"Cannot reserve {request.describe()}: {placement.reason} Waiting cannot help: ask for less.")
        ahead = len(earlier)
        if earlier and placement:
            placement, ahead = self._backfill(request, earlier, gpus, placement)
        if ahead or not placement:
            refusal = Refusal.of(request, placement.candidates, self.allowance_for, ahead=ahead, fits=bool(placement))
            return None, SliceUnavailable(refusal.text(), detail=refusal.to_dict())
        slice_id = uuid.uuid4().hex[:12]
        instances = placement.instances or (None,) * len(placement.chosen)
        self._insert(
            db,
            {
                **fields,
                "id": slice_id,
                "context": max(self.allowance_for(gpu) for gpu, _ in placement.chosen),
                "logical": request.logical_devices,
                "now": time.time(),
                "tier": placement.tier.value,
            },
            [
                (gpu.uuid, gpu.index, amount, gpu.total, mig.device.uuid if mig else None, mig.device.profile if mig else None)
                for (gpu, amount), mig in zip(placement.chosen, instances)
            ],
        )
        if ticket is not None:
            db.execute("DELETE FROM queue WHERE ticket = ?", (ticket,))
        return self._find(db, slice_id), SliceUnavailable()

    @staticmethod
    def _insert(db: sqlite3.Connection, values: dict[str, Any], gpus: list[tuple[Any, ...]]) -> None:
        """Record one slice: its row (``values``: the holder's fields, id, context, logical, now,
        tier) and one row per GPU (uuid, index, memory, memory_total, MIG device, MIG profile)."""
        db.execute(
            "INSERT INTO slices (id, owner, uid, holder_kind, holder, pid, pid_start, context_allowance,"
            " logical_devices, request, labels, created, tier, keeper_pid, keeper_start, pid_stamp, keeper_stamp,"
            " token) VALUES (:id, :owner, :uid, :holder_kind, :holder, :pid, :pid_start, :context, :logical,"
            " :request, :labels, :now, :tier, :keeper_pid, :keeper_start, :pid_stamp, :keeper_stamp, :token)",
            values,
        )
        db.executemany(
            "INSERT INTO slice_gpus (slice_id, gpu_uuid, gpu_index, memory, memory_total, mig_device, mig_profile)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(values["id"], *gpu) for gpu in gpus],
        )

    @staticmethod
    def _ahead(db: sqlite3.Connection, request: SliceRequest, uid: int, ticket: int | None) -> list[sqlite3.Row]:
        """The earlier places in line this request waits behind: first come, first served, with
        two bounds on what others can hold back (README.md, "Waiting in line"): another user
        blocks it with their earliest place only, and a place pinned to another GPU not at all."""
        rows = db.execute(
            "SELECT ticket, uid, owner, request, created FROM queue" + (" WHERE ticket < ?" if ticket is not None else "")
            + " ORDER BY ticket",
            () if ticket is None else (ticket,),
        ).fetchall()
        seen: set[int] = set()
        ahead = []
        for row in rows:
            first_of_user = row["uid"] not in seen
            seen.add(row["uid"])
            if row["uid"] != uid and not first_of_user:
                continue
            pinned = json.loads(row["request"]).get("gpu")
            if pinned is not None and request.gpu is not None and str(pinned) != str(request.gpu):
                continue
            ahead.append(row)
        return ahead

    def _backfill(
        self, request: SliceRequest, earlier: list[sqlite3.Row], gpus: tuple[GPUOccupancy, ...], placement: Placement
    ) -> tuple[Placement, int]:
        """A request that fits now may pass earlier places in line that cannot be placed now (one
        ``--wait`` for a whole GPU must not stop everyone's quarter): the placement it gets, and how
        many earlier places it still waits behind (0: it goes first). It never passes one that fits
        now (that one takes it at its next try). A place that has waited :data:`BACKFILL_SECONDS`
        keeps the GPUs it is likeliest to get first (the freest that can hold it): requests that
        pass it go elsewhere or wait, so it is not passed for ever."""
        drained: set[str] = set()
        now = time.time()
        for row in earlier:
            waiting = SliceRequest.from_dict(json.loads(row["request"]))
            try:
                if place(waiting, gpus, allowance=self.allowance_for, allowed=self.allowed_for_row(row)):
                    return placement, len(earlier)  # it fits now: first come, first served
            except (InvalidRequest, NotPermitted):
                continue  # pinned to a GPU that is gone or not its own: it waits for nothing here
            if now - row["created"] >= BACKFILL_SECONDS:
                big_enough = [g for g in gpus if not g.in_mig_mode and waiting.amount_on(g.total) <= g.total]
                big_enough.sort(key=lambda g: (-g.free, g.index))
                drained.update(g.uuid for g in big_enough[: waiting.gpus])
        if not drained:
            return placement, 0
        allowed = {g.uuid for g in gpus if self.allowed_gpus is None or g.uuid in self.allowed_gpus} - drained
        if not allowed:
            return Placement(candidates=placement.candidates), len(earlier)
        elsewhere = place(request, gpus, allowance=self.allowance_for, allowed=allowed)
        return (elsewhere, 0) if elsewhere else (placement, len(earlier))

    def _record_gpus(self, db: sqlite3.Connection, snapshot: Snapshot) -> None:
        # The capacities the over-commitment check reads; written only when they change.
        known = tuple((g.uuid, g.index, g.name, g.memory_usable) for g in snapshot.gpus)
        if known == self._recorded_gpus[0]:
            return
        self._recorded_gpus[0] = known
        now = time.time()
        db.executemany(
            "INSERT INTO gpus (uuid, idx, name, memory_total, seen) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(uuid) DO UPDATE SET idx = excluded.idx, name = excluded.name,"
            " memory_total = excluded.memory_total, seen = excluded.seen",
            [(g.uuid, g.index, g.name, g.memory_usable, now) for g in snapshot.gpus],
        )

    def _holder_fields(self, request: SliceRequest, holder: Holder) -> dict[str, Any]:
        from os import getpid

        pid = getpid() if holder.pid is None else holder.pid
        return {
            "keeper_pid": holder.keeper,
            "keeper_start": process_start(holder.keeper) if holder.keeper else None,
            "keeper_stamp": start_stamp(holder.keeper) if holder.keeper else None,
            "owner": self.actor.user,
            "uid": self.actor.uid,
            "holder_kind": holder.kind,
            "holder": holder.name,
            "pid": pid,
            "pid_start": process_start(pid),
            "pid_stamp": start_stamp(pid),
            "request": json.dumps(request.to_dict()),
            "labels": json.dumps(dict(holder.labels)),
            "created": time.time(),
            "token": holder.token,
        }

    # -- holders ------------------------------------------------------------------------
    def attach(self, slice_id: str, pid: int) -> Slice:
        with self.file.transaction() as db:
            found = self._mine(db, slice_id, "attach a process to")
            db.execute(
                "UPDATE slices SET pid = ?, pid_start = ?, pid_stamp = ? WHERE id = ?",
                (pid, process_start(pid), start_stamp(pid), found.id),
            )
            return self._find(db, found.id)

    def join_partition(self, slice_id: str, pid: int) -> str:
        with self.file.transaction(write=False) as db:
            found = self._mine(db, slice_id, "join the memory partition of")
        if found.tier is not Tier.MPS_PARTITION:
            raise InvalidRequest(
                f"Slice {found.id} is {found.tier.describe()}, not a slice with a memory partition to join."
            )
        cgroup = partition.slice_cgroup(found.id)
        if not cgroup.is_dir():
            self._set_partition(found)
        partition.move(cgroup, pid)
        return str(cgroup)

    def _set_partition(self, slice_: Slice) -> None:
        """The slice's cgroup with its memory on each of its GPUs as the limit (0 on the others)."""
        partition.create(slice_.id, self.inventory.partition_limits(dict(zip(slice_.gpus, slice_.memory))))

    def _partitions_gone(self, ended: list[Slice]) -> None:
        """Remove the cgroups of slices that ended (one still in use goes at a later reap)."""
        for s in ended:
            if s.tier is Tier.MPS_PARTITION:
                partition.remove(s.id)  # never raises: the slice has ended either way

    def update_labels(self, slice_id: str, labels: Mapping[str, str | None]) -> Slice:
        changes = clean_labels(labels, removable=True)
        with self.file.transaction() as db:
            found = self._mine(db, slice_id, "relabel")
            merged = dict(found.labels)
            for key, value in changes.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            clean_labels(merged)  # the result stays within the bounds
            db.execute("UPDATE slices SET labels = ? WHERE id = ?", (json.dumps(merged), found.id))
            return self._find(db, found.id)

    def resize(self, slice_id: str, request: SliceRequest) -> Slice:
        snapshot = self._available_snapshot()
        with self.file.transaction() as db:
            found = self._mine(db, slice_id, "resize")
            if found.tier is Tier.MIG:
                raise InvalidRequest(
                    f"Slice {found.id} is a whole MIG device ({', '.join(found.mig_profiles)}), which cannot change "
                    "size; start a kernel with a different share to get another MIG device."
                )
            if request.gpus != len(found.gpus):
                raise InvalidRequest(
                    f"A resize keeps the GPU count ({len(found.gpus)}); gpus={request.gpus} needs a new slice."
                )
            others = [s for s in self._read_slices(db) if s.id != found.id]
            gpus = self._occupancy(db, snapshot, others)
            changes = []
            for gpu_uuid in found.gpus:
                gpu = gpus.gpu(gpu_uuid)
                if gpu is None:
                    raise SliceUnavailable(f"GPU {gpu_uuid} of slice {found.id} is no longer present.")
                need = request.amount_on(gpu.total)
                if need <= found.context_allowance:
                    raise InvalidRequest(
                        f"{request.describe()} is {format_bytes(need)}, not more than the CUDA-context allowance "
                        f"({format_bytes(found.context_allowance)}); ask for more memory."
                    )
                if need > gpu.free:
                    raise SliceUnavailable(f"Cannot resize slice {found.id} to {request.describe()}: {gpu.explain()}.")
                changes.append((need, found.id, gpu_uuid))
            db.executemany("UPDATE slice_gpus SET memory = ? WHERE slice_id = ? AND gpu_uuid = ?", changes)
            stored = {**request.to_dict(), "gpu": found.request.gpu, "placement": found.request.placement}
            db.execute(
                "UPDATE slices SET request = ?, logical_devices = ? WHERE id = ?",
                (json.dumps(stored), request.logical_devices, found.id),
            )
            resized = self._find(db, found.id)
            if resized.tier is Tier.MPS_PARTITION and partition.slice_cgroup(found.id).is_dir():
                self._set_partition(resized)  # the driver's limit follows (a refusal undoes the resize)
            return resized

    def rebook(self, record: Slice) -> Slice:
        request = record.request
        if not is_slice_id(record.id):
            raise InvalidRequest(f"{shorten(record.id)} is not a slice id (12 hex digits).")
        count = len(record.gpus)
        if not count or count != request.gpus or len(set(record.gpus)) != count or len(record.memory) != count:
            raise InvalidRequest(f"Slice {record.id} must name each of its {request.gpus} GPUs once, with its memory on each.")
        holder = Holder(record.holder_kind, record.holder, record.pid, record.labels, record.keeper_pid)
        fields = self._holder_fields(request, holder)
        snapshot = self._available_snapshot()
        on = {g.uuid: g for g in snapshot.gpus}
        with self.file.transaction() as db:
            found = self._read_slices(db, "WHERE id = ?", (record.id,))
            if found:
                if found[0].uid == self.actor.uid and (found[0].holder_kind, found[0].holder) == (holder.kind, holder.name):
                    return found[0]  # booked already (by an earlier try, or never lost)
                raise NotPermitted(f"Slice {record.id} is booked for another holder; only a lost slice can be booked again.")
            gone = [u for u in record.gpus if u not in on]
            if gone:
                raise SliceUnavailable(f"Cannot book slice {record.id} again: GPU {shorten(gone[0])} is no longer present.")
            if self.allowed_gpus is not None and not set(record.gpus) <= self.allowed_gpus:
                raise NotPermitted(f"Cannot book slice {record.id} again: the policy does not let {self.actor.user} use its GPUs.")
            for uuid_, amount in zip(record.gpus, record.memory):
                if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= on[uuid_].memory_usable:
                    raise InvalidRequest(f"Slice {record.id}'s memory {shorten(amount)} on GPU {on[uuid_].index} is not a size there.")
            context = record.context_allowance
            if isinstance(context, bool) or not isinstance(context, int) or not 0 <= context < min(record.memory):
                raise InvalidRequest(f"Slice {record.id}'s context allowance {shorten(context)} is not a size within it.")
            created = record.created if isinstance(record.created, (int, float)) and 0 < record.created <= time.time() else time.time()
            wanted = Slice(
                **{k: fields[k] for k in ("owner", "uid", "pid", "pid_start", "keeper_start", "pid_stamp", "keeper_stamp")},
                id=record.id, holder_kind=holder.kind, holder=holder.name, keeper_pid=holder.keeper,
                gpus=tuple(record.gpus), gpu_indices=tuple(on[u].index for u in record.gpus), memory=tuple(record.memory),
                memory_total=tuple(on[u].memory_usable for u in record.gpus), context_allowance=context,
                logical_devices=request.logical_devices, request=request, labels=dict(holder.labels), created=created,
                tier=record.tier, mig_devices=tuple(record.mig_devices), mig_profiles=tuple(record.mig_profiles),
            )  # fmt: skip
            if not held(wanted):
                raise InvalidRequest(f"Slice {record.id}'s holder (process {wanted.pid}) is not running; it needs no slice.")
            left = reset_grace_left(db)
            if left > 0 and _started_since(wanted.pid_stamp, RESET_GRACE - left):
                raise NotPermitted(  # while new slices wait, only what ran before the reset goes in
                    f"Process {wanted.pid} started after the {self.location()} was reset, so it held no slice to book again."
                )
            self._record_gpus(db, snapshot)
            slices = self._read_slices(db)
            dead = {s.id for s in self._reap(db, slices)}
            live = [s for s in slices if s.id not in dead]
            taken = {d for s in live for d in s.mig_devices} & set(wanted.mig_devices)
            if taken:
                raise SliceUnavailable(f"Cannot book slice {record.id} again: its MIG device is held by another slice now.")
            together = self._occupancy(db, snapshot, [*live, wanted])
            for n, uuid_ in enumerate(wanted.gpus):
                gpu = together.gpu(uuid_)
                assert gpu is not None
                mig = wanted.mig_devices[n] if n < len(wanted.mig_devices) else None
                if (wanted.tier is Tier.MIG or wanted.mig_devices) and mig not in {m.device.uuid for m in gpu.mig}:
                    raise InvalidRequest(f"Slice {record.id} must name one MIG device of GPU {gpu.index} for each GPU, and only a MIG slice any.")
                others_over = sum(s.over_use for s in gpu.shares if s.slice.id != wanted.id)
                if not gpu.in_mig_mode and gpu.reserved + others_over + gpu.foreign > gpu.total:
                    before = self._occupancy(db, snapshot, live).gpu(uuid_)
                    assert before is not None
                    raise SliceUnavailable(
                        f"GPU {gpu.index} no longer has room for slice {record.id} ({request.describe()}): {before.explain()}."
                    )
            self._insert(
                db,
                {**fields, "id": wanted.id, "context": context, "logical": request.logical_devices, "now": created,
                 "tier": wanted.tier.value, "token": None},
                [
                    (u, i, m, t, wanted.mig_devices[n] if wanted.mig_devices else None,
                     wanted.mig_profiles[n] if n < len(wanted.mig_profiles) else None)
                    for n, (u, i, m, t) in enumerate(zip(wanted.gpus, wanted.gpu_indices, wanted.memory, wanted.memory_total))
                ],
            )  # fmt: skip
            return self._find(db, wanted.id)

    def release(self, slice_id: str) -> Slice:
        with self.file.transaction() as db:
            found = self._mine(db, slice_id, "release")
            db.execute("DELETE FROM slices WHERE id = ?", (found.id,))
        self._partitions_gone([found])
        return found

    def reap(self) -> list[Slice]:
        with self.file.transaction() as db:
            dead = self._reap(db)
            live = [s.id for s in self._read_slices(db)]
        self._partitions_gone(dead)
        if partition.parent_cgroup().is_dir():
            partition.sweep(live)  # cgroups left by a crash, or busy when their slice ended
        return dead

    def _reap(self, db: sqlite3.Connection, slices: list[Slice] | None = None) -> list[Slice]:
        if slices is None:
            slices = self._read_slices(db)
        dead = [s for s in slices if not held(s)]
        for s in dead:
            db.execute("DELETE FROM slices WHERE id = ?", (s.id,))
        now, wall = boot_clock(), time.time()
        for row in db.execute("SELECT ticket, pid, pid_start, pid_stamp, created, polled, asked FROM queue").fetchall():
            # unasked for too long, on the boot clock (a place an older version wrote: on the wall clock)
            idle = now - row["asked"] if row["asked"] is not None else wall - (row["polled"] or row["created"])
            if not process_alive(row["pid"], row["pid_start"], row["pid_stamp"]) or idle > self.waiter_timeout:
                db.execute("DELETE FROM queue WHERE ticket = ?", (row["ticket"],))
        return dead

    # -- checks ---------------------------------------------------------------------------
    def overcommitted(self) -> list[tuple[str, int, int]]:
        with self.file.transaction(write=False) as db:
            rows = db.execute(
                "SELECT g.uuid, r.reserved, g.memory_total FROM gpus g JOIN"
                " (SELECT gpu_uuid, SUM(memory) AS reserved FROM slice_gpus GROUP BY gpu_uuid) r"
                " ON r.gpu_uuid = g.uuid WHERE r.reserved > g.memory_total"
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]


def _started_since(stamp: str | None, seconds: float) -> bool:
    """Whether the process with this start stamp (boot id and start ticks) started within the last
    ``seconds`` (False when the stamp cannot tell)."""
    ticks = (stamp or "").rpartition(":")[2]
    if not ticks.isdigit():
        return False
    return int(ticks) / os.sysconf("SC_CLK_TCK") > boot_clock() - seconds


def replace_ledger(ledger: SQLiteLedger) -> SQLiteLedger:
    """A shallow copy sharing the file and its connection (for :meth:`SQLiteLedger.acting_for`)."""
    view = SQLiteLedger.__new__(SQLiteLedger)
    view.__dict__.update(ledger.__dict__)
    return view

