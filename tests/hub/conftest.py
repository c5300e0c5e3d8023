"""Fixtures for the hub tests: two real system users, a real broker process on a Unix socket.

The tests run as root (as in CI): they create the users with ``useradd`` and remove them
afterwards, and run commands as them with ``setpriv``. The project's interpreter may live under
a directory other users cannot enter (pyenv in /root): the fixture then lets every user traverse
that directory (mode o+x, never o+r) for the session and restores its mode afterwards.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent
JUPYTER_VGPU = str(BIN / "jupyter-vgpu")
PYTHON = str(BIN / "python")


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "HOME": str(self.home),
            "USER": self.name,
            "PATH": f"{BIN}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
        }
        env.update(extra)
        return env

    def command(self, *argv: str) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]

    def run(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*argv), env=env or self.env(), capture_output=True, text=True, timeout=timeout, cwd="/")

    def popen(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(*argv), env=env or self.env(), text=True, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass
class Users:
    alice: User
    bob: User
    students: str  # a group alice is in, bob is not
    staff: str  # a group bob is in


def _traversable_for_everyone(path: Path) -> list[tuple[Path, int]]:
    """Grant o+x on each ancestor of ``path`` that lacks it; returns what to restore."""
    changed = []
    for folder in [*reversed(path.parents)]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(folder, stat.S_IMODE(mode) | stat.S_IXOTH)
            changed.append((folder, stat.S_IMODE(mode)))
    return changed


@pytest.fixture(scope="session")
def system_users() -> Iterator[Users]:
    if os.geteuid() != 0:
        pytest.skip("the hub tests create system users and run as them: run them as root")
    for tool in ("useradd", "userdel", "groupadd", "groupdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` is not available, so the test cannot create and act as two system users")
    tag = uuid.uuid4().hex[:6]
    names = {"alice": f"vgpua{tag}", "bob": f"vgpub{tag}"}
    groups = {"students": f"vgpustu{tag}", "staff": f"vgpustaff{tag}"}
    created_users: list[str] = []
    created_groups: list[str] = []
    restore = _traversable_for_everyone(Path(os.path.realpath(sys.executable)))
    try:
        for group in groups.values():
            subprocess.run(["groupadd", group], check=True, capture_output=True)
            created_groups.append(group)
        for who, name in names.items():
            extra = groups["students"] if who == "alice" else groups["staff"]
            subprocess.run(["useradd", "-m", "-s", "/bin/sh", "-G", extra, name], check=True, capture_output=True)
            created_users.append(name)
        made = {}
        for who, name in names.items():
            entry = pwd.getpwnam(name)
            made[who] = User(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
        assert groups["students"] in [g.gr_name for g in grp.getgrall() if names["alice"] in g.gr_mem]
        yield Users(made["alice"], made["bob"], groups["students"], groups["staff"])
    finally:
        for name in created_users:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        time.sleep(0.2)
        for name in created_users:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        for group in created_groups:
            subprocess.run(["groupdel", group], capture_output=True)
        for folder, mode in reversed(restore):
            os.chmod(folder, mode)


def world_dir(prefix: str) -> Path:
    """A root-owned folder every user can enter (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@dataclass
class BrokerProcess:
    socket: Path
    ledger: Path
    policy: Path
    log: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    extra: list[str] = field(default_factory=list)

    def start(self, *, wait: bool = True) -> BrokerProcess:
        argv = [JUPYTER_VGPU, "broker", "--socket", str(self.socket), "--ledger", str(self.ledger),
                "--policy", str(self.policy), "--reap-interval", "0.5", *self.extra]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"the broker exited with {self.process.returncode}:\n{self.log.read_text()}")
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(str(self.socket))
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the broker did not listen in time:\n{self.log.read_text()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(30)

    def write_policy(self, data: dict[str, Any] | str) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        tmp = self.policy.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.policy)


def student_policy(users: Users) -> dict[str, Any]:
    return {
        "default": {"max_per_kernel": "1/2", "max_slices": 3},
        "groups": {users.students: {"max_per_kernel": "1/4", "max_total": "1/2"}, users.staff: {"max_per_kernel": 1}},
        "users": {},
    }


@pytest.fixture
def broker(system_users: Users, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """A broker on one simulated 16 GiB GPU, as root, with the student policy. A test that needs
    other GPUs or options from its start parametrizes it (indirect): ``{"simulate": "2x16GiB",
    "extra": ["--metrics-port", "0"]}``."""
    asked = getattr(request, "param", {})
    sockets = world_dir("vgpu-broker-")
    state = Path(tempfile.mkdtemp(prefix="vgpu-state-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU")}
    env["JUPYTER_VGPU_SIMULATE"] = asked.get("simulate", "1x16GiB")
    handle = BrokerProcess(
        socket=sockets / "broker.sock", ledger=state / "ledger.sqlite", policy=state / "policy.json",
        log=state / "broker.log", env=env, extra=list(asked.get("extra", [])),
    )
    handle.write_policy(student_policy(system_users))
    for key in ("JUPYTER_VGPU_SIMULATE", "JUPYTER_VGPU_LEDGER", "JUPYTER_VGPU_CONTEXT_ALLOWANCE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("JUPYTER_VGPU_BROKER", str(handle.socket))
    handle.start()
    try:
        yield handle
    finally:
        if handle.process is not None and handle.process.poll() is None:
            handle.kill(signal.SIGTERM)
        shutil.rmtree(sockets, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def wait_until(predicate: Any, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met in {timeout} s")
        time.sleep(0.05)
