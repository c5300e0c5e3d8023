"""Claims: how a holder proves that a slice id is its own when the book that granted it is gone.

A reset (``jupyter vgpu gc --reset-ledger``) drops every slice while their holders still run; the
holders then book their slices again (:mod:`.rebook`). The fresh book cannot tell whose an id was,
and every user can see every id (``jupyter vgpu status``, the broker's ``slices``). So the ledger
gives the user a slice was granted to its *claim*: an HMAC of the id, the user's uid and the process
that keeps the slice (its keeper, else its holder: pid and start) under a key that only the ledger's
keeper reads, kept beside the ledger file (it survives the reset, which moves only the database
aside). A rebook must bring the claim of its id for its own uid and its own running process: another
user's id comes without one, a claim for one user is worth nothing to another, and the claim of a
slice whose process has ended is worth nothing at all (hardening round five, M1: a user kept the
claims of slices he had released and rebooked them in a reset's grace, ahead of the live holders).

The key file is ``<ledger>.key``: created exclusively (written whole under a temporary name, then
linked into place, so a reader never sees half of it), the keeper's own and readable by nobody
else; one that is not is refused in one sentence, never used.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
import threading
from pathlib import Path

from ..errors import LedgerError
from ..slices.records import Slice

#: Bytes of the key (hex in the file) and hex digits of a claim.
KEY_BYTES = 32
CLAIM_DIGITS = 32


def key_path(ledger: Path) -> Path:
    """Where the claims' key of the ledger file ``ledger`` is kept."""
    return ledger.with_name(ledger.name + ".key")


def claim_of(key: bytes, slice_id: str, uid: int, keeper: str) -> str:
    """The claim of slice ``slice_id`` for the user ``uid`` and the process ``keeper`` (:func:`claimant`)."""
    return hmac.new(key, f"{slice_id}:{uid}:{keeper}".encode(), hashlib.sha256).hexdigest()[:CLAIM_DIGITS]


def claimant(slice_: Slice) -> str:
    """The process a slice's claim is for: its keeper (the server of a kernel, ``jupyter vgpu run``
    for its command), else its holder, as ``<pid>@<start stamp>``. A kernel restarted or a command
    started under ``run`` moves the holder, never the keeper."""
    return claimant_of(slice_.pid, slice_.pid_stamp, slice_.keeper_pid, slice_.keeper_stamp)


def claimant_of(pid: int | None, stamp: str | None, keeper: int | None, keeper_stamp: str | None) -> str:
    """:func:`claimant` from a holder's and a keeper's pid and start stamp."""
    return f"{keeper}@{keeper_stamp or ''}" if keeper else f"{pid}@{stamp or ''}"


class Claims:
    """The claims of one ledger file: its key is read (or made) on first use."""

    def __init__(self, ledger: Path) -> None:
        self.path = key_path(ledger)
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def of(self, slice_id: str, uid: int, keeper: str) -> str:
        return claim_of(self._load(), slice_id, uid, keeper)

    def holds(self, slice_id: str, uid: int, keeper: str, claim: object) -> bool:
        """Whether ``claim`` is the claim of ``slice_id`` for ``uid`` and the process ``keeper``."""
        if not isinstance(claim, str) or len(claim) != CLAIM_DIGITS:
            return False
        return hmac.compare_digest(self.of(slice_id, uid, keeper), claim)

    def _load(self) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = _read(self.path) or _make(self.path)
            return self._key


def _read(path: Path) -> bytes | None:
    """The key in ``path``; None when there is none. Raises :class:`LedgerError` for one that is not
    the keeper's alone (another user's file, a link, readable or writable by others)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LedgerError(f"The ledger's key {path} cannot be read ({error.strerror}); remove it or fix its permissions.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise LedgerError(
                f"The ledger's key {path} is not this user's private file (owner uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}); remove it, and a new one is made (mode 600)."
            )
        text = os.read(fd, 4 * KEY_BYTES).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise LedgerError(f"The ledger's key {path} is damaged (not {KEY_BYTES} bytes in hex); remove it, and a new one is made.")
    return key


def _make(path: Path) -> bytes:
    """A new key in ``path``, or the one another process made first."""
    key = secrets.token_bytes(KEY_BYTES)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 600
    except OSError as error:
        raise LedgerError(f"Cannot make the ledger's key {path} ({error.strerror}); its folder must be writable.") from None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(key.hex() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)  # exclusive: never replaces a key another process made first
        except FileExistsError:
            found = _read(path)
            if found is None:  # removed between the two: try again
                return _make(path)
            return found
    finally:
        os.unlink(tmp)
    return key
