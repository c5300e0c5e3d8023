"""A damaged ledger reset under a live kernel: `jupyter vgpu gc --reset-ledger` makes a fresh book,
and the server that runs the kernel books its slice in it again (same id, GPU and size) before
anything else is placed there; a kernel whose slice cannot be booked again is told at its next
cell. Real parts: a jupyter server process, a sliced kernel, the command as users run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import JupyterProcess, isolated_env, start_jupyter, wait_for, write_sliced_kernelspec
from kernels import Kernel

from .views import JUPYTER_VGPU, file_view, run, start_kernel, wait_for_ids

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/<pid>/fd")

HALF = "python3-vgpu-1-2-gpu0"


@pytest.fixture
def gpus(tmp_path: Path) -> Path:
    """Two simulated 16 GiB GPUs, in a file the test rewrites (a process outside slices appears)."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"devices": [{"memory": "16GiB"}, {"memory": "16GiB"}], "processes": []}))
    return path


@pytest.fixture
def server(tmp_path: Path, gpus: Path) -> Iterator[JupyterProcess]:
    env = isolated_env(tmp_path, JUPYTER_VGPU_SIMULATE=str(gpus))
    write_sliced_kernelspec(tmp_path / "data", {"gpu_fraction": 0.5, "gpu": 0}, name=HALF, display_name="Python 3 (1/2 GPU)")
    running = start_jupyter(tmp_path, env=env, args=["--VGPUServer.monitor_interval=0.2", "--VGPUServer.reap_interval=1"])
    yield running
    running.stop(signal.SIGTERM, timeout=20) or running.stop(signal.SIGKILL)


def slices_after(server: JupyterProcess, after: float) -> list[dict[str, Any]]:
    """The slices in the server's API from its first sample taken after ``after``."""
    def sample() -> dict[str, Any] | None:
        status, reply = server.api("GET", "api/vgpu/slices")
        assert status == 200, reply
        return reply if reply["taken_at"] > after else None

    return list(wait_for(sample, "a sample of the server's monitor")["slices"])


def kernel_slice(server: JupyterProcess, kernel_id: str, after: float = 0.0) -> dict[str, Any] | None:
    """The kernel's slice in the server's API, from a sample taken after ``after``."""
    return next((s for s in slices_after(server, after) if s["kernel_id"] == kernel_id), None)


def damage_and_reset(ledger: Path, env: dict[str, str]) -> None:
    """What a damaged disk block does to the ledger's header, then the documented way back."""
    with open(ledger, "r+b") as handle:  # this test process holds no connection to it
        handle.write(b"\xde\xad" * 50)
    reset = subprocess.run([JUPYTER_VGPU, "gc", "--reset-ledger"], env=env, capture_output=True, text=True, timeout=90)
    assert reset.returncode == 0, reset.stderr
    assert "Moved the ledger to" in reset.stdout


def test_a_running_kernels_slice_is_booked_again_after_a_reset_and_nothing_is_placed_on_it(server: JupyterProcess) -> None:
    env = server.env
    ledger = Path(env["JUPYTER_VGPU_LEDGER"])
    status, kernel = start_kernel(server, HALF)
    assert status == 201, kernel
    before = wait_for(lambda: kernel_slice(server, kernel["id"]), "the kernel's slice in the API")
    # a command beside it, which no server watches: it books its own slice again
    command = subprocess.Popen([JUPYTER_VGPU, "run", "-p", "1/4", "--gpu", "1", "--", "sleep", "120"], env=env,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        (command_id,) = wait_for_ids(ledger, 2) - {before["id"]}
        damage_and_reset(ledger, env)
        reset = time.time()

        again = wait_for(lambda: kernel_slice(server, kernel["id"], reset), "the kernel's slice booked again", timeout=30)
        assert (again["id"], again["gpu_indices"], again["memory_reserved"]) == (
            before["id"], before["gpu_indices"], before["memory_reserved"],
        )  # fmt: skip
        # in the fresh file itself, not only in the server's view; the command's within the grace
        wait_for(lambda: file_view(ledger)[0] == {before["id"], command_id} or None, "both slices booked again", timeout=10)
    finally:
        command.terminate()
        _, said = command.communicate(timeout=30)
    assert f"jupyter vgpu: the ledger was reset; slice {command_id} (1/4 GPU on GPU 1) is booked again." in said, said
    assert f"booked slice {before['id']} of " in server.log_text() and "again: the ledger was reset" in server.log_text()

    # Two whole GPUs: refused while the servers book again, and once that is over, for GPU 0 is half booked.
    def refused_for_room() -> subprocess.CompletedProcess[str] | None:
        result = run(env, "-p", "1", "-n", "2", "--", "true")
        assert result.returncode == 75, f"granted two whole GPUs beside a running 1/2 GPU kernel: {result.stderr}"
        return None if "was reset" in result.stderr else result

    refused = wait_for(refused_for_room, "the reset's grace to end", timeout=60)
    assert "No room" in refused.stderr, refused.stderr
    _, booked = file_view(ledger)
    assert all(reserved <= total for reserved, total in booked.values()), booked


def test_a_kernel_whose_gpu_was_taken_meanwhile_is_told_at_its_next_cell(
    server: JupyterProcess, gpus: Path, tmp_path: Path
) -> None:
    env = server.env
    ledger = Path(env["JUPYTER_VGPU_LEDGER"])
    status, kernel = start_kernel(server, HALF)
    assert status == 201, kernel
    before = wait_for(lambda: kernel_slice(server, kernel["id"]), "the kernel's slice in the API")
    reports = ledger.parent / "reports"
    kernels_files = wait_for(lambda: sorted(reports.glob(f"{before['id']}.*")), "the kernel's report")
    for path in kernels_files:  # a kernel that has run a while: its report was written at its start
        os.utime(path, (time.time() - 600, time.time() - 600))
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        # While the ledger is damaged, a process outside any slice takes 12 GiB of GPU 0.
        with open(ledger, "r+b") as handle:
            handle.write(b"\xde\xad" * 50)
        gpus.write_text(json.dumps({
            "devices": [{"memory": "16GiB"}, {"memory": "16GiB"}],
            "processes": [{"gpu": 0, "pid": outsider.pid, "memory": "12GiB"}],
        }))  # fmt: skip
        reset = subprocess.run([JUPYTER_VGPU, "gc", "--reset-ledger"], env=env, capture_output=True, text=True, timeout=90)
        assert reset.returncode == 0, reset.stderr

        wait_for(lambda: f"slice {before['id']} of " in server.log_text() and "could not be booked again" in server.log_text(),
                 "the server log saying the slice could not be booked again", timeout=30)  # fmt: skip
        line = next(x for x in server.log_text().splitlines() if "could not be booked again" in x)
        assert f"GPU 0 no longer has room for slice {before['id']} (1/2 GPU on GPU 0)" in line, line
        assert "after the ledger was reset: " in line, line  # a reset, not a split (what the kernel is told)
        assert kernel_slice(server, kernel["id"]) is None
        assert file_view(ledger)[0] == set()

        driver = Kernel.attach(str(tmp_path / "runtime" / f"kernel-{kernel['id']}.json"))
        told = "jupyter-vgpu: the ledger was reset and this kernel's GPU slice could not be booked again: GPU 0 no longer"

        said: list[str] = []

        def next_cell() -> Any:  # the server leaves the notice at the tick after it logs: the next cell or the one after
            cell = driver.run("print('next cell')")
            assert "next cell" in cell.stdout
            said.append(cell.stderr)
            return cell if told in cell.stderr else None

        try:
            try:
                cell = wait_for(next_cell, "the kernel told at a cell", timeout=30)
            except AssertionError as error:  # what the cells said, the notice left and the server's words
                notices = reports / f"{before['id']}.notices.json"
                lines = [x for x in server.log_text().splitlines() if before["id"] in x or "split" in x]
                left = notices.read_text() if notices.exists() else "(no notices file)"
                raise AssertionError(f"{error}; cells said {sorted(set(said))}; notices: {left}; log: {lines}") from None
            again = driver.run("print('and the next')")
        finally:
            driver.client.stop_channels()
        assert "restart the kernel to get a slice" in cell.stderr, cell.stderr
        assert told not in again.stderr  # said once
        # The slice's files are the running kernel's, though the book lost the slice: the sweep of
        # ended slices' files (which removed the notice before the kernel read it in CI of 787b6f0,
        # its report being old) leaves them through reaping ticks, and the kernel's end removes them.
        ended = subprocess.Popen([JUPYTER_VGPU, "run", "-p", "1/4", "--gpu", "1", "--wait", "60", "--", "sleep", "300"],
                                 env=env, start_new_session=True)  # fmt: skip
        try:
            (ended_id,) = wait_for_ids(ledger, 1, timeout=90)
        finally:
            os.killpg(ended.pid, signal.SIGKILL)  # its holder gone: the server's next tick reaps and sweeps
            ended.wait()
        wait_for(lambda: f"freed slice {ended_id} of " in server.log_text(), "the server reaping the ended command's slice")
        assert f"removed the reports of slice {before['id']}" not in server.log_text()
        assert (reports / f"{before['id']}.notices.json").exists()
        status, _ = server.api("DELETE", f"api/kernels/{kernel['id']}", timeout=60)
        assert status == 204
        assert not sorted(reports.glob(f"{before['id']}.*"))
    finally:
        outsider.kill()
        outsider.wait()


def test_a_kernels_slice_released_on_purpose_is_not_booked_again(server: JupyterProcess) -> None:
    """`jupyter vgpu release` frees a running kernel's slice (the kernel keeps running): the book is
    the same one, so the server leaves it freed; only a new book (a reset) is booked again."""
    env = server.env
    status, kernel = start_kernel(server, HALF)
    assert status == 201, kernel
    held = wait_for(lambda: kernel_slice(server, kernel["id"]), "the kernel's slice in the API")
    released = subprocess.run([JUPYTER_VGPU, "release", held["id"]], env=env, capture_output=True, text=True, timeout=60)
    assert released.returncode == 0, released.stderr
    for _ in range(10):  # ten samples of the server's monitor (0.2 s apart), each taken after the release
        after = time.time()
        assert kernel_slice(server, kernel["id"], after) is None
    assert file_view(Path(env["JUPYTER_VGPU_LEDGER"]))[0] == set()
    assert f"booked slice {held['id']}" not in server.log_text()
