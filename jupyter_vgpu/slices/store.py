"""The ledger's SQLite file: schema and upgrades, opening it safely, transactions.

Every process of the user (the Jupyter server, kernels, ``jupyter vgpu run``) opens the same
file. Writers take turns on an flock beside it and write inside ``BEGIN IMMEDIATE``
transactions, so two processes never place against the same free memory; WAL keeps readers
from blocking writers, and readers never take the writers' turn. A damaged file is never
repaired silently: opening it says so, and ``jupyter vgpu gc --reset-ledger`` moves it aside.

**The rule this module keeps: nothing but SQLite opens the database file, its ``-wal`` or its
``-shm`` in a process that may hold a connection to it.** SQLite's locks are POSIX advisory
locks, which belong to a process and an inode, and closing *any* descriptor of the file drops
*all* of them (sqlite.org/howtocorrupt.html, 2.2). A process that did so while it held a
connection looked unconnected to the others; the next process to close its last connection
then checkpointed and deleted the WAL under it, and the two went on with two books. So:

- a ledger that does not exist yet is built whole under a temporary name of the creating
  process (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600, then WAL and the schema) and linked to
  its path in the writers' turn, so no process ever opens a half-made one; an existing file is
  never opened outside SQLite, and SQLite never creates one (``mode=rw``). SQLite gives
  ``-wal`` and ``-shm`` the database file's mode;
- no connection is closed with SQLite's checkpoint-on-close, which deletes ``-wal`` and ``-shm``
  by name: after ``gc --reset-ledger`` moved the file aside, those names are the new file's;
- a process keeps **one connection per ledger file**, shared by every :class:`LedgerFile` of
  that path (counted; the last close closes it), so opening and closing happen in one place,
  threads take turns on one lock, and a connection can be replaced whole (below);
- identity checks use ``stat()`` by path and on ``/proc/self/fd`` links, never a descriptor;
  ``reset`` moves files by ``rename()``; ``clear`` and ``damage`` use SQLite connections, which
  SQLite itself keeps from dropping the others' locks.

If a split happens anyway (an older jupyter-vgpu, another program opening the file), the process
notices that the WAL it writes is not the WAL at the path (:meth:`LedgerFile.check_split`, run by
the server's monitor every tick and before each write), says so in the log and reopens; the server
then books its running kernels' slices again, as after ``gc --reset-ledger`` (see :meth:`LedgerFile.reset`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LedgerBusy, LedgerError
from ..units import shorten

#: 1: the first ledger. 2: each slice records its enforcement tier, and each of its GPUs the MIG
#: device it holds. 3: a slice may have a keeper process (the server that restarts its kernel),
#: and a place in line records when its requester last asked. 4: holders are known by a stamp (boot
#: id and start ticks) that no wall-clock step moves, and a place in line by when it was last asked on
#: the boot clock; a request may carry its client's token, so asking again finds what the first
#: asking got (upgraded in place, see ``_MIGRATIONS``).
SCHEMA_VERSION = 4

#: Each process checkpoints the write-ahead log after this many of its own write transactions.
CHECKPOINT_EVERY = 32

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
    from .holders import process_alive, start_stamp

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


def _schema_version(value: object) -> int:
    """The stored schema version; anything but a whole number from 1 up is damage."""
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        raise sqlite3.DatabaseError(f"its schema_version {shorten(value)} is not a version number")
    return int(text)


#: Seconds a writer waits for the writers' turn before it gives up and says which process holds
#: it (``JUPYTER_VGPU_LOCK_TIMEOUT``). A turn lasts milliseconds; only a stopped or hung holder
#: makes anyone wait this long.
ENV_LOCK_TIMEOUT = "JUPYTER_VGPU_LOCK_TIMEOUT"
LOCK_TIMEOUT = 20.0

log = logging.getLogger("jupyter_vgpu")


def lock_timeout() -> float:
    """The bound on waiting for the writers' turn (``JUPYTER_VGPU_LOCK_TIMEOUT``, seconds)."""
    text = os.environ.get(ENV_LOCK_TIMEOUT, "").strip()
    if not text:
        return LOCK_TIMEOUT
    try:
        value = float(text) if text.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not 0.1 <= value <= 3600:
        raise LedgerError(f"{ENV_LOCK_TIMEOUT}={shorten(text)} is not a number of seconds from 0.1 to 3600.")
    return value


def _check_folder(folder: Path) -> None:
    """Refuse a ledger folder another user may write to: they could plant the ledger's log files,
    a kernel's notices (printed into its cells) or a report that sets off the watchdog."""
    try:
        st = os.stat(folder)
    except OSError as error:
        raise LedgerError(f"Cannot use the ledger folder {folder}: {error.strerror or error}.") from None
    others_write = st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != os.getegid())
    foreign = st.st_uid not in (os.geteuid(), 0)
    if others_write or foreign:
        who = f"owned by uid {st.st_uid}" if foreign else f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        raise LedgerError(
            f"The ledger folder {folder} is {who}; use a folder only you can write to (e.g. `chmod 700 {folder}`), "
            "or point JUPYTER_VGPU_LEDGER elsewhere."
        )


class _Connection:
    """This process's one connection to one ledger file, shared by its :class:`LedgerFile`\\ s."""

    identity: tuple[int, int] | None  # (st_dev, st_ino) of the file this connection has open

    turn: _Turn | None  # None: read only (see _open_read_only)

    def __init__(self, path: Path, *, read_only_ok: bool = False) -> None:
        self.path = path
        self.wal_path = path.with_name(path.name + "-wal")
        self.timeout = lock_timeout()
        self.pid = os.getpid()
        self.lock = threading.RLock()  # one thread at a time uses the connection
        self.users = 0
        self.turns = 0  # how deep this process is inside the writers' turn (the flock)
        self.writes = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            raise LedgerError(f"Cannot create the ledger folder {path.parent}: {error.strerror or error}.") from None
        _check_folder(path.parent)
        try:
            turn = self.turn = _Turn(path, self.timeout)
            try:
                with self.lock:
                    self.db = self._open()
            except BaseException:
                turn.close()
                raise
        except LedgerError:
            if os.access(path.parent, os.W_OK):
                raise
            self._open_read_only(read_only_ok)  # a folder this user can only read
        self.wal_identity = self._open_wal_identity()

    # -- opening ----------------------------------------------------------------------------
    def _open_read_only(self, allowed: bool) -> None:
        """Read the ledger of a folder this user can only read (``status``), with SQLite alone and no
        writers' turn; or say in one sentence why it cannot be used. SQLite reads a WAL file without
        writing only through its ``-shm``; where there is none and no ``-wal`` either (the last
        connection ended), the file holds every commit and is read as it stands (``immutable``)."""
        folder = self.path.parent
        if self._existing() is None:
            raise LedgerError(
                f"There is no ledger at {self.path}, and none can be made: its folder {folder} is read-only for you. "
                "Point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a file in a folder you can write to."
            )
        if not allowed:
            raise LedgerError(self.read_only_sentence())
        mode = "ro" if os.path.lexists(self.wal_path) else "ro&immutable=1"
        try:
            db = sqlite3.connect(
                _uri(self.path, mode), uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise LedgerError(f"The ledger {self.path} cannot be read in its read-only folder {folder}: {error}.") from None
        db.row_factory = sqlite3.Row
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = _schema_version(row[0]) if row is not None else 0
        except sqlite3.Error as error:
            _close_without_checkpoint(db)
            raise LedgerError(f"The ledger {self.path} cannot be read in its read-only folder {folder}: {error}.") from None
        if version != SCHEMA_VERSION:
            _close_without_checkpoint(db)
            raise LedgerError(
                f"The ledger {self.path} has schema {version} and this jupyter-vgpu reads {SCHEMA_VERSION}; in its "
                f"read-only folder {folder} it cannot be upgraded."
            )
        self.db, self.turn, self.identity = db, None, self._existing()

    def read_only_sentence(self) -> str:
        return (
            f"The ledger {self.path} is in a folder you can only read ({self.path.parent}): `jupyter vgpu status` "
            "shows its slices, but nothing can be reserved or released there. Point JUPYTER_VGPU_LEDGER (or "
            "c.VGPU.ledger_path) at a file in a folder you can write to."
        )

    def _existing(self) -> tuple[int, int] | None:
        """The identity of the file at the path, None when there is none; refuses what is not a file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise LedgerError(f"Cannot open the ledger {self.path}: {error.strerror or error}.") from None
        if not stat.S_ISREG(st.st_mode):
            raise LedgerError(
                f"The ledger {self.path} is not a regular file; point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) "
                "at a file, e.g. ~/.local/share/jupyter/vgpu/ledger.sqlite."
            )
        return (st.st_dev, st.st_ino)

    def _create(self) -> None:
        """Make a new ledger, in the writers' turn (see :func:`_build`)."""
        _build(self.path, self.timeout)

    def _open(self) -> sqlite3.Connection:
        for attempt in range(_OPEN_ATTEMPTS):
            try:
                return self._open_ready(in_turn=attempt > 0)
            except sqlite3.OperationalError as error:
                if _locked(error):
                    raise LedgerError(
                        f"The ledger {self.path} stayed locked by another process for {self.timeout:g} s: {error}."
                    ) from None
                if _io_error(error) and attempt + 1 < _OPEN_ATTEMPTS:
                    # Met once in 360 opens under CI load while `gc --reset-ledger` moved the file
                    # aside again and again (not reproduced here in 4,800): open again, in the turn,
                    # where nobody moves it. A disk that really fails fails every attempt.
                    log.debug("jupyter-vgpu: opening %s met %s; opening it again", self.path, error)
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise LedgerError(f"Cannot use the ledger {self.path}: {error}.") from None
            except sqlite3.DatabaseError as error:
                raise LedgerError(f"The ledger {self.path} is corrupt ({error}). " + RECOVERY.format(name=self.path.name)) from None
        raise AssertionError("unreachable")

    def _open_ready(self, *, in_turn: bool = False) -> sqlite3.Connection:
        """A connection to a ledger in WAL mode at this schema version; sets ``identity``. The
        usual case (a ledger that is ready) takes no writers' turn, so readers never wait for
        writers. Anything else is done inside the turn, where nobody creates, converts or moves
        the file meanwhile: a ledger to create or upgrade, and one ``gc --reset-ledger`` moved
        aside while this process was opening it (its connection would be to a file nobody else
        reads)."""
        before = None if in_turn else self._existing()
        if before is not None:
            probe: sqlite3.Connection | None = None
            try:
                probe = self._connect()
                if self._check(probe) and self._ready(probe) and _identity(self.path) == before:
                    self.identity = before
                    ready, probe = probe, None
                    return ready
            except sqlite3.OperationalError as error:
                if _locked(error):
                    raise
                # gone or caught mid-change by another process: again in the turn
            except sqlite3.DatabaseError:
                if _identity(self.path) == before:
                    raise  # damaged where it stands
                # moved aside while this process read it: again in the turn
            finally:
                if probe is not None:
                    # Never a checkpoint on this close: if the file was moved aside meanwhile,
                    # SQLite would delete <ledger>-wal by name, which is now the new file's log.
                    _close_without_checkpoint(probe)
        with self.writer_turn(True):
            if self._existing() is None:
                self._create()
            db = self._connect()
            try:
                self._check(db)
                if not self._ready(db):
                    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    if str(mode).lower() != "wal":
                        raise LedgerError(f"The ledger {self.path} cannot use write-ahead logging (journal mode {mode}).")
                    self._set_up(db, self.path)
            except BaseException:
                _close_without_checkpoint(db)
                raise
            self.identity = _identity(self.path)
        return db

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: never create the file (one moved aside just now must not come back empty);
        # a file gone meanwhile raises OperationalError, and _open_ready tries in the turn
        db = sqlite3.connect(
            _uri(self.path, "rw"), uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        db.row_factory = sqlite3.Row
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA wal_autocheckpoint = 0")
            db.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            _close_without_checkpoint(db)
            raise  # damage or a busy file: _open says which
        return db

    @staticmethod
    def _check(db: sqlite3.Connection) -> bool:
        """SQLite's quick integrity check (damage raises ``sqlite3.DatabaseError``)."""
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(check)
        return True

    def _ready(self, db: sqlite3.Connection) -> bool:
        """True when the file is in WAL mode at this schema version (read only, no turn)."""
        if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            return False
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return False
            raise
        if row is None:
            return False
        version = _schema_version(row[0])
        if version > SCHEMA_VERSION:
            raise _newer(self.path, version)
        return version == SCHEMA_VERSION

    @staticmethod
    def _set_up(db: sqlite3.Connection, path: Path) -> None:
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
                version = _schema_version(row[0])
                if version > SCHEMA_VERSION:
                    raise _newer(path, version)
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

    # -- the writers' turn -------------------------------------------------------------------
    @contextmanager
    def writer_turn(self, write: bool) -> Iterator[None]:
        """Writers queue on an flock beside the database, and wait at most :attr:`timeout` for
        it: a process stopped inside its turn (SIGSTOP, a debugger) must not hang everyone."""
        if not write:
            yield
            return
        if self.turn is None:
            raise LedgerError(self.read_only_sentence())
        if self.turns == 0:
            self.turn.take()
        self.turns += 1
        try:
            yield
        finally:
            self.turns -= 1
            if self.turns == 0:
                self.turn.give()

    # -- one book ----------------------------------------------------------------------------
    def _open_wal_identity(self) -> tuple[int, int] | None:
        """The WAL file this process's connection writes (from ``/proc/self/fd``), or None
        where that cannot be seen."""
        found = _open_files(self.wal_path)
        return found[0][1] if found else None

    def split(self) -> str | None:
        """Why the WAL this process writes is not the one at the path (a split), or None."""
        opened = _open_files(self.wal_path)
        if not opened:
            return None
        at_path = _identity(self.wal_path)
        for link, identity in opened:
            if link.endswith(" (deleted)"):
                return f"the write-ahead log this process writes, {self.wal_path}, was deleted under it"
            if at_path is not None and identity != at_path:
                return f"{self.wal_path} was replaced by another file while this process wrote to it"
        return None

    def follow_split(self, *, full: bool = False) -> str | None:
        """Reopen after a split: the cheap check (one ``stat``) before each write, the full one
        (``/proc/self/fd``) when it is unsure or ``full``. Returns what was found, or None."""
        if not full and self.wal_identity is not None and _identity(self.wal_path) == self.wal_identity:
            return None
        problem = self.split()
        if problem is None:
            if self.wal_identity is None:
                self.wal_identity = self._open_wal_identity()
            return None
        with self.writer_turn(True):
            log.warning(
                "jupyter-vgpu: the ledger %s split from the other processes' (%s); reopening it. What this "
                "process wrote since then is lost: the monitor's next tick and every later write see the one book.",
                self.path,
                problem,
            )
            _close_without_checkpoint(self.db)
            self.db = self._open()
            self.wal_identity = self._open_wal_identity()
        return problem

    def follow_replacement(self) -> None:
        """If the file at ``path`` is no longer the one this connection has open (``jupyter vgpu
        gc --reset-ledger`` moved a damaged ledger aside), reopen: never write to a file nobody
        else reads. The old connection is parked, not closed: closing the last connection to a
        WAL database deletes ``<path>-wal`` by name, which is now the new file's log."""
        if _identity(self.path) == self.identity:
            return
        with self.writer_turn(True):
            if _identity(self.path) == self.identity:
                return
            _PARKED.append(self.db)
            self.db = self._open()
            self.wal_identity = self._open_wal_identity()

    def checkpoint(self) -> None:
        # Copy the write-ahead log back into the database outside the writers' turn, so the
        # fsync it costs does not hold every other writer up (automatic checkpoints are off).
        try:
            self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # another process is checkpointing; the next one will

    def close(self) -> None:
        # Never SQLite's checkpoint on close: as the last connection it deletes <ledger>-wal and
        # -shm *by name*, and if `gc --reset-ledger` moved this file aside since it was opened,
        # those names are the new file's (a process opening it then met "disk I/O error"). The
        # passive checkpoint goes through this connection's own descriptors; the files stay.
        with self.lock:
            self.checkpoint()
            _close_without_checkpoint(self.db)
            if self.turn is not None:
                self.turn.close()


#: This process's connections, by the ledger's absolute path (see :class:`_Connection`).
_CONNECTIONS: dict[str, _Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A forked child never uses (nor closes) its parent's connections: SQLite connections do not
    # survive fork(), and the child holds none of the parent's locks. It opens its own.
    global _CONNECTIONS_LOCK
    _CONNECTIONS.clear()
    _CONNECTIONS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
        with _CONNECTIONS_LOCK:
            connection = _CONNECTIONS.get(self._key)
            if connection is None or connection.pid != os.getpid():
                connection = _Connection(self.path, read_only_ok=read_only_ok)
                _CONNECTIONS[self._key] = connection
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
        with _CONNECTIONS_LOCK:
            connection.users -= 1
            if connection.users > 0:
                return
            if _CONNECTIONS.get(self._key) is connection:
                del _CONNECTIONS[self._key]
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
            db = sqlite3.connect(_uri(source, "ro"), uri=True, timeout=30)
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
        turn = _Turn(source, lock_timeout())
        try:
            turn.take()
            if held := _held_slices(source):
                raise LedgerError(
                    f"{len(held)} running process{'es hold' if len(held) != 1 else ' holds'} a slice in {source}: "
                    f"{', '.join(held[:5])}. Shut those kernels down or stop those commands first "
                    "(`jupyter vgpu status` lists them)."
                )
            db = sqlite3.connect(_uri(source, "rw"), uri=True, timeout=30, isolation_level=None)
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
        from .holders import boot_clock

        source = Path(path)
        if not source.exists():
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = source.with_name(f"{source.name}.corrupt-{stamp}")
        turn = _Turn(source, lock_timeout())
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
            _build(source, turn.timeout, {RESET_AT: repr(boot_clock())} if holders_may_run else None)
        finally:
            turn.close()
        return target


#: Connections to ledger files that were moved aside: kept open for the process's life, because
#: closing them would delete the new file's write-ahead log (see LedgerFile._follow_replacement).
_PARKED: list[sqlite3.Connection] = []


def _newer(path: Path, version: int) -> LedgerError:
    return LedgerError(
        f"The ledger {path} was written by a newer jupyter-vgpu (schema {version}, this one "
        f"reads {SCHEMA_VERSION}); upgrade jupyter-vgpu or point JUPYTER_VGPU_LEDGER elsewhere."
    )


def _build(path: Path, timeout: float, meta: dict[str, str] | None = None) -> None:
    """Make a new ledger at ``path``, in the writers' turn: built whole (WAL mode, schema, a new
    book id and ``meta``) under a name of this process's, owner-only, then linked to the path in
    one step. Nobody ever opens a half-made ledger: two processes on a file still in
    rollback-journal mode raced on deleting its journal as one switched it to WAL
    (SQLITE_IOERR_DELETE_NOENT, "disk I/O error")."""
    temporary = path.with_name(f".{path.name}.new-{os.getpid()}")
    _remove_with_logs(temporary)  # left by a process of this pid that died here
    try:
        os.close(os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        db = sqlite3.connect(_uri(temporary, "rw"), uri=True, timeout=timeout, isolation_level=None)
        try:
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"The ledger {path} cannot use write-ahead logging (journal mode {mode}).")
            _Connection._set_up(db, path)
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
        _remove_with_logs(temporary)


def book_id(db: sqlite3.Connection) -> str:
    """Which book the ledger is: a new id whenever it is made afresh (``gc --reset-ledger``) or
    emptied (``--force``); '' for a ledger made before ids were kept."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (BOOK,)).fetchone()
    return str(row[0]) if row is not None else ""


def reset_grace_left(db: sqlite3.Connection) -> float:
    """Seconds left of :data:`RESET_GRACE` after ``gc --reset-ledger`` made this ledger afresh
    while processes of the old one may still run (0: none). The boot clock, so no wall-clock step
    stretches it; a reset before the last boot reads as long past."""
    from .holders import boot_clock

    row = db.execute("SELECT value FROM meta WHERE key = ?", (RESET_AT,)).fetchone()
    try:
        since = boot_clock() - float(row[0]) if row is not None else math.inf
    except ValueError:
        return 0.0
    return RESET_GRACE - since if 0 <= since < RESET_GRACE else 0.0


def _held_slices(path: Path) -> list[str]:
    """Slices of ``path`` whose holder (or keeper) still runs, read without taking a writer's turn."""
    from .holders import process_alive

    db = sqlite3.connect(_uri(path, "ro"), uri=True, timeout=30)
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


def _remove_with_logs(path: Path) -> None:
    """Remove a database file that no connection uses any more, and its journal and logs."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _uri(path: str | Path, mode: str) -> str:
    """An SQLite URI for ``path`` (any characters) opened with ``mode`` (ro, rw, rwc)."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"


#: How many times an open that met an I/O error is tried (see _Connection._open).
_OPEN_ATTEMPTS = 3


def _io_error(error: sqlite3.OperationalError) -> bool:
    """SQLite's SQLITE_IOERR family ("disk I/O error")."""
    code = getattr(error, "sqlite_errorcode", None)
    return (code & 0xFF) == 10 if isinstance(code, int) else "disk I/O error" in str(error)


def _locked(error: sqlite3.OperationalError) -> bool:
    """SQLite's "database is locked" / "busy": another process held it past the timeout."""
    return "locked" in str(error) or "busy" in str(error)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


#: Pauses between the first tries for a busy writers' turn (seconds), before a helper thread waits
#: for it in the kernel: a turn usually ends within them, and a thread costs a hand-over.
_QUICK_TRIES = (0.0, 0.0002, 0.0004, 0.0008, 0.0016)


class _Turn:
    """The writers' turn on one ledger: an flock on ``<ledger>.lock``, waited for at most
    ``timeout`` seconds.

    Taken at once when it is free, or within a few quick tries. Otherwise one helper thread (per ledger and process, however
    often callers give up) waits for it in a blocking ``flock``, so the kernel hands the turn
    over the moment it is free, as a plain blocking flock does; the caller waits for the helper
    at most ``timeout`` and then raises :class:`~jupyter_vgpu.errors.LedgerBusy` naming the
    process that holds the turn. Polling instead doubled the tail latency under contention.
    Callers of one instance take turns (the connection's lock)."""

    def __init__(self, ledger: Path, timeout: float) -> None:
        self.ledger = ledger
        self.path = ledger.with_name(ledger.name + ".lock")
        self.timeout = timeout
        self.fd = self._open()
        self.held: int | None = None  # the descriptor that holds the turn now
        self._mutex = threading.Lock()
        self._helper: _TurnHelper | None = None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as error:
            raise LedgerError(f"Cannot open the ledger lock {self.path}: {error.strerror or error}.") from None

    def _try(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = self.fd
        return True

    def take(self) -> None:
        started = time.monotonic()
        for pause in _QUICK_TRIES:  # most turns last well under a millisecond: try a few times first
            if self._try():
                return
            time.sleep(pause)
        if self._try():
            return
        with self._mutex:
            helper = self._helper
            if helper is None or helper.finished:
                helper = self._helper = _TurnHelper(self._open(), self._mutex)
            helper.wanted = True
        helper.acquired.wait(self.timeout)
        with self._mutex:
            if helper.acquired.is_set():
                self._helper = None
                self.held = helper.fd
                return
            helper.wanted = False  # it lets go of the turn as soon as it gets it
        raise LedgerBusy(_busy(self.path, self.ledger, time.monotonic() - started))

    def give(self) -> None:
        held, self.held = self.held, None
        if held == self.fd:
            fcntl.flock(held, fcntl.LOCK_UN)
        elif held is not None:
            os.close(held)  # the helper's own descriptor: closing it ends its flock

    def close(self) -> None:
        self.give()
        os.close(self.fd)


class _TurnHelper:
    """A thread blocked in ``flock`` on its own descriptor until the turn is free; it then hands
    the turn (the descriptor) to a caller still waiting, or lets it go at once."""

    def __init__(self, fd: int, mutex: threading.Lock) -> None:
        self.fd = fd
        self.mutex = mutex
        self.acquired = threading.Event()
        self.wanted = True
        self.finished = False
        threading.Thread(target=self._wait, name="jupyter-vgpu-ledger-turn", daemon=True).start()

    def _wait(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            with self.mutex:
                self.finished = True
            os.close(self.fd)
            return
        with self.mutex:
            self.finished = True
            if self.wanted:
                self.acquired.set()
                return
        os.close(self.fd)  # nobody waits any more: let the next writer have it


def _busy(lock_path: Path, ledger: Path, waited: float) -> str:
    """One sentence: who holds the writers' turn of ``ledger``, and what to do."""
    pid = turn_holder(lock_path)
    if pid is None:
        who = "another process"
        stopped = False
    else:
        name, stopped = _process_state(pid)
        who = f"process {pid}" + (f" ({name})" if name else "")
    state = ", which is stopped (SIGSTOP, Ctrl-Z or a debugger)," if stopped else ""
    return (
        f"The ledger {ledger} is busy: {who}{state} has held the writers' turn for all the {waited:.1f} s this "
        f"waited ({ENV_LOCK_TIMEOUT}); nothing was changed. Try again once it continues or ends."
    )


def turn_holder(lock_path: Path) -> int | None:
    """The pid holding the flock on ``lock_path`` (from ``/proc/locks``), or None if unknown."""
    try:
        st = os.stat(lock_path)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read(1 << 20).splitlines()
    except OSError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2e:5678 0 EOF"; a waiter's line has "->" after the number
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == key and parts[4].isdigit():
            return int(parts[4]) or None
    return None


def _process_state(pid: int) -> tuple[str, bool]:
    """A process's name and whether it is stopped, from ``/proc/<pid>/stat`` ('', False if unknown)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return "", False
    name = text[text.find("(") + 1 : text.rfind(")")]
    state = text[text.rfind(")") + 2 : text.rfind(")") + 3]
    return "".join(c for c in name if c.isprintable())[:40], state in ("T", "t")


def _open_files(path: Path) -> list[tuple[str, tuple[int, int]]]:
    """This process's open descriptors of ``path`` (also deleted ones): their link text and the
    identity of the file each has open. Read from ``/proc/self/fd`` with ``readlink`` and
    ``stat``, which open nothing. Empty where ``/proc`` is missing."""
    wanted = (str(path), f"{path} (deleted)")
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    for name in names:
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
            if link not in wanted:
                continue
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        found.append((link, (st.st_dev, st.st_ino)))
    return found


def _close_without_checkpoint(db: sqlite3.Connection) -> None:
    """Close a connection whose WAL is not the path's: without SQLite's checkpoint on close,
    which would copy this process's lost log into the database and delete the live log by name
    (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``; ``Connection.setconfig`` from Python 3.12, the C call
    before). Where neither is possible the connection is parked, never closed."""
    try:
        if hasattr(db, "setconfig"):
            db.setconfig(1010, True)  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE
        elif not _no_checkpoint_on_close_via_c(db):
            _PARKED.append(db)
            return
    except Exception:
        _PARKED.append(db)
        return
    db.close()


def _no_checkpoint_on_close_via_c(db: sqlite3.Connection) -> bool:
    """``sqlite3_db_config(NO_CKPT_ON_CLOSE)`` on CPython 3.10 and 3.11, whose connection object
    holds the ``sqlite3 *`` right after the object header. True when SQLite confirmed it."""
    import ctypes
    import platform
    import sys

    if platform.python_implementation() != "CPython" or sys.version_info[:2] not in ((3, 10), (3, 11)):
        return False
    import _sqlite3

    library = ctypes.CDLL(_sqlite3.__file__)
    handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value
    if not handle:
        return False
    confirmed = ctypes.c_int(-1)
    code = library.sqlite3_db_config(ctypes.c_void_p(handle), 1010, ctypes.c_int(1), ctypes.byref(confirmed))
    return bool(code == 0 and confirmed.value == 1)
