"""The topology users have: a long-lived Jupyter server with kernels (so several connections to
the ledger) while `jupyter vgpu` commands start, run and exit around it. After every step the
server's API, a command and the file see the same slices, and nothing is booked twice."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_process import JupyterProcess, isolated_env, start_jupyter, write_sliced_kernelspec

from .views import JUPYTER_VGPU, assert_one_book, run, start_kernel, stop_kernel, wait_for_ids

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/<pid>/fd")

QUARTER, HALF = "python3-vgpu-1-4", "python3-vgpu-1-2"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterProcess]:
    env = isolated_env(tmp_path, JUPYTER_VGPU_SIMULATE="2x16GiB")
    write_sliced_kernelspec(tmp_path / "data", {"gpu_fraction": 0.25}, name=QUARTER, display_name="Python 3 (1/4 GPU)")
    write_sliced_kernelspec(tmp_path / "data", {"gpu_fraction": 0.5}, name=HALF, display_name="Python 3 (1/2 GPU)")
    running = start_jupyter(tmp_path, env=env, args=["--VGPUServer.monitor_interval=0.2", "--VGPUServer.reap_interval=1"])
    yield running
    running.stop(signal.SIGTERM, timeout=20) or running.stop(signal.SIGKILL)


def test_a_server_with_kernels_and_commands_coming_and_going_keeps_one_book(server: JupyterProcess) -> None:
    env = server.env
    ledger = Path(env["JUPYTER_VGPU_LEDGER"])
    status, quarter = start_kernel(server, QUARTER)
    assert status == 201, quarter
    ids = assert_one_book(server, env, ledger, "a 1/4 GPU kernel started")
    assert len(ids) == 1
    for step in range(2):  # commands that open the ledger and exit: each used to split the book
        assert assert_one_book(server, env, ledger, f"status ran and exited ({step})") == ids
    command = subprocess.Popen([JUPYTER_VGPU, "run", "-p", "0.5", "--", "sleep", "120"], env=env, stderr=subprocess.PIPE)
    try:
        wait_for_ids(ledger, 2)
        ids = assert_one_book(server, env, ledger, "a command holds 1/2 GPU beside the kernel")
        status, half = start_kernel(server, HALF)
        assert status == 201, half
        ids = assert_one_book(server, env, ledger, "a 1/2 GPU kernel started while the command runs")
        assert len(ids) == 3
        for gpu in ("0", "1"):  # each GPU has 1/2 booked or more: 3/4 more must be refused
            refused = run(env, "-p", "0.75", "--gpu", gpu, "--", "true")
            assert refused.returncode == 75, refused.stderr
            assert "No room" in refused.stderr
            assert_one_book(server, env, ledger, f"a 3/4 GPU command was refused on GPU {gpu}")
    finally:
        command.send_signal(signal.SIGTERM)
        command.wait(timeout=30)
    ids = assert_one_book(server, env, ledger, "the command ended")
    assert len(ids) == 2
    stop_kernel(server, quarter["id"])
    assert len(assert_one_book(server, env, ledger, "the 1/4 GPU kernel was shut down")) == 1
    stop_kernel(server, half["id"])
    assert assert_one_book(server, env, ledger, "every kernel was shut down") == set()


@pytest.mark.slow  # half a minute or more on a loaded machine
def test_churn_of_kernels_and_commands_never_overbooks_and_every_view_agrees(server: JupyterProcess) -> None:
    """Kernels start and stop through REST, commands run and exit, for a bounded time (40 s of
    operations, at most 60); after every operation every view agrees and no GPU is over-booked."""
    env = server.env
    ledger = Path(env["JUPYTER_VGPU_LEDGER"])
    rng = random.Random(18)
    kernels: list[str] = []
    background: list[subprocess.Popen[bytes]] = []
    counts = {"kernel started": 0, "kernel refused": 0, "kernel stopped": 0, "command granted": 0, "command refused": 0}
    deadline = time.monotonic() + 40
    operations = 0

    def filled() -> bool:  # a GPU was full at least once: the churn met the limits it is about
        return bool(counts["kernel refused"] + counts["command refused"])

    try:
        # 40 s of operations, or on a loaded machine (4 in 40 s beside the browser tests) on until
        # a GPU was full once: at most 60 operations either way
        while operations < 60 and (time.monotonic() < deadline or not filled()):
            operations += 1
            choice = rng.choice(["start", "start", "stop", "run", "run", "hold", "end"])
            if choice == "start":
                status, reply = start_kernel(server, rng.choice([QUARTER, HALF]))
                assert status in (201, 503), reply
                if status == 201:
                    kernels.append(reply["id"])
                    counts["kernel started"] += 1
                else:
                    counts["kernel refused"] += 1
            elif choice == "stop" and kernels:
                stop_kernel(server, kernels.pop(rng.randrange(len(kernels))))
                counts["kernel stopped"] += 1
            elif choice == "run":
                result = run(env, "-p", rng.choice(["0.25", "0.5", "0.75"]), "--", "true")
                assert result.returncode in (0, 75), result.stderr
                counts["command granted" if result.returncode == 0 else "command refused"] += 1
            elif choice == "hold":
                before = len(assert_one_book(server, env, ledger, "before a held command"))
                holder = subprocess.Popen(
                    [JUPYTER_VGPU, "run", "-p", "0.25", "--", "sleep", "120"], env=env, stderr=subprocess.PIPE
                )
                assert holder.stderr is not None
                line = holder.stderr.readline().decode()
                if "slice" in line and holder.poll() is None:
                    wait_for_ids(ledger, before + 1)
                    background.append(holder)
                    counts["command granted"] += 1
                else:
                    holder.wait(timeout=30)
                    counts["command refused"] += 1
            elif choice == "end" and background:
                holder = background.pop(rng.randrange(len(background)))
                holder.send_signal(signal.SIGTERM)
                holder.wait(timeout=30)
            assert_one_book(server, env, ledger, f"operation {operations} ({choice})")
    finally:
        for holder in background:
            holder.kill()
            holder.wait()
    print(f"churn: {operations} operations, {counts}")
    assert counts["kernel started"] and counts["command granted"]
    assert filled(), "the churn never filled a GPU"
