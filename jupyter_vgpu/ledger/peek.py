"""Reading a ledger once without joining it: its slices as they stand, with SQLite alone (no
writers' turn, no connection kept, nothing written). A Slurm node's exporter reads each job's
ledger on its node this way (:mod:`jupyter_vgpu.launch.slurm.jobs`); the ledger's own processes
never notice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import LedgerError
from ..slices.records import Slice
from .connection import open_read_only
from .handles import close_without_checkpoint
from .rows import read_slices
from .turn import lock_timeout


def peek_slices(path: Path) -> list[Slice]:
    """Every slice booked in the ledger at ``path`` (one read transaction); what stops it is one
    sentence (LedgerError)."""
    db = open_read_only(path, lock_timeout(), "by this node's exporter")
    try:
        db.execute("BEGIN")
        try:
            return read_slices(db)
        finally:
            db.execute("COMMIT")
    except sqlite3.Error as error:
        raise LedgerError(f"The ledger {path} cannot be read by this node's exporter: {error}.") from None
    finally:
        close_without_checkpoint(db)
