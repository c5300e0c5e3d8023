"""The ledger in a SQLite file: the user's own, or the node's when the broker keeps it.

The file itself (schema, transactions) is :mod:`.file` (and :mod:`.schema`); what it holds is :mod:`jupyter_vgpu.slices.records`.
Every reservation places against one :mod:`occupancy <.occupancy>` of the GPUs, computed
inside the writers' turn, so two processes never place against the same free memory. A slice
whose holder process is gone (pid plus start time, so a reused pid does not count) is
reclaimed by the next reservation, the server's monitor or ``jupyter vgpu gc``.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from .. import enforcement
from ..enforcement import by_tier
from ..enforcement.base import Where
from ..errors import InvalidRequest, LeftLine, NeverFits, NoGPU, NotPermitted, SliceNotFound, SliceUnavailable
from ..gpus import Inventory, Snapshot
from ..gpus.context import context_allowance
from ..slices.holders import attribute, boot_clock, held, process_alive, process_start, start_stamp
from ..slices.occupancy import GPUOccupancy, Occupancy, occupancy_of, within_requests
from ..slices.placement import needs, place
from ..slices.records import Actor, Holder, Slice, Ticket, Waiter, clean_labels
from ..slices.refusal import Refusal
from ..slices.reports import report_dir
from ..slices.request import SliceRequest
from ..units import format_bytes, shorten
from . import line
from .claims import Claims, claimant
from .contract import Ledger
from .file import LedgerFile
from .rebook import rebook
from .rows import holder_fields, insert_slice, read_slices, read_waiters
from .schema import RESET_GRACE, book_id, reset_grace_left

__all__ = ["SQLiteLedger"]

#: A slice id is 12 hex digits; a prefix names one when it has at least this many.
MIN_PREFIX = 6

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
        waiter_timeout: float = line.STALE_WAITER,
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
        #: Where the tiers' life-cycle hooks run for this ledger: it keeps the book, so with the GPUs,
        #: and with the reports folder beside it (the owner's, for a user's own ledger).
        self._where = Where(folder=str(report_dir(self.path)), hardware=inventory)
        self._recorded_gpus: list[tuple[tuple[str, int, str, int], ...] | None] = [None]
        self.claims = Claims(self.path)  # what a holder brings to book its slice again after a reset

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
            return read_slices(db)

    def get(self, slice_id: str) -> Slice:
        with self.file.transaction(write=False) as db:
            return self._find(db, slice_id)

    def waiting(self) -> list[Waiter]:
        with self.file.transaction(write=False) as db:
            return read_waiters(db)

    def book_id(self) -> str:
        with self.file.transaction(write=False) as db:
            return book_id(db)

    def occupancy(self) -> Occupancy:
        """Every GPU now, as placement sees it (process trees walked afresh)."""
        snapshot = self.inventory.snapshot()
        slices = self.slices()
        return occupancy_of(snapshot, slices, attribute(snapshot, {s.id: s.pid for s in slices}))

    def _find(self, db: sqlite3.Connection, slice_id: str) -> Slice:
        """The slice whose id is exactly ``slice_id``, or the only one it is a literal prefix of."""
        text = str(slice_id).strip()
        found = read_slices(db, "WHERE id = ?", (text,))
        if not found and len(text) >= MIN_PREFIX and text.isalnum():
            # a literal prefix: substr(), not LIKE, so % and _ are only themselves
            found = read_slices(db, "WHERE substr(id, 1, ?) = ?", (len(text), text))
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
        request = request.pin_named(snapshot)  # stored and said as every view names its GPU
        fields = holder_fields(self.actor, request, holder)
        with self.file.transaction() as db:
            granted, reason = self._grant(db, snapshot, request, fields, ticket=None)
        if granted is None:
            raise reason
        by_tier(granted.tier).granted(granted, self._where)
        return granted

    def by_token(self, token: str | None) -> Slice | None:
        """The slice this ledger's actor got with request token ``token``, if any."""
        if not token:
            return None
        with self.file.transaction(write=False) as db:
            found = read_slices(db, "WHERE uid = ? AND token = ?", (self.actor.uid, token))
        return found[0] if found else None

    def queued(self, token: str | None) -> int | None:
        """The place in line this ledger's actor got with request token ``token``, if any."""
        if not token:
            return None
        with self.file.transaction(write=False) as db:
            row = db.execute("SELECT ticket FROM queue WHERE uid = ? AND token = ?", (self.actor.uid, token)).fetchone()
        return None if row is None else int(row["ticket"])

    def enqueue(self, request: SliceRequest, holder: Holder) -> Ticket:
        request = self.named(request)
        fields = holder_fields(self.actor, request, holder)
        with self.file.transaction() as db:
            if holder.token:  # asked again after a lost answer: the same place in line
                row = db.execute(
                    "SELECT ticket FROM queue WHERE uid = ? AND token = ?", (fields["uid"], holder.token)
                ).fetchone()
                if row is not None:
                    return Ticket(number=row["ticket"], request=request, token=holder.token)
            waiting = db.execute("SELECT count(*) FROM queue").fetchone()[0]
            if waiting >= line.MAX_WAITING:
                raise SliceUnavailable(
                    f"{waiting} requests already wait in line for a slice (at most {line.MAX_WAITING}); try again later."
                )
            cursor = db.execute(
                "INSERT INTO queue (owner, uid, holder_kind, holder, pid, pid_start, request, labels, created, polled,"
                " keeper_pid, keeper_start, pid_stamp, keeper_stamp, asked, token) VALUES (:owner, :uid, :holder_kind,"
                " :holder, :pid, :pid_start, :request, :labels, :created, :created, :keeper_pid, :keeper_start,"
                " :pid_stamp, :keeper_stamp, :asked, :token)",
                {**fields, "asked": boot_clock()},
            )
            assert cursor.lastrowid is not None
            return Ticket(number=cursor.lastrowid, request=request, token=holder.token)

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
            if row is None and ticket.token:  # asked again after a lost answer: what the first asking got
                again = read_slices(db, "WHERE uid = ? AND token = ?", (self.actor.uid, ticket.token))
                if again:
                    return again[0]
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
        else:
            by_tier(granted.tier).granted(granted, self._where)
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
            again = read_slices(db, "WHERE uid = ? AND token = ?", (fields["uid"], fields["token"]))
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
        slices = read_slices(db)
        dead = {s.id for s in self._reap(db, slices)}
        live = [s for s in slices if s.id not in dead]
        gpus = self._occupancy(db, snapshot, live).gpus
        earlier = line.ahead(db, request, fields["uid"], ticket, gpus)
        placement = place(request, gpus, allowance=self.allowance_for, allowed=self.allowed_gpus)
        if placement.permanent:
            raise NeverFits(f"{placement.reason} Waiting cannot help: ask for less.")  # the reason names the request
        ahead = len(earlier)
        if earlier and placement:
            placement, ahead = line.backfill(
                request, earlier, gpus, placement,
                allowance=self.allowance_for, allowed_gpus=self.allowed_gpus, allowed_for_row=self.allowed_for_row,
            )  # fmt: skip
        if ahead or not placement:
            refusal = Refusal.of(request, placement.candidates, self.allowance_for, ahead=ahead, fits=bool(placement))
            return None, SliceUnavailable(refusal.text(), detail=refusal.to_dict())
        slice_id = uuid.uuid4().hex[:12]
        instances = placement.instances or (None,) * len(placement.chosen)
        insert_slice(
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

    # -- holders ------------------------------------------------------------------------
    def attach(self, slice_id: str, pid: int) -> Slice:
        with self.file.transaction() as db:
            found = self._mine(db, slice_id, "attach a process to")
            db.execute(
                "UPDATE slices SET pid = ?, pid_start = ?, pid_stamp = ? WHERE id = ?",
                (pid, process_start(pid), start_stamp(pid), found.id),
            )
            return self._find(db, found.id)

    def join_hold(self, slice_id: str, pid: int) -> str:
        with self.file.transaction(write=False) as db:
            found = self._mine(db, slice_id, "join the memory partition of")
        return by_tier(found.tier).join(found, pid, self._where)

    def _ended(self, ended: list[Slice]) -> None:
        """Tell each ended slice's tier (never raises: the slice has ended either way)."""
        for s in ended:
            by_tier(s.tier).ended(s, self._where)

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
            if refused := by_tier(found.tier).resize_refused(found):
                raise InvalidRequest(refused)
            if request.gpus != len(found.gpus):
                raise InvalidRequest(
                    f"A resize keeps the GPU count ({len(found.gpus)}); gpus={request.gpus} needs a new slice."
                )
            others = [s for s in read_slices(db) if s.id != found.id]
            gpus = self._occupancy(db, snapshot, others)
            present = []
            for gpu_uuid, index in zip(found.gpus, found.gpu_indices):
                gpu = gpus.gpu(gpu_uuid)
                if gpu is None:  # named by the index it had when the slice was booked
                    raise SliceUnavailable(f"GPU {index} of slice {found.id} is no longer present.")
                present.append(gpu)
            need_on = needs(request, present)
            changes = []
            for gpu in present:
                need = need_on[gpu.uuid]
                if need <= found.context_allowance:
                    raise InvalidRequest(
                        f"{request.describe()} is {format_bytes(need)}, not more than the CUDA-context allowance "
                        f"({format_bytes(found.context_allowance)}); ask for more memory."
                    )
                if request.limit_memory is not None and request.limit_memory > gpu.total:
                    raise InvalidRequest(f"{request.describe()} has a limit above GPU {gpu.index} ({format_bytes(gpu.total)}); ask for at most that.")
                if need > gpu.free:  # the request is booked; its limit never is
                    # more than it holds now, where only kernels' bursts keep it out: it may wait for them
                    more = need - found.memory[found.gpus.index(gpu.uuid)]
                    held = need <= within_requests([gpu])[0].free and bool(gpu.kernel_bursts())
                    detail = {"burst_held": held, "gpu": gpu.index, "more": more}
                    raise SliceUnavailable(f"Cannot resize slice {found.id} to {request.describe()}: {gpu.explain()}.", detail=detail)
                changes.append((need, found.id, gpu.uuid))
            db.executemany("UPDATE slice_gpus SET memory = ? WHERE slice_id = ? AND gpu_uuid = ?", changes)
            stored = {**request.to_dict(), "gpu": found.request.gpu, "placement": found.request.placement}
            if found.request.gpu_index is not None:
                stored["gpu_index"] = found.request.gpu_index  # its pin, named as when it was booked
            db.execute(
                "UPDATE slices SET request = ?, logical_devices = ? WHERE id = ?",
                (json.dumps(stored), request.logical_devices, found.id),
            )
            resized = self._find(db, found.id)
            by_tier(resized.tier).resized(resized, self._where)  # raising undoes the resize
            return resized

    def claim(self, slice_id: str) -> str:
        with self.file.transaction(write=False) as db:
            found = self._find(db, slice_id)
        if found.uid != self.actor.uid:
            raise NotPermitted(f"Slice {found.id} belongs to {found.owner}; only its own user gets its claim.")
        return self.claims.of(found.id, found.uid, claimant(found))

    def rebook(self, record: Slice, claim: str, split: bool = False) -> Slice:
        return rebook(self, record, claim, split=split)

    def release(self, slice_id: str) -> Slice:
        with self.file.transaction() as db:
            found = self._mine(db, slice_id, "release")
            db.execute("DELETE FROM slices WHERE id = ?", (found.id,))
        self._ended([found])
        return found

    def reap(self) -> list[Slice]:
        with self.file.transaction() as db:
            dead = self._reap(db)
            live = [s.id for s in read_slices(db)]
        self._ended(dead)
        for tier in enforcement.TIERS:  # what no live slice owns: left by a crash, or busy when its slice ended
            tier.sweep(live, self._where)
        return dead

    def _reap(self, db: sqlite3.Connection, slices: list[Slice] | None = None) -> list[Slice]:
        if slices is None:
            slices = read_slices(db)
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


def replace_ledger(ledger: SQLiteLedger) -> SQLiteLedger:
    """A shallow copy sharing the file and its connection (for :meth:`SQLiteLedger.acting_for`)."""
    view = SQLiteLedger.__new__(SQLiteLedger)
    view.__dict__.update(ledger.__dict__)
    return view

