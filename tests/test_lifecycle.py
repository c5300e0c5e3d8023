"""A Jupyter server with jupyter-vgpu always stops, and a broken setting degrades instead of vanishing.

Each test runs a real `jupyter server` subprocess on simulated GPUs and stops it with SIGTERM,
as a user's Ctrl-C or a service manager would.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import KERNEL_NAME, JupyterProcess, isolated_env, start_jupyter, wait_for, write_sliced_kernelspec

pytestmark = pytest.mark.slow

FOUR_HUNDRED_DIGITS = "1" * 400


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """Jupyter dirs, a "Python 3 (1/4 GPU)" kernelspec and a ledger under the test's folder."""
    write_sliced_kernelspec(tmp_path / "data")
    return tmp_path


def hold_gpu(env: dict[str, str], share: str = "1") -> subprocess.Popen[bytes]:
    """`jupyter vgpu run -p SHARE -- sleep` holding the only GPU, once its slice is in the ledger."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", share, "--", "sleep", "120"],
        env=env,
        stderr=subprocess.PIPE,
    )
    assert holder.stderr is not None
    line = holder.stderr.readline().decode()
    assert "slice" in line, line
    return holder


def start_kernel(server: JupyterProcess) -> tuple[int, Any]:
    return server.api("POST", "api/kernels", {"name": KERNEL_NAME}, timeout=60)


@pytest.fixture
def stopped() -> Iterator[list[JupyterProcess]]:
    """Servers a test started; any still running at the end is killed, not left behind."""
    servers: list[JupyterProcess] = []
    yield servers
    for server in servers:
        server.stop(signal.SIGKILL, timeout=5)


def test_a_server_that_refused_a_kernel_start_stops_on_sigterm(home: Path, stopped: list[JupyterProcess]) -> None:
    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    holder = hold_gpu(env, "3/4")
    try:
        server = start_jupyter(home, env=env)
        stopped.append(server)
        status, running = start_kernel(server)
        assert status == 201, running
        status, reply = start_kernel(server)
        assert status == 503, reply
        assert reply["message"].startswith("No room for 1/4 GPU (4.0 GiB) now: every GPU is full.")
        assert "Traceback" not in json.dumps(reply)
        took = server.stop(signal.SIGTERM, timeout=10)
        assert took is not None, f"the server did not stop within 10 s of SIGTERM:\n{server.log_tail()}"
        assert "Kernel does not exist" not in server.log_text()
        assert f"Kernel shutdown: {running['id']}" in server.log_text(), "the running kernel was not shut down"
    finally:
        holder.terminate()
        holder.wait()


def test_a_server_stops_while_a_kernel_waits_in_line_and_the_line_is_left(
    home: Path, stopped: list[JupyterProcess]
) -> None:
    write_sliced_kernelspec(home / "data", {"gpu_fraction": 0.25, "wait_timeout": 300})
    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    holder = hold_gpu(env)
    try:
        server = start_jupyter(home, env=env)
        stopped.append(server)
        answers: list[tuple[int, Any]] = []
        waiting = threading.Thread(target=lambda: answers.append(start_kernel(server)), daemon=True)
        waiting.start()
        ledger = Path(env["JUPYTER_VGPU_LEDGER"])
        deadline = time.monotonic() + 30
        while _queue_length(ledger) == 0:
            assert time.monotonic() < deadline, f"the kernel never took its place in line:\n{server.log_tail()}"
            time.sleep(0.2)
        took = server.stop(signal.SIGTERM, timeout=10)
        assert took is not None, f"the server did not stop within 10 s of SIGTERM:\n{server.log_tail()}"
        assert _queue_length(ledger) == 0, "the waiting kernel's place in line was left behind"
    finally:
        holder.terminate()
        holder.wait()


def _queue_length(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as db:
        try:
            return int(db.execute("SELECT count(*) FROM queue").fetchone()[0])
        except sqlite3.OperationalError:  # not created yet
            return 0


def _corrupt_schema(home: Path) -> dict[str, str]:
    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "status"], env=env, check=True, capture_output=True)
    with sqlite3.connect(env["JUPYTER_VGPU_LEDGER"]) as db:
        db.execute("UPDATE meta SET value = 'two' WHERE key = 'schema_version'")
    return env


def _ledger_is_a_folder(home: Path) -> dict[str, str]:
    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    Path(env["JUPYTER_VGPU_LEDGER"]).mkdir(parents=True)
    return env


BROKEN = {
    "context allowance of 400 digits": (
        lambda home: isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_CONTEXT_ALLOWANCE=FOUR_HUNDRED_DIGITS),
        "JUPYTER_VGPU_CONTEXT_ALLOWANCE",
        True,
    ),
    "simulated memory of 400 digits": (
        lambda home: isolated_env(home, JUPYTER_VGPU_SIMULATE=f"2x{FOUR_HUNDRED_DIGITS}GiB"),
        "JUPYTER_VGPU_SIMULATE",
        True,
    ),
    "simulation that is not a spec": (
        lambda home: isolated_env(home, JUPYTER_VGPU_SIMULATE="lots of GPUs"),
        "JUPYTER_VGPU_SIMULATE='lots of GPUs'",
        True,
    ),
    "ledger schema_version 'two'": (_corrupt_schema, "is corrupt (its schema_version 'two'", True),
    "ledger path that is a folder": (_ledger_is_a_folder, "ledger", True),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_setting_answers_json_refuses_kernels_and_still_stops(
    case: str, home: Path, stopped: list[JupyterProcess]
) -> None:
    make_env, words, simulated = BROKEN[case]
    server = start_jupyter(home, env=make_env(home))
    stopped.append(server)
    for route in ("api/vgpu/devices", "api/vgpu/slices"):
        status, reply = server.api("GET", route)
        assert status == 200, (route, reply)
        assert reply["available"] is False
        assert words in reply["message"], reply["message"]
        assert reply["simulated"] is simulated
        assert len(reply["message"]) < 400, "a 400-character value is shown whole"
    status, reply = start_kernel(server)
    assert status in (400, 503), reply
    assert words in reply["message"], reply
    assert "Unhandled error" not in json.dumps(reply)
    took = server.stop(signal.SIGTERM, timeout=10)
    assert took is not None, f"the server did not stop within 10 s of SIGTERM:\n{server.log_tail()}"


def test_a_bad_server_option_leaves_the_server_able_to_stop(home: Path, stopped: list[JupyterProcess]) -> None:
    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    server = start_jupyter(home, env=env, args=["--VGPUServer.monitor_interval=0.01"])
    stopped.append(server)
    assert "c.VGPUServer.monitor_interval 0.01 is not allowed; use 0.1 to 3600 seconds" in server.log_text()
    assert "c.VGPUServer.monitor_interval keeps its default (2.0); the other options apply" in server.log_text()
    assert "error linking extension" not in server.log_text()
    status, reply = server.api("GET", "api/vgpu/devices")
    assert status == 200 and reply["available"] is True, reply
    assert reply["interval"] == 2.0, "the option that cannot work was not replaced by its default"
    took = server.stop(signal.SIGTERM, timeout=10)
    assert took is not None, f"the server did not stop within 10 s of SIGTERM:\n{server.log_tail()}"


def _kernel_slice(server: JupyterProcess, kernel_id: str) -> dict[str, Any] | None:
    status, reply = server.api("GET", f"api/vgpu/kernels/{kernel_id}")
    return reply.get("slice") if status == 200 else None


def _attached(server: JupyterProcess, kernel_id: str) -> dict[str, Any] | None:
    """The kernel's slice once the kernel holds it (the server holds it while it launches the kernel)."""
    found = _kernel_slice(server, kernel_id)
    return found if found is not None and found["pid"] not in (None, server.process.pid) else None


def test_a_kernel_killed_with_sigkill_keeps_its_slice_while_the_server_restarts_it(
    home: Path, stopped: list[JupyterProcess]
) -> None:
    import os

    write_sliced_kernelspec(home / "data", {"gpu_fraction": 1})
    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    server = start_jupyter(home, env=env)
    stopped.append(server)
    status, kernel = start_kernel(server)
    assert status == 201, kernel
    before = wait_for(lambda: _attached(server, kernel["id"]), "the kernel's slice, held by the kernel")
    os.kill(before["pid"], signal.SIGKILL)
    # Someone else asks for the whole GPU the moment the kernel is gone, again and again.
    taken = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        grab = subprocess.run(
            [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-q", "-p", "1", "--", "true"], env=env, capture_output=True
        )
        taken.append(grab.returncode == 0)
        after = _kernel_slice(server, kernel["id"])
        if after is not None and after["pid"] not in (None, before["pid"]):
            break
    assert not any(taken), "another process got the GPU while the server restarted the killed kernel"
    assert after is not None and after["id"] == before["id"], (before, after)


def test_a_kernel_the_server_gives_up_on_frees_its_slice(home: Path, stopped: list[JupyterProcess]) -> None:
    import os

    env = isolated_env(home, JUPYTER_VGPU_SIMULATE="1x16GiB")
    server = start_jupyter(home, env=env, args=["--KernelRestarter.restart_limit=0", "--VGPUServer.monitor_interval=0.2"])
    stopped.append(server)
    status, kernel = start_kernel(server)
    assert status == 201, kernel
    held = wait_for(lambda: _attached(server, kernel["id"]), "the kernel's slice, held by the kernel")
    os.kill(held["pid"], signal.SIGKILL)
    wait_for(lambda: server.api("GET", "api/vgpu/slices")[1]["slices"] == [], "the slice of the given-up kernel to be freed")
    assert f"freed slice {held['id']}" in server.log_text()
