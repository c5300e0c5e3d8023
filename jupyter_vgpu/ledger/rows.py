"""Slices and places in line as rows of the ledger file, and back: the one place that knows the
columns (the schema is :mod:`.schema`)."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from typing import Any

from ..slices.holders import process_start, start_stamp
from ..slices.records import Actor, Holder, Slice, Tier, Waiter
from ..slices.request import SliceRequest


@functools.lru_cache(maxsize=4096)
def request_of(text: str) -> SliceRequest:
    """A request from its column (read once per text: the server's monitor reads every slice's
    every tick; a request is immutable, so slices share it)."""
    return SliceRequest.from_dict(json.loads(text))


def read_slices(db: sqlite3.Connection, where: str = "", args: tuple[Any, ...] = ()) -> list[Slice]:
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
                request=request_of(row["request"]),
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


def read_waiters(db: sqlite3.Connection) -> list[Waiter]:
    """Every place in line, first come first."""
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
            request=request_of(row["request"]),
            labels=json.loads(row["labels"]),
            created=row["created"],
        )
        for position, row in enumerate(rows, start=1)
    ]


def insert_slice(db: sqlite3.Connection, values: dict[str, Any], gpus: list[tuple[Any, ...]]) -> None:
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


def holder_fields(actor: Actor, request: SliceRequest, holder: Holder) -> dict[str, Any]:
    """The columns that record ``holder`` (and its keeper) for ``actor``, shared by slices and places in line."""
    pid = os.getpid() if holder.pid is None else holder.pid
    return {
        "keeper_pid": holder.keeper,
        "keeper_start": process_start(holder.keeper) if holder.keeper else None,
        "keeper_stamp": start_stamp(holder.keeper) if holder.keeper else None,
        "owner": actor.user,
        "uid": actor.uid,
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
