"""The ledger's SQLite file: schema and upgrades, opening it safely, transactions.

Every process of the user (the Jupyter server, kernels, ``jupyter vgpu run``) opens the same
file. Writers take turns on an flock beside it and write inside ``BEGIN IMMEDIATE``
transactions, so two processes never place against the same free memory; WAL keeps readers
from blocking writers. A damaged file is never repaired silently: opening it says so, and
``jupyter vgpu gc --reset-ledger`` moves it aside.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LedgerError
from ..units import shorten

#: 1: the first ledger. 2: each slice records its enforcement tier, and each of its GPUs the MIG
#: device it holds. 3: a slice may have a keeper process (the server that restarts its kernel),
#: and a place in line records when its requester last asked (upgraded in place, see ``_MIGRATIONS``).
SCHEMA_VERSION = 3

#: Each process checkpoints the write-ahead log after this many of its own write transactions.
CHECKPOINT_EVERY = 32

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
    tier TEXT NOT NULL DEFAULT 'cooperative', keeper_pid INTEGER, keeper_start REAL);
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
    keeper_pid INTEGER, keeper_start REAL);
"""

#: Statements that bring a ledger from version N to N + 1, run in the opening transaction. Columns
#: are only added, with defaults, so a process of the previous version that is still running goes
#: on reading and writing the upgraded file.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
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
}

RECOVERY = (
    "Move it aside and start a fresh ledger with `jupyter vgpu gc --reset-ledger` "
    "(the old file is kept next to it as {name}.corrupt-<time>; running processes keep their GPU "
    "memory, which then counts as used outside slices until they end)."
)


def _schema_version(value: object) -> int:
    """The stored schema version; anything but a whole number from 1 up is damage."""
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        raise sqlite3.DatabaseError(f"its schema_version {shorten(value)} is not a version number")
    return int(text)


class LedgerFile:
    """One process's connection to the ledger file; safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._writes = 0
        self._turns = 0  # how deep this process is inside the writers' turn (the flock)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            raise LedgerError(f"Cannot create the ledger folder {self.path.parent}: {error.strerror or error}.") from None
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise LedgerError(f"Cannot open the ledger lock {lock_path}: {error.strerror or error}.") from None
        try:
            with self._lock, self._writer_turn(True):  # opening may create or upgrade the schema
                self._db = self._open()
                self._identity = _identity(self.path)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            raise LedgerError(f"Cannot create the ledger folder {self.path.parent}: {error.strerror or error}.") from None
        try:
            if self.path.exists() and not self.path.is_file():
                raise LedgerError(
                    f"The ledger {self.path} is not a regular file; point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) "
                    "at a file, e.g. ~/.local/share/jupyter/vgpu/ledger.sqlite."
                )
            # Slices name notebooks and commands: only their owner reads the file.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        except OSError as error:
            raise LedgerError(f"Cannot open the ledger {self.path}: {error.strerror or error}.") from None
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise LedgerError(f"Cannot open the ledger {self.path}: {error}.") from None
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"The ledger {self.path} cannot use write-ahead logging (journal mode {mode}).")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA wal_autocheckpoint = 0")
            db.execute("PRAGMA foreign_keys = ON")
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
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
                    version = _schema_version(row[0])
                    if version > SCHEMA_VERSION:
                        raise LedgerError(
                            f"The ledger {self.path} was written by a newer jupyter-vgpu (schema {version}, this one "
                            f"reads {SCHEMA_VERSION}); upgrade jupyter-vgpu or point JUPYTER_VGPU_LEDGER elsewhere."
                        )
                    for step in range(version, SCHEMA_VERSION):
                        for statement in _MIGRATIONS[step]:
                            db.execute(statement)
                    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except LedgerError:
            db.close()
            raise
        except sqlite3.OperationalError as error:
            db.close()
            if "locked" in str(error) or "busy" in str(error):
                raise LedgerError(f"The ledger {self.path} stayed locked by another process for 30 s: {error}.") from None
            raise LedgerError(f"Cannot use the ledger {self.path}: {error}.") from None
        except sqlite3.DatabaseError as error:
            db.close()
            raise LedgerError(
                f"The ledger {self.path} is corrupt ({error}). " + RECOVERY.format(name=self.path.name)
            ) from None
        return db

    @contextmanager
    def _writer_turn(self, write: bool) -> Iterator[None]:
        """Writers queue on an flock beside the database: the kernel wakes the next one the
        moment the lock is free, where SQLite's own busy handler sleeps and retries with
        growing back-off (up to 100 ms), which shows as a long latency tail under load."""
        if not write:
            yield
            return
        if self._turns == 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._turns += 1
        try:
            yield
        finally:
            self._turns -= 1
            if self._turns == 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _follow_replacement(self) -> None:
        """If the file at ``path`` is no longer the one this connection has open (``jupyter vgpu
        gc --reset-ledger`` moved a damaged ledger aside), reopen: never write to a file nobody
        else reads. The old connection is parked, not closed: closing the last connection to a
        WAL database deletes ``<path>-wal`` by name, which is now the new file's log."""
        if _identity(self.path) == self._identity:
            return
        with self._writer_turn(True):
            if _identity(self.path) == self._identity:
                return
            _PARKED.append(self._db)
            self._db = self._open()
            self._identity = _identity(self.path)

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: a writer first waits its turn (flock), then ``BEGIN IMMEDIATE``."""
        with self._lock:
            with self._writer_turn(write):
                self._follow_replacement()
                try:
                    self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    try:
                        yield self._db
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
                    self._db.execute("COMMIT")
                except (sqlite3.ProgrammingError, sqlite3.InterfaceError):
                    raise  # a bug in this code, not damage to the file
                except sqlite3.OperationalError as error:
                    raise LedgerError(f"The ledger {self.path} could not be used: {error}.") from None
                except sqlite3.DatabaseError as error:
                    raise LedgerError(
                        f"The ledger {self.path} is corrupt ({error}). " + RECOVERY.format(name=self.path.name)
                    ) from None
            if write:
                self._writes += 1
                if self._writes % CHECKPOINT_EVERY == 0:
                    self._checkpoint()

    def _checkpoint(self) -> None:
        # Copy the write-ahead log back into the database outside the writers' turn, so the
        # fsync it costs does not hold every other writer up (automatic checkpoints are off).
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # another process is checkpointing; the next one will

    def close(self) -> None:
        with self._lock:
            self._db.close()
            os.close(self._lock_fd)

    @staticmethod
    def damage(path: str | Path) -> str | None:
        """What is wrong with the ledger file at ``path`` (SQLite's integrity check, the schema),
        or None when it is healthy or absent."""
        source = Path(path)
        if not source.exists():
            return None
        try:
            LedgerFile(source).close()
        except LedgerError as error:
            return str(error)
        try:
            db = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
            try:
                check = db.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error as error:
            return str(error)
        return None if check == "ok" else str(check)

    @staticmethod
    def clear(path: str | Path) -> Path | None:
        """Empty a healthy ledger in place, in the writers' turn, after copying it beside itself
        (``<file>.reset-<time>``); returns the copy. Refused (:class:`LedgerError`) while a running
        process holds a slice in it, checked in the same turn, so no reservation slips in between.
        The file stays the file every process has open, so all of them see the empty ledger."""
        source = Path(path)
        if not source.exists():
            return None
        target = source.with_name(f"{source.name}.reset-{time.strftime('%Y%m%d-%H%M%S')}")
        lock = os.open(source.with_name(source.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if held := _held_slices(source):
                raise LedgerError(
                    f"{len(held)} running process{'es hold' if len(held) != 1 else ' holds'} a slice in {source}: "
                    f"{', '.join(held[:5])}. Shut those kernels down or stop those commands first "
                    "(`jupyter vgpu status` lists them)."
                )
            db = sqlite3.connect(source, timeout=30, isolation_level=None)
            try:
                copy = sqlite3.connect(target)
                try:
                    db.backup(copy)
                finally:
                    copy.close()
                os.chmod(target, 0o600)
                db.execute("BEGIN IMMEDIATE")
                for table in ("slice_gpus", "slices", "queue"):
                    db.execute(f"DELETE FROM {table}")
                db.execute("COMMIT")
            finally:
                db.close()
        finally:
            os.close(lock)
        return target

    @staticmethod
    def reset(path: str | Path) -> Path | None:
        """Move a damaged ledger (and its WAL files) aside, in the writers' turn; returns where it
        went. Processes that still have it open notice at their next transaction and open the
        fresh one (see :meth:`_follow_replacement`)."""
        source = Path(path)
        if not source.exists():
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = source.with_name(f"{source.name}.corrupt-{stamp}")
        lock = os.open(source.with_name(source.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for extra_suffix in ("-wal", "-shm"):
                extra = source.with_name(source.name + extra_suffix)
                if extra.exists():
                    extra.rename(target.with_name(target.name + extra_suffix))
            source.rename(target)
        finally:
            os.close(lock)
        return target


#: Connections to ledger files that were moved aside: kept open for the process's life, because
#: closing them would delete the new file's write-ahead log (see LedgerFile._follow_replacement).
_PARKED: list[sqlite3.Connection] = []


def _held_slices(path: Path) -> list[str]:
    """Slices of ``path`` whose holder (or keeper) still runs, read without taking a writer's turn."""
    from .holders import process_alive

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute("SELECT id, holder, pid, pid_start, keeper_pid, keeper_start FROM slices").fetchall()
    finally:
        db.close()
    return [
        f"{sid} ({holder[:60]}, pid {pid})"
        for sid, holder, pid, start, keeper, keeper_start in rows
        if process_alive(pid, start) or (keeper is not None and process_alive(keeper, keeper_start))
    ]


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
