"""Who asks the node broker (:class:`Caller`, from the socket's peer credentials) and the policy
in force for them (:class:`PolicySource`, re-read when its file changes)."""

from __future__ import annotations

import logging
import pwd
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..errors import InvalidConfig
from .policy import Policy, load_policy

log = logging.getLogger("jupyter_vgpu.broker")


@dataclass(frozen=True)
class Caller:
    """Who is on the other end of a connection, from ``SO_PEERCRED``."""

    pid: int
    uid: int
    gid: int
    user: str
    groups: tuple[str, ...]
    admin: bool


def process_uid(pid: int) -> int | None:
    """The real uid of a running process, None when it cannot be told (it ended)."""
    try:
        return int(psutil.Process(pid).uids().real)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class PolicySource:
    """The policy in force, re-read on :meth:`reload` (SIGHUP) or when its file changes.

    A policy file that stops being valid is reported in the log and the last good policy
    stays in force; at start a bad file is an error (:class:`InvalidConfig`).
    """

    def __init__(self, path: str | Path | None, *, check_every: float = 1.0) -> None:
        self.path = Path(path) if path else None
        self.check_every = check_every
        self.error: str | None = None
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp: tuple[float, int] | None = None
        self.policy = self._read() if self.path else Policy()

    def _file_stamp(self) -> tuple[float, int] | None:
        assert self.path is not None
        try:
            info = self.path.stat()
        except OSError:
            return None
        return (info.st_mtime, info.st_size)

    def _read(self) -> Policy:
        assert self.path is not None
        self._stamp = self._file_stamp()
        return load_policy(self.path)

    def reload(self) -> bool:
        """Read the file again; True if a new policy is in force."""
        if self.path is None:
            return False
        with self._lock:
            try:
                self.policy = self._read()
            except InvalidConfig as error:
                self.error = str(error)
                log.error("jupyter-vgpu broker: %s Keeping the last good policy (%s).", error, self.policy.source)
                return False
            self.error = None
            log.info("jupyter-vgpu broker: policy reloaded from %s.", self.path)
            return True

    def current(self) -> Policy:
        """The policy, re-read first if its file changed (checked at most every ``check_every`` s)."""
        if self.path is not None and time.monotonic() - self._checked >= self.check_every:
            self._checked = time.monotonic()
            if self._file_stamp() != self._stamp:
                self.reload()
        return self.policy
