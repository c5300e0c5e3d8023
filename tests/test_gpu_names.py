"""What `run`, refusals and the burst notices call a GPU: its index, as the GPUs panel does, once per
sentence (issue 49: a command pinned by UUID read "on GPU 0 (2.0 GiB on GPU GPU-ec345349-...)")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.server.monitor import Sample
from jupyter_vgpu.server.reclaim.wants import wants_of
from jupyter_vgpu.slices import Holder, SliceRequest

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


def vgpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JUPYTER_VGPU, *args], capture_output=True, text=True, timeout=60)


def first_uuid() -> str:
    return str(json.loads(vgpu("status", "--json").stdout)["gpus"][0]["uuid"])


def test_a_command_pinned_by_uuid_is_told_its_gpu_by_index_once(vgpu_env: dict[str, str]) -> None:
    uuid = first_uuid()
    done = vgpu("run", "--gpu", uuid, "-m", "2GiB", "--limit", "3GiB", "--", "true")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("jupyter vgpu: slice ") and "GPU-" not in done.stderr, done.stderr
    assert ": 2.0 GiB on GPU 0 (2.0 GiB, up to 3.0 GiB) [SIMULATED GPUs" in done.stderr, done.stderr


def test_waiting_and_refused_lines_of_a_pinned_command_name_its_gpu_by_index_once(vgpu_env: dict[str, str]) -> None:
    uuid = first_uuid()
    holder = subprocess.Popen([JUPYTER_VGPU, "run", "-q", "-m", "15GiB", "--", "sleep", "60"])
    try:
        deadline = time.monotonic() + 60
        while not json.loads(vgpu("status", "--json").stdout)["slices"]:
            assert time.monotonic() < deadline, "the holder never got its slice"
            time.sleep(0.1)
        refused = vgpu("run", "--gpu", uuid, "-m", "2GiB", "--wait", "0.5", "--", "true")
        assert refused.returncode == 75, refused.stderr
        waiting, said = refused.stderr.splitlines()[:2]
        assert waiting == "jupyter vgpu: no room now: waiting in line (#1) up to 0.5 s for 2.0 GiB on GPU 0; Ctrl+C gives up."
        assert said == (
            "jupyter vgpu: Waited 0.5 s in line. No room for 2.0 GiB on GPU 0 now: at most 1.0 GiB (about 1/16 GPU) is free there."
        )
        assert "GPU-" not in refused.stderr
        never = vgpu("run", "--gpu", uuid, "-m", "20GiB", "--", "true")
        assert never.stderr == "jupyter vgpu: 20.0 GiB on GPU 0 is more than its GPU (16.0 GiB). Waiting cannot help: ask for less.\n"
    finally:
        holder.kill()
        holder.wait(10)


def test_a_burst_notice_names_a_pinned_waiters_gpu_by_index(tmp_path: Path) -> None:
    """The words the server's notice gives a bursting kernel for who waits (`... for 1 waiting in
    line (first: ..., 2.0 GiB on GPU 0)`), from the line as the ledger keeps it."""
    inventory = Inventory("2x16GiB")
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", inventory)
    second = inventory.snapshot().gpus[1]
    ledger.enqueue(SliceRequest.parse(memory="2GiB", gpu=second.uuid), Holder.command("python train.py"))
    (waiter,) = ledger.waiting()
    sample = Sample(taken_at=time.time(), snapshot=inventory.snapshot(), occupancy=None, slices=(), waiting=(waiter,))  # type: ignore[arg-type]
    (want,) = wants_of(sample, [], 600, waiter.uid)
    assert want.words == "1 waiting in line (first: `python train.py`, 2.0 GiB on GPU 1)"
    assert waiter.request.gpu == second.uuid  # the pin itself stays the GPU's UUID
