"""Inside a pod that HAMi or KAI-Scheduler placed on a shared GPU, the pod's share is the GPU
(issue 22): every slice is a fraction of the share, every view says so, and a value the pod's
environment gets wrong is one sentence naming the variable, with nothing reserved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_vgpu.errors import InvalidConfig
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.gpus.podshare import pod_share
from jupyter_vgpu.units import GiB, MiB


def vgpu(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def pod(tmp_path: Path) -> dict[str, str]:
    """A pod's environment on two simulated 16 GiB cards, its own ledger."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "CUDA_DEVICE_", "GPU_PORTION"))}
    env.update(JUPYTER_VGPU_SIMULATE="2x16GiB", JUPYTER_VGPU_LEDGER=str(tmp_path / "ledger.sqlite"))
    return env


def test_hamis_per_gpu_limit_is_the_capacity_fractions_are_of(pod: dict[str, str]) -> None:
    pod["CUDA_DEVICE_MEMORY_LIMIT_0"] = "4096m"
    pod["CUDA_DEVICE_SM_LIMIT"] = "30"
    data = json.loads(vgpu(pod, "status", "--json").stdout)
    first, second = data["gpus"]
    assert (first["memory_total"], first["card_memory"], first["sm_limit"]) == (4 * GiB, 16 * GiB, 30)
    assert first["pod_share"] == "this pod's share: 4.0 GiB of 16.0 GiB (HAMi), 30% of the SMs"
    assert second["memory_total"] == 16 * GiB and second["pod_share"] is None  # no limit named for GPU 1
    show = "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'], os.environ['JUPYTER_VGPU_MEMORY_FRACTION'])"
    held = vgpu(pod, "run", "-p", "1/2", "--gpu", "0", "--", sys.executable, "-c", show)
    assert held.returncode == 0, held.stderr
    reserved, fraction = held.stdout.split()
    assert int(reserved) == 2 * GiB  # half of the pod's 4 GiB, not of the card
    assert 0.3 < float(fraction) <= 0.5  # of what CUDA reports in a HAMi pod: the share (HAMi-core)
    refused = vgpu(pod, "run", "-m", "5GiB", "--gpu", "0", "--", "true")
    assert refused.returncode == 69 and "4.0 GiB" in refused.stderr, refused.stderr
    assert "this pod's share: 4.0 GiB of 16.0 GiB (HAMi)" in vgpu(pod, "status").stdout


def test_a_global_hami_limit_applies_to_every_gpu(pod: dict[str, str]) -> None:
    snapshot = Inventory("2x16GiB", env={"CUDA_DEVICE_MEMORY_LIMIT": "3g"}).snapshot()
    assert [g.memory_total for g in snapshot.gpus] == [3 * GiB, 3 * GiB]
    mixed = Inventory("2x16GiB", env={"CUDA_DEVICE_MEMORY_LIMIT": "3g", "CUDA_DEVICE_MEMORY_LIMIT_1": "1024m"}).snapshot()
    assert [g.memory_total for g in mixed.gpus] == [3 * GiB, 1 * GiB]


def test_kais_portion_is_a_fraction_of_each_card(pod: dict[str, str]) -> None:
    (gpu,) = Inventory("16GiB", env={"GPU_PORTION": "0.5"}).snapshot().gpus
    assert gpu.memory_total == 8 * GiB and gpu.pod_share == "this pod's share: 8.0 GiB of 16.0 GiB (KAI-Scheduler)"
    pod["GPU_PORTION"] = "0.5"
    show = "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'], os.environ['JUPYTER_VGPU_MEMORY_FRACTION'])"
    held = vgpu(pod, "run", "-p", "1/2", "--gpu", "0", "--", sys.executable, "-c", show)
    reserved, fraction = held.stdout.split()
    assert int(reserved) == 4 * GiB
    # KAI enforces nothing: CUDA sees the whole 16 GiB card, so a framework's fraction is of the card
    assert 0.2 < float(fraction) <= 0.25


def test_a_share_larger_than_the_card_is_the_card() -> None:
    (gpu,) = Inventory("16GiB", env={"CUDA_DEVICE_MEMORY_LIMIT_0": "40g"}).snapshot().gpus
    assert gpu.memory_total == 16 * GiB


def test_hami_sizes_are_read_as_hami_core_reads_them() -> None:
    share = pod_share({"CUDA_DEVICE_MEMORY_LIMIT_0": "4096m", "CUDA_DEVICE_MEMORY_LIMIT_1": "2g", "CUDA_DEVICE_MEMORY_LIMIT_2": "1048576"})
    assert share is not None and dict(share.memory) == {0: 4096 * MiB, 1: 2 * GiB, 2: 1 * MiB}
    assert pod_share({"PATH": "/bin"}) is None


@pytest.mark.parametrize(
    ("name", "value", "sentence"),
    [
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "4GiB", "CUDA_DEVICE_MEMORY_LIMIT_0='4GiB' is not a GPU memory limit; use whole bytes"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "1.5g", "CUDA_DEVICE_MEMORY_LIMIT_0='1.5g' is not a GPU memory limit"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "0", "CUDA_DEVICE_MEMORY_LIMIT='0' is not a GPU memory limit"),
        ("CUDA_DEVICE_MEMORY_LIMIT_X", "4096m", "CUDA_DEVICE_MEMORY_LIMIT_X is not a variable HAMi sets"),
        ("GPU_PORTION", "1.5", "GPU_PORTION='1.5' is not a portion of a GPU; use a number above 0 and at most 1"),
        ("GPU_PORTION", "half", "GPU_PORTION='half' is not a portion of a GPU"),
        ("CUDA_DEVICE_SM_LIMIT", "150", "CUDA_DEVICE_SM_LIMIT='150' is not a share of the SMs"),
    ],
)
def test_a_value_a_pod_gets_wrong_is_one_sentence_and_nothing_is_reserved(
    pod: dict[str, str], name: str, value: str, sentence: str
) -> None:
    with pytest.raises(InvalidConfig, match="^" + sentence.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Inventory("16GiB", env={name: value}).snapshot()
    pod[name] = value
    run = vgpu(pod, "run", "-p", "1/4", "--", "true")
    assert run.returncode == 1 and sentence in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert json.loads(vgpu({k: v for k, v in pod.items() if k != name}, "status", "--json").stdout)["slices"] == []


def test_vgpu_devices_in_a_pods_sliced_kernel_says_the_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel.harness import Workspace, start  # type: ignore[import-not-found]

    monkeypatch.setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "4096m")  # the reserving process is in the pod too
    workspace = Workspace(tmp_path)
    held = workspace.reserve(0.5)
    assert held.memory_per_gpu == 2 * GiB
    kernel = start({**workspace.slice_env(held), "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m"})
    try:
        outcome = kernel.run("%vgpu devices")
        [bundle] = outcome.displays
        assert "this pod's share: 4.0 GiB of 16.0 GiB (HAMi)" in bundle["text/plain"]
        assert "4.0 GiB total" in bundle["text/plain"]
    finally:
        kernel.stop()


def test_an_elastic_slice_in_a_pod_bursts_within_the_pods_share(pod: dict[str, str]) -> None:
    """Issue 42: inside a pod the pod's share is the GPU, so a limit is of the share (1/2 of a KAI
    pod's half card is a quarter card) and a limit above the share is one sentence, nothing booked."""
    pod["GPU_PORTION"] = "0.5"
    show = "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'], os.environ['JUPYTER_VGPU_BURST_LIMIT'], os.environ['JUPYTER_VGPU_CONTEXT_ALLOWANCE'])"
    held = vgpu(pod, "run", "-p", "1/4", "--limit", "1/2", "--gpu", "0", "--", sys.executable, "-c", show)
    assert held.returncode == 0, held.stderr
    reserved, burst, allowance = (int(v) for v in held.stdout.split())
    assert reserved == 2 * GiB and burst + allowance == 4 * GiB  # of the pod's 8 GiB, not of the card's 16
    refused = vgpu(pod, "run", "-m", "2GiB", "--limit", "10GiB", "--gpu", "0", "--", "true")
    assert refused.returncode != 0 and "10.0 GiB" in refused.stderr and "8.0 GiB" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert json.loads(vgpu(pod, "status", "--json").stdout)["slices"] == []  # nothing booked
