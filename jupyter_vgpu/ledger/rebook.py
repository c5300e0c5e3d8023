"""Booking a lost slice again (``rebook``): a slice that ``gc --reset-ledger`` or a split lost
while its holder runs goes back into the book as it was, if the caller brings its claim (the id
was granted to this user: :mod:`.claims`), it is the seconds after a reset (or the caller's own
writes were lost to a split), its holder still runs and ran before the reset, and its GPUs still
have room. Its tier is the one this ledger gives those GPUs now, not what the record says."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Protocol

from ..enforcement import by_tier, tier_of
from ..enforcement.base import Where
from ..errors import InvalidRequest, NotPermitted, SliceUnavailable
from ..gpus import Snapshot
from ..slices.holders import boot_clock, held
from ..slices.occupancy import Occupancy
from ..slices.records import Actor, Holder, Slice, is_slice_id
from ..units import shorten
from .claims import Claims, claimant_of
from .file import LedgerFile
from .rows import holder_fields, insert_slice, read_slices
from .schema import RESET_GRACE, reset_grace_left


class Book(Protocol):
    """What rebooking asks of the SQLite ledger it books into (:class:`~.sqlite.SQLiteLedger`)."""

    actor: Actor
    claims: Claims
    allowed_gpus: frozenset[str] | None
    file: LedgerFile
    _where: Where

    def location(self) -> str: ...
    def _available_snapshot(self) -> Snapshot: ...
    def _record_gpus(self, db: sqlite3.Connection, snapshot: Snapshot) -> None: ...
    def _reap(self, db: sqlite3.Connection, slices: list[Slice] | None = None) -> list[Slice]: ...
    def _occupancy(self, db: sqlite3.Connection, snapshot: Snapshot, slices: list[Slice]) -> Occupancy: ...
    def _find(self, db: sqlite3.Connection, slice_id: str) -> Slice: ...


def rebook(ledger: Book, record: Slice, claim: str, *, split: bool = False) -> Slice:
    """Book ``record`` again as it was (a slice a reset or a split lost), with its holder's checks:
    see :meth:`.contract.Ledger.rebook`."""
    request = record.request
    if not is_slice_id(record.id):
        raise InvalidRequest(f"{shorten(record.id)} is not a slice id (12 hex digits).")
    holder = Holder(record.holder_kind, record.holder, record.pid, record.labels, record.keeper_pid)
    fields = holder_fields(ledger.actor, request, holder)
    # The claim names the process that kept the slice, as it runs now (round five, M1: the claims
    # of released slices booked their ids again from another process, ahead of the live holders).
    who = claimant_of(fields["pid"], fields["pid_stamp"], holder.keeper, fields["keeper_stamp"])
    if not ledger.claims.holds(record.id, ledger.actor.uid, who, claim):
        raise NotPermitted(
            f"Slice {record.id} was not granted to {ledger.actor.user} for this process, or its claim was not given: only "
            "the user a slice was granted to, from the process that kept it, can book it again."
        )
    count = len(record.gpus)
    if not count or count != request.gpus or len(set(record.gpus)) != count or len(record.memory) != count:
        raise InvalidRequest(f"Slice {record.id} must name each of its {request.gpus} GPUs once, with its memory on each.")
    snapshot = ledger._available_snapshot()
    on = {g.uuid: g for g in snapshot.gpus}
    with ledger.file.transaction() as db:
        found = read_slices(db, "WHERE id = ?", (record.id,))
        if found:
            if found[0].uid == ledger.actor.uid and (found[0].holder_kind, found[0].holder) == (holder.kind, holder.name):
                return found[0]  # booked already (by an earlier try, or never lost)
            raise NotPermitted(f"Slice {record.id} is booked for another holder; only a lost slice can be booked again.")
        left = reset_grace_left(db)
        if left <= 0 and not split:
            raise NotPermitted(
                f"Slice {record.id} can be booked again only in the {RESET_GRACE:g} s after the {ledger.location()} was "
                "reset; ask for a new slice instead."
            )
        gone = [u for u in record.gpus if u not in on]
        if gone:
            raise SliceUnavailable(f"Cannot book slice {record.id} again: GPU {shorten(gone[0])} is no longer present.")
        if ledger.allowed_gpus is not None and not set(record.gpus) <= ledger.allowed_gpus:
            raise NotPermitted(f"Cannot book slice {record.id} again: the policy does not let {ledger.actor.user} use its GPUs.")
        for uuid_, amount in zip(record.gpus, record.memory):
            if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= on[uuid_].memory_usable:
                raise InvalidRequest(f"Slice {record.id}'s memory {shorten(amount)} on GPU {on[uuid_].index} is not a size there.")
        context = record.context_allowance
        if isinstance(context, bool) or not isinstance(context, int) or not 0 <= context < min(record.memory):
            raise InvalidRequest(f"Slice {record.id}'s context allowance {shorten(context)} is not a size within it.")
        tier = tier_of([on[u] for u in record.gpus], len(record.mig_devices))  # this ledger's tiers, not the record's
        created = record.created if isinstance(record.created, (int, float)) and 0 < record.created <= time.time() else time.time()
        wanted = Slice(
            **{k: fields[k] for k in ("owner", "uid", "pid", "pid_start", "keeper_start", "pid_stamp", "keeper_stamp")},
            id=record.id, holder_kind=holder.kind, holder=holder.name, keeper_pid=holder.keeper,
            gpus=tuple(record.gpus), gpu_indices=tuple(on[u].index for u in record.gpus), memory=tuple(record.memory),
            memory_total=tuple(on[u].memory_usable for u in record.gpus), context_allowance=context,
            logical_devices=request.logical_devices, request=request, labels=dict(holder.labels), created=created,
            tier=tier, mig_devices=tuple(record.mig_devices), mig_profiles=tuple(record.mig_profiles),
        )  # fmt: skip
        if not held(wanted):
            raise InvalidRequest(f"Slice {record.id}'s holder (process {wanted.pid}) is not running; it needs no slice.")
        if left > 0 and _started_since(wanted.pid_stamp, RESET_GRACE - left):
            raise NotPermitted(  # while new slices wait, only what ran before the reset goes in
                f"Process {wanted.pid} started after the {ledger.location()} was reset, so it held no slice to book again."
            )
        ledger._record_gpus(db, snapshot)
        slices = read_slices(db)
        dead = {s.id for s in ledger._reap(db, slices)}
        live = [s for s in slices if s.id not in dead]
        taken = {d for s in live for d in s.mig_devices} & set(wanted.mig_devices)
        if taken:
            raise SliceUnavailable(f"Cannot book slice {record.id} again: its MIG device is held by another slice now.")
        together = ledger._occupancy(db, snapshot, [*live, wanted])
        for n, uuid_ in enumerate(wanted.gpus):
            gpu = together.gpu(uuid_)
            assert gpu is not None
            mig = wanted.mig_devices[n] if n < len(wanted.mig_devices) else None
            if wanted.mig_devices and mig not in {m.device.uuid for m in gpu.mig}:
                raise InvalidRequest(f"Slice {record.id} must name one MIG device of GPU {gpu.index} for each GPU, and only a MIG slice any.")
            others_over = sum(s.over_use for s in gpu.shares if s.slice.id != wanted.id)
            if not gpu.in_mig_mode and gpu.reserved + others_over + gpu.foreign > gpu.total:
                before = ledger._occupancy(db, snapshot, live).gpu(uuid_)
                assert before is not None
                raise SliceUnavailable(
                    f"GPU {gpu.index} no longer has room for slice {record.id} ({request.describe()}): {before.explain()}."
                )
        insert_slice(
            db,
            {**fields, "id": wanted.id, "context": context, "logical": request.logical_devices, "now": created,
             "tier": wanted.tier.value, "token": None},
            [
                (u, i, m, t, wanted.mig_devices[n] if wanted.mig_devices else None,
                 wanted.mig_profiles[n] if n < len(wanted.mig_profiles) else None)
                for n, (u, i, m, t) in enumerate(zip(wanted.gpus, wanted.gpu_indices, wanted.memory, wanted.memory_total))
            ],
        )  # fmt: skip
        booked = ledger._find(db, wanted.id)
    by_tier(booked.tier).granted(booked, ledger._where)
    return booked


def _started_since(stamp: str | None, seconds: float) -> bool:
    """Whether the process with this start stamp (boot id and start ticks) started within the last
    ``seconds`` (False when the stamp cannot tell)."""
    ticks = (stamp or "").rpartition(":")[2]
    if not ticks.isdigit():
        return False
    return int(ticks) / os.sysconf("SC_CLK_TCK") > boot_clock() - seconds
