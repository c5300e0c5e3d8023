"""The ``slurm`` launcher's words, without a cluster."""

from __future__ import annotations

from jupyter_vgpu.launch.slurm.client import ask_for
from jupyter_vgpu.launch.slurm.rows import placed_text


def test_the_log_names_a_two_gpu_kernels_gpus_apart_from_what_it_asked() -> None:
    asked = ask_for(None, None, 2, per_gpu=None, gpu_memory=None).text
    assert placed_text("12", "node1", [0, 1], asked) == "Slurm job 12 on node node1, GPUs 0 and 1; it asked for 2 whole GPUs (gpu:2)"
    quarter = ask_for(0.25, None, 1, per_gpu=32, gpu_memory=None).text
    assert placed_text("13", "node2", [1], quarter) == "Slurm job 13 on node node2, GPU 1; it asked for 1/4 GPU: 8 of 32 shards"


def test_a_kernel_job_is_named_for_its_notebook_first_and_found_by_its_kernel_id() -> None:
    from jupyter_vgpu.launch.slurm.client import job_name, kernel_of

    assert job_name("k1", "work/My train (v2).ipynb") == "My_train_v2-jupyter-vgpu-kernel-k1"
    assert job_name("k1") == job_name("k1", "") == "jupyter-vgpu-kernel-k1"
    assert [kernel_of(n) for n in ("My_train_v2-jupyter-vgpu-kernel-k1", "jupyter-vgpu-kernel-k1", "myjupyter-vgpu-kernel-k1", "bash")] == ["k1", "k1", None, None]


def test_the_clusters_guide_installs_kernelspecs_for_a_user_or_an_environment_never_system_wide_in_silence() -> None:
    import re
    from pathlib import Path

    guide = (Path(__file__).parents[2] / "docs" / "cluster.md").read_text()
    commands = re.findall(r"^jupyter vgpu kernelspec install .*$", guide, re.M)
    assert commands and all(re.search(r" --(user|sys-prefix|prefix)\b", c) for c in commands), commands
