"""The writers' turn on a ledger: an flock beside the file, waited for at most a bound, and who
holds it when someone waits too long (read from ``/proc/locks``)."""

from __future__ import annotations

import fcntl
import math
import os
import threading
import time
from pathlib import Path

from ..errors import LedgerBusy, LedgerError
from ..units import shorten

#: Seconds a writer waits for the writers' turn before it gives up and says which process holds
#: it (``JUPYTER_VGPU_LOCK_TIMEOUT``). A turn lasts milliseconds; only a stopped or hung holder
#: makes anyone wait this long.
ENV_LOCK_TIMEOUT = "JUPYTER_VGPU_LOCK_TIMEOUT"
LOCK_TIMEOUT = 20.0

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

#: Pauses between the first tries for a busy writers' turn (seconds), before a helper thread waits
#: for it in the kernel: a turn usually ends within them, and a thread costs a hand-over.
_QUICK_TRIES = (0.0, 0.0002, 0.0004, 0.0008, 0.0016)


class Turn:
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
