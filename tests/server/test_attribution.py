"""Mapping GPU processes to slices by process tree, remembered across ticks (real processes)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from jupyter_vgpu.gpus import GPU, GPUProcess, Snapshot
from jupyter_vgpu.slices.holders import ProcessOwners

GiB = 1024**3


def snapshot(*processes: GPUProcess) -> Snapshot:
    gpu = GPU(0, "GPU-0", "test GPU", 16 * GiB, sum(p.used or 0 for p in processes), 0, False, tuple(processes))
    return Snapshot(gpus=(gpu,), simulated=True, available=True)


@pytest.fixture
def shell_with_child() -> Iterator[tuple[int, int]]:
    """A shell (the holder) running a child process (say, `!python train.py`)."""
    shell = subprocess.Popen(["sh", "-c", "sleep 60; true"])
    deadline = time.monotonic() + 10
    while not psutil.Process(shell.pid).children():
        assert time.monotonic() < deadline, "the shell did not start its child"
        time.sleep(0.01)
    child = psutil.Process(shell.pid).children()[0].pid
    yield shell.pid, child
    shell.kill()
    shell.wait()
    try:
        psutil.Process(child).kill()
    except psutil.NoSuchProcess:
        pass


def test_a_descendant_counts_against_the_holder_and_strangers_are_foreign(shell_with_child: tuple[int, int]) -> None:
    holder, child = shell_with_child
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        result = ProcessOwners().attribute(
            snapshot(GPUProcess(child, 2 * GiB, 30), GPUProcess(stranger.pid, GiB, 10)), {"s1": holder}
        )
    finally:
        stranger.kill()
        stranger.wait()
    assert result.used == {"s1": {"GPU-0": 2 * GiB}}
    assert result.utilization == {"s1": {"GPU-0": 30}}
    assert result.foreign == {"GPU-0": GiB} and result.foreign_pids == {"GPU-0": 1}


def test_a_new_slice_claims_a_process_that_was_foreign_before(shell_with_child: tuple[int, int]) -> None:
    holder, child = shell_with_child
    owners = ProcessOwners()
    seen = snapshot(GPUProcess(child, GiB))
    assert owners.attribute(seen, {}).foreign == {"GPU-0": GiB}
    assert owners.attribute(seen, {"s1": holder}).used == {"s1": {"GPU-0": GiB}}


def test_usage_the_driver_cannot_size_counts_as_zero_not_unknown(shell_with_child: tuple[int, int]) -> None:
    holder, child = shell_with_child
    result = ProcessOwners().attribute(snapshot(GPUProcess(child, None)), {"s1": holder})
    assert result.used == {"s1": {"GPU-0": 0}}
