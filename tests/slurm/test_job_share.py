"""Inside a Slurm job, the job's share is the GPU budget (issue 32, part 1): its shards of its
GPU, or its whole GPUs; every slice is a fraction of it and every view says so. On the real test
cluster (tests/slurm/cluster.py), with simulated 16 GiB GPUs of 32 shards each."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_process import KERNEL_NAME, TOKEN, JupyterProcess, isolated_env, wait_for, write_sliced_kernelspec
from kernels import Kernel

from jupyter_vgpu.errors import InvalidConfig
from jupyter_vgpu.gpus import slurmshare
from jupyter_vgpu.units import GiB

from .cluster import SlurmCluster, spare_port

VGPU = [sys.executable, "-m", "jupyter_vgpu.cli"]
#: What a process holding a slice sees of it.
SHOW = (
    "import os; print(' '.join(os.environ.get(k, '-') for k in ('JUPYTER_VGPU_MEMORY_RESERVED', "
    "'JUPYTER_VGPU_MEMORY_FRACTION', 'CUDA_VISIBLE_DEVICES', 'JUPYTER_VGPU_LEDGER', 'SLURM_JOB_ID', 'SLURM_STEP_GPUS')))"
)


def in_job(slurm: SlurmCluster, gres: str, *command: str, node: str = "node1", **env: str) -> subprocess.CompletedProcess[str]:
    """``srun --gres=GRES -w NODE COMMAND`` (the job's output, whatever its exit status)."""
    return slurm.run("srun", f"--gres={gres}", "-w", node, "--quiet", *command, timeout=60, check=False, env=env)


def status(slurm: SlurmCluster, gres: str, **env: str) -> dict:  # type: ignore[type-arg]
    done = in_job(slurm, gres, *VGPU, "status", "--json", **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_half_slice_in_a_job_with_half_a_gpu_gets_a_quarter_of_the_card(slurm: SlurmCluster) -> None:
    done = in_job(slurm, "shard:16", *VGPU, "run", "-p", "1/2", "--", sys.executable, "-c", SHOW)
    assert done.returncode == 0, done.stderr
    reserved, fraction, visible, ledger, job, slurm_gpu = done.stdout.split()
    assert int(reserved) == 4 * GiB  # half of the job's 16/32 shards of 16 GiB, not half the card
    # CUDA sees the whole card (shards fence nothing): a framework's fraction is of the card
    assert 0.2 < float(fraction) <= 0.25
    assert visible.startswith("GPU-")  # the job's GPU, named by UUID as every slice's is
    user, folder, name = ledger.rsplit("/", 2)  # node-local, in the user's private folder, the job's own
    assert (user, name) == (f"{slurm.env['TMPDIR']}/jupyter-vgpu-{os.geteuid()}", "ledger.sqlite") and folder.endswith(f"-{job}")
    assert slurm_gpu in {"0", "1"}


def test_an_elastic_slice_in_a_job_bursts_within_the_jobs_shards(slurm: SlurmCluster) -> None:
    """Issue 42: a limit is of the job's share (its 16 of 32 shards: 8 GiB), never of the card: "1/4
    up to 1/2" books 2 GiB and may grow to 4 GiB; a limit above the share is one sentence."""
    show = "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'], int(os.environ['JUPYTER_VGPU_BURST_LIMIT']) + int(os.environ['JUPYTER_VGPU_CONTEXT_ALLOWANCE']))"
    done = in_job(slurm, "shard:16", *VGPU, "run", "-p", "1/4", "--limit", "1/2", "--", sys.executable, "-c", show)
    assert done.returncode == 0, done.stderr
    assert [int(v) for v in done.stdout.split()] == [2 * GiB, 4 * GiB]
    over = in_job(slurm, "shard:16", *VGPU, "run", "-m", "2GiB", "--limit", "12GiB", "--", "true")
    assert over.returncode != 0 and "12.0 GiB" in over.stderr and "8.0 GiB" in over.stderr, over.stderr
    assert "Traceback" not in over.stderr


def test_status_in_a_shard_job_lists_its_gpu_and_names_the_jobs_share(slurm: SlurmCluster) -> None:
    done = in_job(slurm, "shard:16", "bash", "-c", f"echo $SLURM_JOB_ID $SLURM_STEP_GPUS; {' '.join(VGPU)} status --json")
    assert done.returncode == 0, done.stderr
    first, _, body = done.stdout.partition("\n")
    job, index = first.split()
    (gpu,) = json.loads(body)["gpus"]  # the node has two; the job holds one
    assert gpu["index"] == int(index)
    assert gpu["share"] == f"Slurm job {job}: 16/32 shards of GPU {index}, 8.0 GiB"
    assert (gpu["memory_total"], gpu["card_memory"], gpu["slurm_job"]) == (8 * GiB, 16 * GiB, job)
    assert gpu["pod_share"] is None  # a pod's field stays a pod's
    text = in_job(slurm, "shard:16", *VGPU, "status")
    assert text.returncode == 0, text.stderr
    assert ": 16/32 shards of GPU " in text.stdout and ", 8.0 GiB: slices are fractions of it" in text.stdout
    assert text.stdout.count("GPU-") == 1


def test_a_whole_gpu_job_gets_its_gpu_whole(slurm: SlurmCluster) -> None:
    (gpu,) = status(slurm, "gpu:1")["gpus"]
    assert gpu["memory_total"] == 16 * GiB and gpu["share"].endswith(f": GPU {gpu['index']}, whole")
    done = in_job(slurm, "gpu:1", *VGPU, "run", "-p", "1/2", "--", sys.executable, "-c", SHOW)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) == 8 * GiB
    assert len(status(slurm, "gpu:2")["gpus"]) == 2


def test_two_jobs_on_one_gpu_each_have_only_their_shards(slurm: SlurmCluster) -> None:
    """The first holds all of its 8 GiB; the second, on the same card, still has its own 8 GiB
    (it neither sees the first's slice nor counts its process), and no more."""
    first = subprocess.Popen(
        ["srun", "--gres=shard:16", "-w", "node1", "--quiet", *VGPU, "run", "-p", "1", "--", "bash", "-c", "echo held; sleep 60"],
        env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        assert select.select([first.stdout], [], [], 30)[0], "the first job did not start"
        assert first.stdout.readline() == "held\n"
        held = slurm.run("scontrol", "-d", "show", "job", slurm.jobs()[0], timeout=10).stdout
        assert "GRES=shard:16(IDX:0)" in held
        second = in_job(slurm, "shard:16", "bash", "-c", f"echo $SLURM_STEP_GPUS; {' '.join(VGPU)} run -p 1 -- {sys.executable} -c \"{SHOW}\"")
        assert second.returncode == 0, second.stderr
        index, reserved = second.stdout.split()[:2]
        assert index == "0"  # the same card as the first
        assert int(reserved) == 8 * GiB
        refused = in_job(slurm, "shard:16", *VGPU, "run", "-m", "9GiB", "--", "true")
        assert refused.returncode == 69 and "8.0 GiB" in refused.stderr, refused.stderr
    finally:
        first.terminate()
        first.wait(10)


def test_a_bad_shards_setting_is_one_sentence_and_nothing_is_reserved(slurm: SlurmCluster) -> None:
    vgpu = " ".join(VGPU)
    script = f"timeout 20 {vgpu} run -p 1/2 -- sleep 30; echo exit=$?; JUPYTER_VGPU_SLURM_SHARDS_PER_GPU= {vgpu} status --json"
    done = in_job(slurm, "shard:16", "bash", "-c", script, JUPYTER_VGPU_SLURM_SHARDS_PER_GPU="half")
    assert "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU='half' is not a number of shards; use a whole number" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    first, _, body = done.stdout.partition("\n")
    assert first == "exit=1"  # refused at once (a slice would have held on for 20 s)
    assert json.loads(body)["slices"] == []


def test_the_admins_shards_per_gpu_wins_over_slurms(slurm: SlurmCluster) -> None:
    (gpu,) = status(slurm, "shard:16", JUPYTER_VGPU_SLURM_SHARDS_PER_GPU="64")["gpus"]
    assert gpu["share"].endswith(f": 16/64 shards of GPU {gpu['index']}, 4.0 GiB")


def test_a_job_without_gpus_has_none(slurm: SlurmCluster) -> None:
    done = in_job(slurm, "none", *VGPU, "run", "-p", "1/2", "--", "true")
    assert done.returncode != 0
    assert "holds no GPU on node node1 (it asked for no gpu or shard GRES): ask for --gres=shard:N or --gres=gpu:N." in done.stderr


def test_a_jupyter_server_in_a_job_shows_the_jobs_share_and_slices_it(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Batchspawner and Open OnDemand run JupyterLab inside a job: REST and %vgpu say the budget is
    the job's, and a 1/2 GPU kernel gets half of it."""
    env = {k: v for k, v in isolated_env(tmp_path).items() if k != "JUPYTER_VGPU_LEDGER"}  # the job's own
    env.update({k: slurm.env[k] for k in ("SLURM_CONF", "JUPYTER_VGPU_SIMULATE", "TMPDIR", "PATH")})
    write_sliced_kernelspec(Path(env["JUPYTER_DATA_DIR"]), {"gpu_fraction": 0.5})
    port, root, log = spare_port(), tmp_path / "root", tmp_path / "server.log"
    root.mkdir()
    with log.open("w") as out:
        process = subprocess.Popen(
            ["srun", "--gres=shard:16", "-w", "node1", "--quiet", sys.executable, "-m", "jupyter_server", "--no-browser",
             "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--ServerApp.token={TOKEN}", "--ServerApp.base_url=/job/", f"--ServerApp.root_dir={root}"],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = JupyterProcess(process, f"http://127.0.0.1:{port}/job/", root, env, log)
    kernel = None
    try:
        server.wait_ready(timeout=90)
        (job,) = slurm.jobs()
        status, body = server.api("GET", "api/vgpu/devices")
        assert status == 200, body
        (gpu,) = body["devices"]
        assert gpu["share"] == f"Slurm job {job}: 16/32 shards of GPU 0, 8.0 GiB" and gpu["slurm_job"] == job
        status, started = server.api("POST", "api/kernels", {"name": KERNEL_NAME})
        assert status == 201, started
        (held,) = wait_for(lambda: server.api("GET", "api/vgpu/slices")[1]["slices"], "the kernel's slice in the view")
        assert held["memory_reserved"] == 4 * GiB, held
        kernel = Kernel.attach(str(Path(env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{started['id']}.json"))
        [bundle] = kernel.run("%vgpu devices").displays
        assert f"Slurm job {job}: 16/32 shards of GPU 0, 8.0 GiB" in bundle["text/plain"]
        assert "8.0 GiB total" in bundle["text/plain"]
    finally:
        if kernel is not None:
            kernel.client.stop_channels()
        server.stop(timeout=20)


def test_the_shards_per_gpu_come_from_slurm_once_per_node(slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurmshare, "_looked_up", {})
    env = {**slurm.env, "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "node2"}
    children: dict[str, str] = {}
    assert slurmshare.shards_per_gpu(env, "node2", cache=children) == (slurm.shards_per_gpu,)
    assert children == {"JUPYTER_VGPU_SLURM_NODE_SHARDS": f"node2={slurm.shards_per_gpu}"}
    slurm.stop_controller()  # asked again, scontrol would now wait for it
    assert slurmshare.shards_per_gpu(env, "node2") == (slurm.shards_per_gpu,)


def test_with_slurmctld_down_the_lookup_is_one_sentence_within_its_timeout(slurm: SlurmCluster) -> None:
    slurm.stop_controller()
    env = {**slurm.env, "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "node1"}
    with pytest.raises(InvalidConfig) as refused:
        slurmshare.ask_scontrol("node1", env, timeout=2)
    assert str(refused.value) == (
        "scontrol did not say within 2 s how many shards each GPU of node node1 has (is slurmctld up?); set "
        'JUPYTER_VGPU_SLURM_SHARDS_PER_GPU (c.VGPU.slurm_shards_per_gpu) to a whole number of shards per GPU ("32"), '
        'or one per GPU index ("40,24").'
    )
