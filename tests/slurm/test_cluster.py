"""The test cluster itself: what a job on it sees, and that it can lose its controller."""

from __future__ import annotations

import subprocess

import pytest

from .cluster import SlurmCluster


def job_env(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_a_shard_job_sees_its_shards_and_one_gpu(slurm: SlurmCluster) -> None:
    env = job_env(slurm.run("srun", "--gres=shard:16", "env", timeout=30).stdout)
    assert env["SLURM_SHARDS_ON_NODE"] == "16"
    assert env["CUDA_VISIBLE_DEVICES"] in {"0", "1"}
    assert env["SLURMD_NODENAME"] in slurm.nodes
    assert env["JUPYTER_VGPU_SIMULATE"] == slurm.simulate  # srun passes the submitting environment on


def test_a_whole_gpu_job_sees_its_gpus_and_no_shards(slurm: SlurmCluster) -> None:
    env = job_env(slurm.run("srun", "--gres=gpu:2", "env", timeout=30).stdout)
    assert "SLURM_SHARDS_ON_NODE" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["SLURM_STEP_GPUS"] == "0,1"


def test_jobs_spread_over_both_nodes(slurm: SlurmCluster) -> None:
    out = slurm.run("srun", "--nodes=2", "--ntasks=2", "--gres=gpu:2", "printenv", "SLURMD_NODENAME", timeout=30).stdout
    assert sorted(out.split()) == list(slurm.nodes)


def test_clients_fail_within_their_timeout_while_the_controller_is_down(slurm: SlurmCluster) -> None:
    slurm.stop_controller()
    with pytest.raises((subprocess.TimeoutExpired, subprocess.CalledProcessError)):
        slurm.run("squeue", timeout=2)
    slurm.start_controller()
    assert slurm.jobs() == []
