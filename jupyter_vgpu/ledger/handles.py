"""Opening and closing SQLite handles of a ledger file by the rule of :mod:`.connection`: a URI
that never creates a file, a close that never checkpoints (nor deletes the logs by name), and the
connections to files moved aside, kept open for the process's life."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

#: Connections to ledger files that were moved aside: kept open for the process's life, because
#: closing them would delete the new file's write-ahead log (see LedgerFile._follow_replacement).
PARKED: list[sqlite3.Connection] = []

def remove_with_logs(path: Path) -> None:
    """Remove a database file that no connection uses any more, and its journal and logs."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def uri(path: str | Path, mode: str) -> str:
    """An SQLite URI for ``path`` (any characters) opened with ``mode`` (ro, rw, rwc)."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"

def close_without_checkpoint(db: sqlite3.Connection) -> None:
    """Close a connection whose WAL is not the path's: without SQLite's checkpoint on close,
    which would copy this process's lost log into the database and delete the live log by name
    (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``; ``Connection.setconfig`` from Python 3.12, the C call
    before). Where neither is possible the connection is parked, never closed."""
    try:
        if hasattr(db, "setconfig"):
            db.setconfig(1010, True)  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE
        elif not _no_checkpoint_on_close_via_c(db):
            PARKED.append(db)
            return
    except Exception:
        PARKED.append(db)
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
