"""The ledger: reserve, wait in line, release and reap GPU slices of a user (or node).

The file itself (schema, transactions) is :mod:`.store`; what it holds is :mod:`.records`.
A slice whose holder process is gone (pid plus start time, so a reused pid does not count)
is reclaimed by the next reservation, the server's monitor or ``jupyter vgpu gc``.
"""

from __future__ import annotations

import getpass
import json
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, NotPermitted, SliceNotFound, SliceUnavailable
from ..gpus import Inventory, Snapshot
from ..units import format_bytes
from .holders import attribute, process_alive, process_start
from .placement import TIER_MIG, GPUState, InstanceState, place
from .records import Slice, Ticket, Waiter, summary
from .request import SliceRequest
from .store import RECOVERY, SCHEMA_VERSION, LedgerFile

__all__ = ["RECOVERY", "SCHEMA_VERSION", "Ledger", "Slice", "Ticket", "Waiter", "summary"]


class Ledger(LedgerFile):
    """Reserve, release and list slices in the SQLite file at ``path``.

    One instance per process is enough; it is safe to share between threads.
    """

    def __init__(
        self,
        path: str | Path,
        inventory: Inventory,
        *,
        context_allowance: int,
        poll_interval: float = 0.25,
    ) -> None:
        self.inventory = inventory
        self.context_allowance = context_allowance
        self.poll_interval = poll_interval
        self._recorded_gpus: tuple[tuple[str, int, str, int], ...] | None = None
        super().__init__(path)

    def location(self) -> str:
        """Where slices are kept, for headers: ``ledger /path/ledger.sqlite``."""
        return f"ledger {self.path}"

    # -- reading ------------------------------------------------------------------------
    def slices(self) -> list[Slice]:
        """Every slice, oldest first."""
        with self._transaction(write=False) as db:
            return self._read_slices(db)

    def get(self, slice_id: str) -> Slice:
        """The slice with this id (a unique prefix of 6+ characters also works)."""
        with self._transaction(write=False) as db:
            return self._find(db, slice_id)

    def waiting(self) -> list[Waiter]:
        """Requests waiting in line, first in line first."""
        with self._transaction(write=False) as db:
            rows = db.execute("SELECT * FROM queue ORDER BY ticket").fetchall()
        return [
            Waiter(
                ticket=row["ticket"],
                position=position,
                owner=row["owner"],
                holder_kind=row["holder_kind"],
                holder=row["holder"],
                pid=row["pid"],
                request=SliceRequest.from_dict(json.loads(row["request"])),
                labels=json.loads(row["labels"]),
                created=row["created"],
            )
            for position, row in enumerate(rows, start=1)
        ]

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
                    tier=row["tier"],
                    mig_devices=tuple(g["mig_device"] for g in gs if g["mig_device"]),
                    mig_profiles=tuple(g["mig_profile"] or "" for g in gs if g["mig_device"]),
                )
            )
        return result

    def _find(self, db: sqlite3.Connection, slice_id: str) -> Slice:
        text = str(slice_id).strip()
        found = self._read_slices(db, "WHERE id = ?", (text,))
        if not found and len(text) >= 6:
            found = self._read_slices(db, "WHERE id LIKE ? || '%'", (text,))
        if len(found) != 1:
            raise SliceNotFound(f"No slice {text!r} in the ledger {self.path}; `jupyter vgpu status` lists them.")
        return found[0]

    # -- reserving ----------------------------------------------------------------------
    def reserve(
        self,
        request: SliceRequest,
        *,
        holder_kind: str,
        holder: str,
        pid: int | None = None,
        owner: str | None = None,
        uid: int | None = None,
        labels: dict[str, str] | None = None,
        wait: float = 0.0,
    ) -> Slice:
        """Reserve a slice for ``holder`` (kept alive by process ``pid``, default this one).

        With ``wait`` > 0 the request waits in line (first come, first served) up to that many
        seconds. Raises :class:`SliceUnavailable` with what is free where and who holds it.
        """
        fields = _holder_fields(request, holder_kind, holder, pid, owner, uid, labels)
        if wait <= 0:
            snapshot = self._available_snapshot()
            with self._transaction() as db:
                granted, reason = self._grant(db, snapshot, request, fields, ticket=None)
            if granted is None:
                raise SliceUnavailable(reason)
            return granted
        ticket = self.enqueue(request, holder_kind=holder_kind, holder=holder, pid=pid, owner=owner, uid=uid, labels=labels)
        return self.wait_in_line(ticket, wait)

    def wait_in_line(self, ticket: Ticket, wait: float) -> Slice:
        """Try ``ticket`` until granted or ``wait`` seconds pass; always leaves the line."""
        deadline = time.monotonic() + wait
        try:
            while True:
                granted = self.try_grant(ticket, final=time.monotonic() >= deadline)
                if granted is not None:
                    return granted
                time.sleep(max(0.001, min(self.poll_interval, deadline - time.monotonic())))
        finally:
            self.leave_queue(ticket)

    def enqueue(
        self,
        request: SliceRequest,
        *,
        holder_kind: str,
        holder: str,
        pid: int | None = None,
        owner: str | None = None,
        uid: int | None = None,
        labels: dict[str, str] | None = None,
    ) -> Ticket:
        """Take a place in line; :meth:`try_grant` then turns it into a slice."""
        fields = _holder_fields(request, holder_kind, holder, pid, owner, uid, labels)
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO queue (owner, uid, holder_kind, holder, pid, pid_start, request, labels, created)"
                " VALUES (:owner, :uid, :holder_kind, :holder, :pid, :pid_start, :request, :labels, :created)",
                fields,
            )
            assert cursor.lastrowid is not None
            return Ticket(number=cursor.lastrowid, request=request)

    def leave_queue(self, ticket: Ticket) -> None:
        """Give up a place in line (no-op once granted)."""
        with self._transaction() as db:
            db.execute("DELETE FROM queue WHERE ticket = ?", (ticket.number,))

    def try_grant(self, ticket: Ticket, *, final: bool = True) -> Slice | None:
        """Grant the ticket's slice if it is first in line and fits.

        Returns None while it should keep waiting. Raises :class:`SliceUnavailable` when it
        cannot fit and ``final`` is set, or when no amount of waiting can help.
        """
        snapshot = self._available_snapshot()
        with self._transaction() as db:
            row = db.execute("SELECT * FROM queue WHERE ticket = ?", (ticket.number,)).fetchone()
            if row is None:
                raise SliceUnavailable("This request left the line (its process ended or it was cancelled).")
            granted, reason = self._grant(db, snapshot, ticket.request, dict(row), ticket=ticket.number)
        if granted is None:
            ticket.last_reason = reason
            if final:
                raise SliceUnavailable(reason)
        return granted

    def _available_snapshot(self) -> Snapshot:
        snapshot = self.inventory.snapshot()
        if not snapshot.available:
            raise SliceUnavailable(snapshot.message or "No GPU is available.")
        return snapshot

    def _grant(
        self, db: sqlite3.Connection, snapshot: Snapshot, request: SliceRequest, fields: dict[str, Any], ticket: int | None
    ) -> tuple[Slice | None, str]:
        """Inside a write transaction: place and record the slice, or say why not."""
        self._record_gpus(db, snapshot)
        slices = self._read_slices(db)
        dead = {s.id for s in self._reap(db, slices)}
        live = [s for s in slices if s.id not in dead]
        if ticket is None:
            ahead = db.execute("SELECT count(*) FROM queue").fetchone()[0]
        else:
            ahead = db.execute("SELECT count(*) FROM queue WHERE ticket < ?", (ticket,)).fetchone()[0]
        placement = place(request, self._gpu_states(db, snapshot, live), context_allowance=self.context_allowance)
        if placement.permanent:
            raise SliceUnavailable(f"Cannot reserve {request.describe()}: {placement.reason}")
        if ahead or not placement:
            reason = placement.reason
            if ahead:
                waiting = f"{ahead} earlier request{'s are' if ahead > 1 else ' is'} waiting in line for a slice."
                reason = f"{waiting} {reason}".strip()
            return None, reason
        slice_id = uuid.uuid4().hex[:12]
        db.execute(
            "INSERT INTO slices (id, owner, uid, holder_kind, holder, pid, pid_start, context_allowance,"
            " logical_devices, request, labels, created, tier) VALUES (:id, :owner, :uid, :holder_kind, :holder,"
            " :pid, :pid_start, :context, :logical, :request, :labels, :now, :tier)",
            {
                **fields,
                "id": slice_id,
                "context": self.context_allowance,
                "logical": request.logical_devices,
                "now": time.time(),
                "tier": placement.tier,
            },
        )
        instances = placement.instances or (None,) * len(placement.chosen)
        db.executemany(
            "INSERT INTO slice_gpus (slice_id, gpu_uuid, gpu_index, memory, memory_total, mig_device, mig_profile)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (slice_id, gpu.uuid, gpu.index, amount, gpu.total, mig.uuid if mig else None, mig.profile if mig else None)
                for (gpu, amount), mig in zip(placement.chosen, instances)
            ],
        )
        if ticket is not None:
            db.execute("DELETE FROM queue WHERE ticket = ?", (ticket,))
        return self._find(db, slice_id), ""

    def _record_gpus(self, db: sqlite3.Connection, snapshot: Snapshot) -> None:
        # The capacities the over-commitment check reads; written only when they change.
        known = tuple((g.uuid, g.index, g.name, g.memory_total) for g in snapshot.gpus)
        if known == self._recorded_gpus:
            return
        self._recorded_gpus = known
        now = time.time()
        db.executemany(
            "INSERT INTO gpus (uuid, idx, name, memory_total, seen) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(uuid) DO UPDATE SET idx = excluded.idx, name = excluded.name,"
            " memory_total = excluded.memory_total, seen = excluded.seen",
            [(g.uuid, g.index, g.name, g.memory_total, now) for g in snapshot.gpus],
        )

    def _gpu_states(self, db: sqlite3.Connection, snapshot: Snapshot, slices: list[Slice] | None = None) -> list[GPUState]:
        if slices is None:
            slices = self._read_slices(db)
        _, foreign = attribute(snapshot, {s.id: s.pid for s in slices})
        states = {
            g.uuid: GPUState(
                uuid=g.uuid,
                index=g.index,
                name=g.name,
                total=g.memory_total,
                foreign=foreign.get(g.uuid, 0),
                mig=bool(g.mig_mode),
                instances=[
                    InstanceState(
                        uuid=m.uuid,
                        profile=m.profile,
                        memory=m.memory_total,
                        index=m.index,
                        holder="processes without a slice" if foreign.get(m.uuid) else None,
                    )
                    for m in g.mig_devices
                ],
                mps=g.mps,
            )
            for g in snapshot.gpus
        }
        for s in slices:
            held = dict(zip(s.gpus, s.mig_devices)) if s.tier == TIER_MIG else {}
            for gpu_uuid, amount in zip(s.gpus, s.memory):
                state = states.get(gpu_uuid)
                if state is not None:
                    who = f"{s.describe_holder()} [{s.owner}]"
                    state.reserved += amount
                    state.holders.append((who, amount))
                    for instance in state.instances:
                        if instance.uuid == held.get(gpu_uuid):
                            instance.holder = who
        return list(states.values())

    # -- holders ------------------------------------------------------------------------
    def attach(self, slice_id: str, pid: int) -> Slice:
        """Make process ``pid`` the holder whose life keeps the slice (e.g. the kernel, once started)."""
        with self._transaction() as db:
            found = self._find(db, slice_id)
            db.execute("UPDATE slices SET pid = ?, pid_start = ? WHERE id = ?", (pid, process_start(pid), found.id))
            return self._find(db, found.id)

    def update_labels(self, slice_id: str, **labels: str | None) -> Slice:
        """Merge labels (None removes one), e.g. the notebook path once the session knows it."""
        with self._transaction() as db:
            found = self._find(db, slice_id)
            merged = dict(found.labels)
            for key, value in labels.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = str(value)
            db.execute("UPDATE slices SET labels = ? WHERE id = ?", (json.dumps(merged), found.id))
            return self._find(db, found.id)

    def resize(self, slice_id: str, request: SliceRequest, *, uid: int | None = None) -> Slice:
        """Change a slice's share on the GPUs it already has (the caller checks that no framework
        has allocated yet). Raises :class:`SliceUnavailable` if the new share does not fit there."""
        snapshot = self._available_snapshot()
        with self._transaction() as db:
            found = self._find(db, slice_id)
            if uid is not None and uid != 0 and found.uid != uid:
                raise NotPermitted(f"Slice {found.id} belongs to {found.owner}; you can resize only your own slices.")
            if found.tier == TIER_MIG:
                raise InvalidRequest(
                    f"Slice {found.id} is a whole MIG device ({', '.join(found.mig_profiles)}), which cannot change "
                    "size; start a kernel with a different share to get another MIG device."
                )
            if request.gpus != len(found.gpus):
                raise InvalidRequest(
                    f"A resize keeps the GPU count ({len(found.gpus)}); gpus={request.gpus} needs a new slice."
                )
            states = {s.uuid: s for s in self._gpu_states(db, snapshot)}
            changes = []
            for gpu_uuid, old in zip(found.gpus, found.memory):
                state = states.get(gpu_uuid)
                if state is None:
                    raise SliceUnavailable(f"GPU {gpu_uuid} of slice {found.id} is no longer present.")
                state.reserved -= old
                state.holders = [h for h in state.holders if not h[0].startswith(found.describe_holder())]
                need = request.amount_on(state.total)
                if need <= self.context_allowance:
                    raise InvalidRequest(
                        f"{request.describe()} is {format_bytes(need)}, not more than the CUDA-context allowance "
                        f"({format_bytes(self.context_allowance)}); ask for more memory."
                    )
                if need > state.free:
                    raise SliceUnavailable(f"Cannot resize slice {found.id} to {request.describe()}: {state.explain()}.")
                changes.append((need, found.id, gpu_uuid))
            db.executemany("UPDATE slice_gpus SET memory = ? WHERE slice_id = ? AND gpu_uuid = ?", changes)
            stored = {**request.to_dict(), "gpu": found.request.gpu, "placement": found.request.placement}
            db.execute(
                "UPDATE slices SET request = ?, logical_devices = ? WHERE id = ?",
                (json.dumps(stored), request.logical_devices, found.id),
            )
            return self._find(db, found.id)

    def release(self, slice_id: str, *, uid: int | None = None) -> Slice:
        """Free a slice. With ``uid``, only that user's slices may be freed (root may free any)."""
        with self._transaction() as db:
            found = self._find(db, slice_id)
            if uid is not None and uid != 0 and found.uid != uid:
                raise NotPermitted(f"Slice {found.id} belongs to {found.owner}; you can release only your own slices.")
            db.execute("DELETE FROM slices WHERE id = ?", (found.id,))
            return found

    def reap(self) -> list[Slice]:
        """Free the slices (and places in line) of holders that are no longer running."""
        with self._transaction() as db:
            return self._reap(db)

    def _reap(self, db: sqlite3.Connection, slices: list[Slice] | None = None) -> list[Slice]:
        if slices is None:
            slices = self._read_slices(db)
        dead = [s for s in slices if not process_alive(s.pid, s.pid_start)]
        for s in dead:
            db.execute("DELETE FROM slices WHERE id = ?", (s.id,))
        for row in db.execute("SELECT ticket, pid, pid_start FROM queue").fetchall():
            if not process_alive(row["pid"], row["pid_start"]):
                db.execute("DELETE FROM queue WHERE ticket = ?", (row["ticket"],))
        return dead

    # -- checks ---------------------------------------------------------------------------
    def overcommitted(self) -> list[tuple[str, int, int]]:
        """GPUs whose reservations exceed their capacity, read from the database itself:
        ``(uuid, reserved, total)``. Always empty unless something is badly wrong."""
        with self._transaction(write=False) as db:
            rows = db.execute(
                "SELECT g.uuid, r.reserved, g.memory_total FROM gpus g JOIN"
                " (SELECT gpu_uuid, SUM(memory) AS reserved FROM slice_gpus GROUP BY gpu_uuid) r"
                " ON r.gpu_uuid = g.uuid WHERE r.reserved > g.memory_total"
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def describe_free(self) -> str:
        """One line per GPU: what is free and who holds the rest."""
        snapshot = self.inventory.snapshot()
        with self._transaction(write=False) as db:
            return "; ".join(s.explain() for s in self._gpu_states(db, snapshot))


def _holder_fields(
    request: SliceRequest,
    holder_kind: str,
    holder: str,
    pid: int | None,
    owner: str | None,
    uid: int | None,
    labels: dict[str, str] | None,
) -> dict[str, Any]:
    pid = os.getpid() if pid is None else pid
    return {
        "owner": owner or _current_user(),
        "uid": os.getuid() if uid is None else uid,
        "holder_kind": holder_kind,
        "holder": holder,
        "pid": pid,
        "pid_start": process_start(pid),
        "request": json.dumps(request.to_dict()),
        "labels": json.dumps(labels or {}),
        "created": time.time(),
    }


def _current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())
