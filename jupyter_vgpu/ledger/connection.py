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

import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LedgerError
from .filesystem import warn_if_shared
from .handles import PARKED, close_without_checkpoint, uri
from .schema import RECOVERY, SCHEMA_VERSION, build, newer, schema_version, set_up
from .turn import Turn, lock_timeout

log = logging.getLogger("jupyter_vgpu")

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


def open_read_only(path: Path, timeout: float, where: str) -> sqlite3.Connection:
    """A connection that reads the existing ledger at ``path`` with SQLite alone, without the
    writers' turn, after checking its schema; what stops it is one sentence (LedgerError) that ends
    with ``where`` ("in its read-only folder F"). SQLite reads a WAL file without writing only
    through its ``-shm``; where there is none and no ``-wal`` either (the last connection ended),
    the file holds every commit and is read as it stands (``immutable``)."""
    wal = path.with_name(path.name + "-wal")
    mode = "ro" if os.path.lexists(wal) else "ro&immutable=1"
    try:
        db = sqlite3.connect(uri(path, mode), uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as error:
        raise LedgerError(f"The ledger {path} cannot be read {where}: {error}.") from None
    db.row_factory = sqlite3.Row
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = schema_version(row[0]) if row is not None else 0
    except sqlite3.Error as error:
        close_without_checkpoint(db)
        raise LedgerError(f"The ledger {path} cannot be read {where}: {error}.") from None
    if version != SCHEMA_VERSION:
        close_without_checkpoint(db)
        raise LedgerError(
            f"The ledger {path} has schema {version} and this jupyter-vgpu reads {SCHEMA_VERSION}; {where} it cannot be upgraded."
        )
    return db


class Connection:
    """This process's one connection to one ledger file, shared by its :class:`LedgerFile`\\ s."""

    identity: tuple[int, int] | None  # (st_dev, st_ino) of the file this connection has open

    turn: Turn | None  # None: read only (see _open_read_only)

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
        warn_if_shared(path)
        try:
            turn = self.turn = Turn(path, self.timeout)
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
        """Read the ledger of a folder this user can only read (``status``) with :func:`open_read_only`;
        or say in one sentence why it cannot be used."""
        folder = self.path.parent
        if self._existing() is None:
            raise LedgerError(
                f"There is no ledger at {self.path}, and none can be made: its folder {folder} is read-only for you. "
                "Point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a file in a folder you can write to."
            )
        if not allowed:
            raise LedgerError(self.read_only_sentence())
        db = open_read_only(self.path, self.timeout, f"in its read-only folder {folder}")
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
        """Make a new ledger, in the writers' turn (see :func:`.schema.build`)."""
        build(self.path, self.timeout)

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
                    close_without_checkpoint(probe)
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
                    set_up(db, self.path)
            except BaseException:
                close_without_checkpoint(db)
                raise
            self.identity = _identity(self.path)
        return db

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: never create the file (one moved aside just now must not come back empty);
        # a file gone meanwhile raises OperationalError, and _open_ready tries in the turn
        db = sqlite3.connect(
            uri(self.path, "rw"), uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        db.row_factory = sqlite3.Row
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA wal_autocheckpoint = 0")
            db.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            close_without_checkpoint(db)
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
        version = schema_version(row[0])
        if version > SCHEMA_VERSION:
            raise newer(self.path, version)
        return version == SCHEMA_VERSION

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
            close_without_checkpoint(self.db)
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
            PARKED.append(self.db)
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
            close_without_checkpoint(self.db)
            if self.turn is not None:
                self.turn.close()


#: This process's connections, by the ledger's absolute path (see :class:`Connection`).
CONNECTIONS: dict[str, Connection] = {}
CONNECTIONS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A forked child never uses (nor closes) its parent's connections: SQLite connections do not
    # survive fork(), and the child holds none of the parent's locks. It opens its own.
    global CONNECTIONS_LOCK
    CONNECTIONS.clear()
    CONNECTIONS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)

#: How many times an open that met an I/O error is tried (see Connection._open).
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
