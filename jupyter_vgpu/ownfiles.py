"""Small JSON files the processes of one user share in a folder beside the ledger (the slices'
reports, what processes hold on simulated GPUs): written atomically, so a reader never sees half a
file, and read only when this user owns them (another user's file in a shared folder is not ours).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def write_json(target: Path, data: Any, *, prefix: str) -> None:
    """Replace ``target`` with ``data`` (its folder made private if missing); ``prefix`` names the
    temporary file it is written to first."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{prefix}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_own_json(path: Path, limit: int) -> Any:
    """The JSON in ``path`` if this user owns the file and it is a regular one, at most ``limit``
    bytes read; None otherwise (missing, another user's, a link, not JSON)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            return json.loads(handle.read(limit + 1))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)
