"""A ledger file as its users hold it: a handle on the process's one connection, transactions
in the writers' turn, and the file operations of ``jupyter vgpu gc`` (what is damaged, empty it,
move it aside and start afresh)."""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LedgerError
from ..units import shorten
from . import connection as _connections
from .connection import Connection
from .handles import uri
from .schema import BOOK, RECOVERY, RESET_AT, build
from .turn import Turn, lock_timeout

#: Each process checkpoints the write-ahead log after this many of its own write transactions.
CHECKPOINT_EVERY = 32

#: The longest ledger file name, in bytes: file systems allow 255, and the names beside it add up to
#: 28 (``<name>.corrupt-<time>-wal``, ``.<name>.new-<pid>``).
MAX_NAME = 200


class LedgerFile:
    """A handle on the ledger file; every handle of one path in a process shares one connection
    (see the module's rule). Safe to share between threads. With ``read_only_ok``, a ledger in a
    folder this user can only read is opened for reading (``status``); any write then says why not."""

    def __init__(self, path: str | Path, *, read_only_ok: bool = False) -> None:
        self.path = Path(path)
        if len(os.fsencode(self.path.name)) > MAX_NAME:
            raise LedgerError(
                f"The ledger {shorten(str(path))} has a file name of {len(os.fsencode(self.path.name))} bytes; a ledger's "
                f"file name is at most {MAX_NAME} bytes (its lock, logs and backups add to it): point JUPYTER_VGPU_LEDGER "
                "(or c.VGPU.ledger_path) at a file with a shorter name."
            )
        try:
            folder = not self.path.name or str(path).endswith(os.sep) or self.path.is_dir()
        except OSError as error:  # a name in the path is too long for the file system, a loop of links
            raise LedgerError(f"Cannot use the ledger {shorten(str(path))}: {error.strerror or error}.") from None
        if folder:
            raise LedgerError(
                f"The ledger {shorten(str(path))} is a folder; point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a file "
                "in it, e.g. ~/.local/share/jupyter/vgpu/ledger.sqlite."
            )
        self._key = os.path.abspath(self.path)
        with _connections.CONNECTIONS_LOCK:
            connection = _connections.CONNECTIONS.get(self._key)
            if connection is None or connection.pid != os.getpid():
                connection = Connection(self.path, read_only_ok=read_only_ok)
                _connections.CONNECTIONS[self._key] = connection
            connection.users += 1
        self._connection = connection
        self._closed = False

    @property
    def timeout(self) -> float:
        return self._connection.timeout

    @property
    def read_only(self) -> bool:
        """True when the ledger could only be opened for reading (its folder is read-only here)."""
        return self._connection.turn is None

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: a writer first waits its turn (flock), then ``BEGIN IMMEDIATE``;
        a reader takes no turn (``BEGIN``: WAL readers see the last commit and block nobody)."""
        conn = self._connection
        with conn.lock:
            with conn.writer_turn(write):
                conn.follow_replacement()
                if write:
                    conn.follow_split()
                db = conn.db
                try:
                    db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    try:
                        yield db
                        db.execute("COMMIT")
                    except BaseException:
                        if db.in_transaction:  # SQLite ends some failed transactions itself (a full disk)
                            try:
                                db.execute("ROLLBACK")
                            except sqlite3.Error:
                                pass  # the first error is the one to tell
                        raise
                except (sqlite3.ProgrammingError, sqlite3.InterfaceError):
                    raise  # a bug in this code, not damage to the file
                except sqlite3.OperationalError as error:
                    if "full" in str(error):
                        raise LedgerError(
                            f"The disk holding the ledger {self.path} is full ({error}); nothing was changed. "
                            "Free some space there and try again."
                        ) from None
                    raise LedgerError(f"The ledger {self.path} could not be used: {error}.") from None
                except sqlite3.DatabaseError as error:
                    raise LedgerError(
                        f"The ledger {self.path} is corrupt ({error}). " + RECOVERY.format(name=self.path.name)
                    ) from None
            if write:
                conn.writes += 1
                if conn.writes % CHECKPOINT_EVERY == 0:
                    conn.checkpoint()

    def check_split(self) -> str | None:
        """Check (fully) that this process writes the same WAL as every other; reopen if not.
        Returns what was wrong, or None. The server's monitor calls it every tick."""
        with self._connection.lock:
            return self._connection.follow_split(full=True)

    def close(self) -> None:
        """Let go of the shared connection; the last handle of the process closes it."""
        if self._closed:
            return
        self._closed = True
        connection = self._connection
        with _connections.CONNECTIONS_LOCK:
            connection.users -= 1
            if connection.users > 0:
                return
            if _connections.CONNECTIONS.get(self._key) is connection:
                del _connections.CONNECTIONS[self._key]
        if connection.pid == os.getpid():
            connection.close()

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
            db = sqlite3.connect(uri(source, "ro"), uri=True, timeout=30)
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
        turn = Turn(source, lock_timeout())
        try:
            turn.take()
            if held := _held_slices(source):
                raise LedgerError(
                    f"{len(held)} running process{'es hold' if len(held) != 1 else ' holds'} a slice in {source}: "
                    f"{', '.join(held[:5])}. Shut those kernels down or stop those commands first "
                    "(`jupyter vgpu status` lists them)."
                )
            db = sqlite3.connect(uri(source, "rw"), uri=True, timeout=30, isolation_level=None)
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
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (BOOK, uuid.uuid4().hex))
                db.execute("COMMIT")
            finally:
                db.close()
        finally:
            turn.close()
        return target

    @staticmethod
    def reset(path: str | Path) -> Path | None:
        """Move a damaged ledger (and its WAL files) aside and make a fresh one, in the writers'
        turn; returns where the old one went. Processes that still have it open notice at their
        next transaction and open the fresh one (see :meth:`_follow_replacement`).

        Kernels and commands of the old ledger may still run, holding GPU memory no slice books
        any more. Unless the old file shows that none does, the fresh ledger records when it was
        reset: for :data:`RESET_GRACE` seconds new slices wait while the Jupyter servers book
        their running kernels' slices again (``rebook``), so nothing is placed on them first."""
        from ..slices.holders import boot_clock

        source = Path(path)
        if not source.exists():
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = source.with_name(f"{source.name}.corrupt-{stamp}")
        turn = Turn(source, lock_timeout())
        try:
            turn.take()
            try:
                holders_may_run = bool(_held_slices(source))
            except sqlite3.Error:
                holders_may_run = True  # damaged past reading: who ran cannot be told
            for extra_suffix in ("-wal", "-shm"):
                extra = source.with_name(source.name + extra_suffix)
                try:
                    extra.rename(target.with_name(target.name + extra_suffix))
                except FileNotFoundError:
                    pass  # none, or the last connection closing just deleted it
            source.rename(target)
            build(source, turn.timeout, {RESET_AT: repr(boot_clock())} if holders_may_run else None)
        finally:
            turn.close()
        return target

def _held_slices(path: Path) -> list[str]:
    """Slices of ``path`` whose holder (or keeper) still runs, read without taking a writer's turn."""
    from ..slices.holders import process_alive

    db = sqlite3.connect(uri(path, "ro"), uri=True, timeout=30)
    try:
        rows = db.execute(
            "SELECT id, holder, pid, pid_start, pid_stamp, keeper_pid, keeper_start, keeper_stamp FROM slices"
        ).fetchall()
    finally:
        db.close()
    return [
        f"{sid} ({holder[:60]}, pid {pid})"
        for sid, holder, pid, start, stamp, keeper, keeper_start, keeper_stamp in rows
        if process_alive(pid, start, stamp) or (keeper is not None and process_alive(keeper, keeper_start, keeper_stamp))
    ]
