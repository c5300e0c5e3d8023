"""The ledger file's schema and its upgrades, how a new ledger is built whole, and what the
``meta`` table says (which book it is; when it was reset)."""

from __future__ import annotations

import errno
import math
import os
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

from ..errors import LedgerError
from ..units import shorten
from .handles import remove_with_logs, uri

#: 1: the first ledger. 2: each slice records its enforcement tier, and each of its GPUs the MIG
#: device it holds. 3: a slice may have a keeper process (the server that restarts its kernel),
#: and a place in line records when its requester last asked. 4: holders are known by a stamp (boot
#: id and start ticks) that no wall-clock step moves, and a place in line by when it was last asked on
#: the boot clock; a request may carry its client's token, so asking again finds what the first
#: asking got (upgraded in place, see ``_MIGRATIONS``).
SCHEMA_VERSION = 4

#: Seconds after ``gc --reset-ledger`` made a ledger afresh during which new slices wait (or are
#: refused) while the Jupyter servers book their running kernels' slices again (``rebook``); a
#: server notices at its monitor's next tick, every 2 s by default.
RESET_GRACE = 10.0

#: Keys in the ``meta`` table: the book's id (new whenever the ledger is made afresh or emptied)
#: and, in a ledger made by a reset, when that was on the boot clock.
BOOK = "book"
RESET_AT = "reset_at"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpus (
    uuid TEXT PRIMARY KEY, idx INTEGER NOT NULL, name TEXT NOT NULL,
    memory_total INTEGER NOT NULL, seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS slices (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, uid INTEGER NOT NULL,
    holder_kind TEXT NOT NULL, holder TEXT NOT NULL,
    pid INTEGER, pid_start REAL,
    context_allowance INTEGER NOT NULL, logical_devices INTEGER NOT NULL,
    request TEXT NOT NULL, labels TEXT NOT NULL, created REAL NOT NULL,
    tier TEXT NOT NULL DEFAULT 'cooperative', keeper_pid INTEGER, keeper_start REAL,
    pid_stamp TEXT, keeper_stamp TEXT, token TEXT);
CREATE TABLE IF NOT EXISTS slice_gpus (
    slice_id TEXT NOT NULL REFERENCES slices(id) ON DELETE CASCADE,
    gpu_uuid TEXT NOT NULL, gpu_index INTEGER NOT NULL,
    memory INTEGER NOT NULL, memory_total INTEGER NOT NULL,
    mig_device TEXT, mig_profile TEXT,
    PRIMARY KEY (slice_id, gpu_uuid));
CREATE TABLE IF NOT EXISTS queue (
    ticket INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, uid INTEGER NOT NULL,
    holder_kind TEXT NOT NULL, holder TEXT NOT NULL, pid INTEGER, pid_start REAL,
    request TEXT NOT NULL, labels TEXT NOT NULL, created REAL NOT NULL, polled REAL,
    keeper_pid INTEGER, keeper_start REAL, pid_stamp TEXT, keeper_stamp TEXT, asked REAL, token TEXT);
"""

def _stamp_live_holders(db: sqlite3.Connection) -> None:
    """Version 3 to 4: give every holder that still runs (judged by its wall-clock start, as
    version 3 did) its stamp, so that a later clock step cannot make it look gone."""
    from ..slices.holders import process_alive, start_stamp

    for table, key in (("slices", "id"), ("queue", "ticket")):
        for who in ("pid", "keeper"):
            start = "pid_start" if who == "pid" else "keeper_start"
            pid_column = "pid" if who == "pid" else "keeper_pid"
            rows = db.execute(f"SELECT {key}, {pid_column}, {start} FROM {table} WHERE {pid_column} IS NOT NULL").fetchall()
            for row in rows:
                if process_alive(row[1], row[2]):
                    db.execute(f"UPDATE {table} SET {who}_stamp = ? WHERE {key} = ?", (start_stamp(row[1]), row[0]))


#: What brings a ledger from version N to N + 1 (statements, or functions of the connection), run in
#: the opening transaction. Columns are only added, with defaults, and the old ones still written,
#: so a process of the previous version that is still running goes on reading and writing the
#: upgraded file.
_MIGRATIONS: dict[int, tuple[str | Callable[[sqlite3.Connection], None], ...]] = {
    1: (
        "ALTER TABLE slices ADD COLUMN tier TEXT NOT NULL DEFAULT 'cooperative'",
        "ALTER TABLE slice_gpus ADD COLUMN mig_device TEXT",
        "ALTER TABLE slice_gpus ADD COLUMN mig_profile TEXT",
    ),
    2: (
        "ALTER TABLE slices ADD COLUMN keeper_pid INTEGER",
        "ALTER TABLE slices ADD COLUMN keeper_start REAL",
        "ALTER TABLE queue ADD COLUMN polled REAL",
        "ALTER TABLE queue ADD COLUMN keeper_pid INTEGER",
        "ALTER TABLE queue ADD COLUMN keeper_start REAL",
    ),
    3: (
        "ALTER TABLE slices ADD COLUMN pid_stamp TEXT",
        "ALTER TABLE slices ADD COLUMN keeper_stamp TEXT",
        "ALTER TABLE queue ADD COLUMN pid_stamp TEXT",
        "ALTER TABLE queue ADD COLUMN keeper_stamp TEXT",
        "ALTER TABLE queue ADD COLUMN asked REAL",
        "ALTER TABLE slices ADD COLUMN token TEXT",
        "ALTER TABLE queue ADD COLUMN token TEXT",
        _stamp_live_holders,
    ),
}

RECOVERY = (
    "Move it aside and start a fresh ledger with `jupyter vgpu gc --reset-ledger` (the old file is kept "
    "as {name}.corrupt-<time>; Jupyter servers book their kernels' slices in it again)."
)


def schema_version(value: object) -> int:
    """The stored schema version; anything but a whole number from 1 up is damage."""
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        raise sqlite3.DatabaseError(f"its schema_version {shorten(value)} is not a version number")
    return int(text)

def set_up(db: sqlite3.Connection, path: Path) -> None:
    """Create the schema or upgrade it, in the writers' turn."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            if db.execute("SELECT count(*) FROM slices").fetchone()[0]:
                raise sqlite3.DatabaseError("slices without a schema version")
            db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        else:
            version = schema_version(row[0])
            if version > SCHEMA_VERSION:
                raise newer(path, version)
            for step in range(version, SCHEMA_VERSION):
                for upgrade in _MIGRATIONS[step]:
                    if callable(upgrade):
                        upgrade(db)
                    else:
                        db.execute(upgrade)
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise

def newer(path: Path, version: int) -> LedgerError:
    return LedgerError(
        f"The ledger {path} was written by a newer jupyter-vgpu (schema {version}, this one "
        f"reads {SCHEMA_VERSION}); upgrade jupyter-vgpu or point JUPYTER_VGPU_LEDGER elsewhere."
    )

def build(path: Path, timeout: float, meta: dict[str, str] | None = None) -> None:
    """Make a new ledger at ``path``, in the writers' turn: built whole (WAL mode, schema, a new
    book id and ``meta``) under a name of this process's, owner-only, then linked to the path in
    one step. Nobody ever opens a half-made ledger: two processes on a file still in
    rollback-journal mode raced on deleting its journal as one switched it to WAL
    (SQLITE_IOERR_DELETE_NOENT, "disk I/O error")."""
    temporary = path.with_name(f".{path.name}.new-{os.getpid()}")
    remove_with_logs(temporary)  # left by a process of this pid that died here
    try:
        os.close(os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        db = sqlite3.connect(uri(temporary, "rw"), uri=True, timeout=timeout, isolation_level=None)
        try:
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"The ledger {path} cannot use write-ahead logging (journal mode {mode}).")
            set_up(db, path)
            entries = {BOOK: uuid.uuid4().hex, **(meta or {})}
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(entries.items()))
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()  # its own log, by its own name: everything is in the file now
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # made meanwhile by something that does not take the turn: use that one
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            os.rename(temporary, path)  # no hard links here; still one step, in the turn
    except OSError as error:
        raise LedgerError(f"Cannot create the ledger {path}: {error.strerror or error}.") from None
    finally:
        remove_with_logs(temporary)

def book_id(db: sqlite3.Connection) -> str:
    """Which book the ledger is: a new id whenever it is made afresh (``gc --reset-ledger``) or
    emptied (``--force``); '' for a ledger made before ids were kept."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (BOOK,)).fetchone()
    return str(row[0]) if row is not None else ""


def reset_grace_left(db: sqlite3.Connection) -> float:
    """Seconds left of :data:`RESET_GRACE` after ``gc --reset-ledger`` made this ledger afresh
    while processes of the old one may still run (0: none). The boot clock, so no wall-clock step
    stretches it; a reset before the last boot reads as long past."""
    from ..slices.holders import boot_clock

    row = db.execute("SELECT value FROM meta WHERE key = ?", (RESET_AT,)).fetchone()
    try:
        since = boot_clock() - float(row[0]) if row is not None else math.inf
    except ValueError:
        return 0.0
    return RESET_GRACE - since if 0 <= since < RESET_GRACE else 0.0
