"""HAMi-core on a shared node: the broker (root) places the slice, so its library, not the user's
settings, is what the user's `jupyter vgpu run` preloads; where the user's process cannot preload
it, `run` and `status` say the command is cooperative, in the words a kernel uses, not "enforced"."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_hami_core import a_shared_library  # type: ignore[import-not-found]

from .conftest import JUPYTER_VGPU, BrokerProcess, Users, wait_until

pytestmark = pytest.mark.hub

SHOW = 'echo "LD_PRELOAD=$LD_PRELOAD"; grep -c libvgpu.so /proc/self/maps || true'


def restart_with_library(broker: BrokerProcess, library: str) -> None:
    broker.kill(signal.SIGTERM)
    broker.env["JUPYTER_VGPU_HAMI_CORE"] = library  # the broker's setting; the users' have none
    broker.start()


def test_a_users_command_preloads_the_brokers_library(system_users: Users, broker: BrokerProcess) -> None:
    library = a_shared_library()
    restart_with_library(broker, library)
    alice = system_users.alice
    env = alice.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    assert "JUPYTER_VGPU_HAMI_CORE" not in env
    ran = alice.run(JUPYTER_VGPU, "run", "-p", "1/4", "--", "sh", "-c", SHOW, env=env)
    assert ran.returncode == 0, ran.stderr
    assert "enforced (HAMi-core)" in ran.stderr and "cooperative here" not in ran.stderr, ran.stderr
    lines = ran.stdout.split()
    assert lines[0] == f"LD_PRELOAD={library}" and int(lines[1]) >= 1, ran.stdout  # loaded in the command


def test_a_library_the_user_cannot_preload_is_said_by_run_and_status(system_users: Users, broker: BrokerProcess) -> None:
    private = Path(tempfile.mkdtemp(prefix="vgpu-root-only-"))  # 0700, root's: the broker reads it, alice cannot
    try:
        library = private / "libvgpu.so"
        shutil.copyfile(a_shared_library(), library)
        restart_with_library(broker, str(library))
        alice = system_users.alice
        env = alice.env(JUPYTER_VGPU_BROKER=str(broker.socket))
        stop = Path(tempfile.mkdtemp(prefix="vgpu-stop-")) / "stop"
        stop.parent.chmod(0o777)
        held = alice.popen(
            JUPYTER_VGPU, "run", "-p", "1/4", "--", "sh", "-c", f'{SHOW}; while [ ! -e {stop} ]; do sleep 0.05; done', env=env
        )
        try:
            assert held.stdout is not None and held.stdout.readline().strip() == "LD_PRELOAD="

            def tier() -> str:
                rows = json.loads(alice.run(JUPYTER_VGPU, "status", "--json", env=env).stdout)["slices"]
                return str(rows[0]["tier"]) if rows else ""

            expected = (
                f"cooperative here: HAMi-core's library {library} cannot be read (Permission denied) here "
                "(the slice was placed as enforced (HAMi-core))"
            )
            wait_until(lambda: tier() == expected, what="status saying the command is cooperative")
            stop.touch()
            _, err = held.communicate(timeout=60)
            assert held.returncode == 0, err
            assert f"1/4 GPU), {expected}" in err and "Traceback" not in err, err
        finally:
            if held.poll() is None:
                held.kill()
                held.wait()
            shutil.rmtree(stop.parent, ignore_errors=True)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_broker_whose_library_cannot_be_preloaded_does_not_start(broker: BrokerProcess) -> None:
    """The client refuses such a library; the broker does too, in one sentence, rather than serve
    every user cooperative slices in silence while the admin believes they are enforced."""
    broker.kill(signal.SIGTERM)
    env = {**broker.env, "JUPYTER_VGPU_HAMI_CORE": "/bin/ls"}
    result = subprocess.run(
        [JUPYTER_VGPU, "broker", "--socket", str(broker.socket), "--ledger", str(broker.ledger), "--policy", str(broker.policy)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, (result.returncode, result.stderr)
    said = result.stderr.strip()
    assert said.startswith(
        "jupyter vgpu: The broker does not start with a tier it cannot apply: "
        "JUPYTER_VGPU_HAMI_CORE / c.VGPU.hami_core_library /bin/ls "
    ) and "\n" not in said and "Traceback" not in said, said
    with socket.socket(socket.AF_UNIX) as probe, pytest.raises(OSError):
        probe.connect(str(broker.socket))  # nothing serves there
