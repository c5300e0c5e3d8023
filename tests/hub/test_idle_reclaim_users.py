"""Idle reclaim between two real users on one node broker (issue 30): bob cannot get alice's idle
kernel shut down with a place in line that her slice's room would not let in, and when her
slice's room would let his request in, the notice names his request without his command line.

alice runs a real jupyter server as herself, backed by the root broker, with a short idle
reclaim; bob runs `jupyter vgpu run` commands as himself. Before the fix the reclaimer counted
any request in line as demand: alice's kernel on GPU 0 was shut down for a request pinned to
GPU 1, which bob's own command filled."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, Users, wait_until, world_dir

pytestmark = pytest.mark.slow

AFTER, NOTICE = 1.0, 2.0


def as_user_python(folder: Path, uid: int, gid: int) -> str:
    """An interpreter that runs as the user (the server is started through it)."""
    wrapper = folder / "python-as-user"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid={uid} --regid={gid} --init-groups -- {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def alices_server(alice: Any, broker: BrokerProcess, args: list[str]) -> tuple[Path, Any]:
    """A real jupyter server run as alice, backed by the broker, with a 1/4 GPU kernelspec."""
    from jupyter_process import isolated_env, start_jupyter, write_sliced_kernelspec

    home = world_dir("vgpu-alice-server-")
    for name in ("root", "config", "data", "runtime", "ipython", "vgpu"):
        (home / name).mkdir()
    write_sliced_kernelspec(home / "data")
    python = as_user_python(home, alice.uid, alice.gid)
    subprocess.run(["chown", "-R", f"{alice.uid}:{alice.gid}", str(home)], check=True)
    env = isolated_env(home, JUPYTER_VGPU_BROKER=str(broker.socket), HOME=str(home), USER=alice.name)
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return home, start_jupyter(home, python=python, env=env, args=["--VGPUServer.monitor_interval=0.2", *args])


def slices(server: Any) -> dict[str, Any]:
    status, body = server.api("GET", "api/vgpu/slices")
    assert status == 200, body
    return dict(body)


def idle_on_the_brokers_page(broker: BrokerProcess, alice: Any, bob: Any, current: Any) -> None:
    """Issue 48, item 3: her server tells the broker her kernel's idle time, which the broker's page
    shows under her slice (the admin page's cluster view reads it from there) and which grows; bob
    cannot say anything of her slice."""
    from .test_broker_metrics import page_url, scrape

    url, sid = page_url(broker), current()["id"]

    def idle() -> float | None:
        samples = scrape(url).get("jupyter_vgpu_slice_kernel_idle_seconds", [])
        found = [s for s in samples if s.labels == {"slice": sid, "hostname": "hub-node"}]
        return found[0].value if found else None

    def agrees() -> bool:  # the broker's page and her server (``current``: its view now) say the same, within 5 s
        on_page, hers = idle(), (current() or {}).get("idle_seconds")
        return on_page is not None and hers is not None and abs(on_page - hers) < 5

    wait_until(agrees, timeout=30, what="her kernel's idle time on the broker's page, as her server says it")
    first = idle()
    assert first is not None
    wait_until(lambda: (idle() or 0) >= first + 1, timeout=30, what="her kernel's idle time growing on the broker's page")
    code = (
        "import sys; from jupyter_vgpu.ledger.broker_client import BrokerClient\n"
        "try:\n    BrokerClient(sys.argv[1]).call('idle', slice_id=sys.argv[2], since=None)\n"
        "except Exception as error:\n    print(type(error).__name__, error)"
    )
    env = bob.env(**({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}))
    said = bob.run(PYTHON, "-c", code, str(broker.socket), sid, env=env)
    assert said.stdout == f"NotPermitted Slice {sid} is not yours: only its owner's server says whether its kernel is idle.\n", said
    assert idle() is not None  # her idle time stays hers


def test_another_users_unhelpable_place_in_line_shuts_down_nothing(system_users: Users, broker: BrokerProcess) -> None:
    from jupyter_process import KERNEL_NAME

    alice, bob = system_users.alice, system_users.bob
    broker.kill(signal.SIGTERM)
    broker.env["JUPYTER_VGPU_SIMULATE"] = "2x16GiB@hub-node"
    broker.extra += ["--metrics-port", "0", "--metrics-interval", "0.2"]  # its page shows her kernel's idle time
    broker.start()
    home, server = alices_server(alice, broker, [f"--VGPUServer.idle_reclaim_after={AFTER}", f"--VGPUServer.idle_reclaim_notice={NOTICE}"])
    bob_env = bob.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    commands: list[subprocess.Popen[str]] = []
    try:
        status, kernel = server.api("POST", "api/kernels", {"name": KERNEL_NAME})
        assert status == 201, (kernel, server.log_tail())

        def alices() -> Any:
            return next((s for s in slices(server)["slices"] if s.get("kernel_id") == kernel["id"]), None)

        wait_until(alices, timeout=60, what="alice's kernel's slice")
        assert alices()["gpu_indices"] == [0]
        # bob fills GPU 1 with his own command, then waits for GPU 1
        commands.append(bob.popen(JUPYTER_VGPU, "run", "--gpu", "1", "-p", "1", "--", "sleep", "300", env=bob_env))
        wait_until(lambda: any(1 in s["gpu_indices"] for s in slices(server)["slices"]), timeout=30, what="bob's command on GPU 1")
        commands.append(bob.popen(JUPYTER_VGPU, "run", "--gpu", "1", "-p", "1/2", "--wait", "120", "--", "true", env=bob_env))
        wait_until(lambda: slices(server)["waiting"], timeout=30, what="bob's request in line")
        deadline = time.monotonic() + 3 * (AFTER + NOTICE)
        while time.monotonic() < deadline:
            mine = alices()
            assert mine is not None and mine["idle_notice"] is None, mine
            time.sleep(0.25)
        assert (mine["idle_seconds"] or 0) >= AFTER, mine  # idle, and judged so
        idle_on_the_brokers_page(broker, alice, bob, alices)
        assert not [e for e in slices(server)["watchdog"]["events"] if e["action"] == "idle"]
        assert commands[1].poll() is None  # still waiting: nothing was freed on GPU 1

        # Now a request her slice's room does let in: 9/10 of GPU 0 (12 GiB free, 14.4 asked).
        commands.append(bob.popen(JUPYTER_VGPU, "run", "--gpu", "0", "-p", "0.9", "--wait", "120", "--", "true", env=bob_env))

        def noticed() -> Any:
            mine = alices()
            return mine if mine and mine["idle_notice"] else None

        wait_until(noticed, timeout=30, what="the idle notice for bob's GPU 0 request")
        words = noticed()["idle_notice"]["for"]
        assert words == "2 waiting in line (#2: another user's command, 9/10 GPU on GPU 0)", words
        assert "true" not in words and bob.name not in words
        _, err = commands[2].communicate(timeout=60)
        assert commands[2].returncode == 0, err  # granted once her kernel was shut down
        (event,) = [e for e in slices(server)["watchdog"]["events"] if e["action"] == "idle"]
        assert event["kernel_id"] == kernel["id"] and event["ok"]
        assert commands[1].poll() is None
    finally:
        for command in commands:
            if command.poll() is None:
                command.kill()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_a_place_in_line_kept_off_the_free_gpu_by_its_policy_blocks_nobody_there(
    system_users: Users, broker: BrokerProcess
) -> None:
    """Found measuring issue 30's scene: the line's first-come-first-served rule asked whether an
    earlier place "fits now" without its policy's GPUs, so alice's request, allowed only GPU 1
    (full), held back bob's request that fits on GPU 0, and a reclaim for bob let nobody in."""
    alice, bob = system_users.alice, system_users.bob
    broker.kill(signal.SIGTERM)
    broker.env["JUPYTER_VGPU_SIMULATE"] = "2x16GiB"
    broker.write_policy({"default": {"max_slices": 3}, "users": {alice.name: {"gpus": ["1"]}}})
    broker.start()
    env = {who.name: who.env(JUPYTER_VGPU_BROKER=str(broker.socket)) for who in (alice, bob)}
    filler = bob.popen(JUPYTER_VGPU, "run", "--gpu", "1", "-p", "1", "--", "sleep", "300", env=env[bob.name])
    waiting = None
    try:
        wait_until(lambda: "GPU 1" in bob.run(JUPYTER_VGPU, "status", env=env[bob.name]).stdout and filler.poll() is None, timeout=30, what="GPU 1 filled")
        waiting = alice.popen(JUPYTER_VGPU, "run", "-p", "1/4", "--wait", "120", "--", "true", env=env[alice.name])
        wait_until(lambda: "waiting" in alice.run(JUPYTER_VGPU, "status", env=env[alice.name]).stdout.lower(), timeout=30, what="alice in line")
        granted = bob.run(JUPYTER_VGPU, "run", "--gpu", "0", "-p", "1/2", "--", "true", env=env[bob.name])
        assert granted.returncode == 0, granted.stderr  # before: "1 earlier request waits in line"
        assert waiting.poll() is None  # alice still waits for GPU 1, her only one
    finally:
        filler.kill()
        if waiting is not None:
            waiting.kill()


def test_the_server_log_names_the_hub_policys_idle_reclaim(system_users: Users, broker: BrokerProcess) -> None:
    """The user's server said "idle reclaim: off" when its own setting was 0 and the hub policy
    turned the reclaim on for the user (issue 30)."""
    broker.write_policy({"default": {"idle_reclaim_after": 3600}})
    home, server = alices_server(system_users.alice, broker, [])
    try:
        line = next(line for line in server.log_text().splitlines() if "jupyter-vgpu: monitoring every" in line)
        assert "idle reclaim: after 3600 s idle (the hub policy), 300 s notice, waiting;" in line, line
        assert "a burst someone needs: 1 min notice, then the kernel is restarted" in line, line  # no policy for it
        assert line.endswith("(this server's settings)."), line
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
