"""Inside a Slurm job the job's share is the GPU budget (issue 32): how the job's environment and
the node's GRES are read, without Slurm (tests/slurm runs the same on a real cluster)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from jupyter_vgpu.config import VGPU, job_ledger_path, load_settings
from jupyter_vgpu.errors import InvalidConfig
from jupyter_vgpu.gpus import Inventory, slurmshare
from jupyter_vgpu.gpus.slurmshare import SlurmShare, ask_scontrol, slurm_share, split_gres
from jupyter_vgpu.ledger import filesystem
from jupyter_vgpu.units import GiB

#: A step holding 16 shards of GPU 1 on node1, whose GPUs have 32 shards each (the admin says so).
STEP = {
    "SLURM_JOB_ID": "1234",
    "SLURMD_NODENAME": "node1",
    "SLURM_STEP_GPUS": "1",
    "CUDA_VISIBLE_DEVICES": "1",
    "SLURM_SHARDS_ON_NODE": "16",
    "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU": "32",
}


@pytest.mark.parametrize(
    ("gres", "per_gpu"),
    [
        ("gpu:2,shard:64", 32),
        ("gpu:a100:2(S:0-1),shard:a100:64(S:0-1)", 32),
        ("gpu:a100:1,gpu:v100:1,shard:64", 32),
        ("gpu:4(S:0,1),shard:1K", 256),
    ],
)
def test_shards_per_gpu_are_the_nodes_shards_over_its_gpus(gres: str, per_gpu: int) -> None:
    assert split_gres(gres) == per_gpu


@pytest.mark.parametrize(
    ("gres", "sentence"),
    [
        ("gpu:2,shard:63", "Node node1 has 63 shards on 2 GPUs, which do not split evenly; set JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"),
        ("gpu:2", "Node node1 has GRES gpu:2, without both gpu and shard; set JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"),
    ],
)
def test_a_gres_that_does_not_say_is_one_sentence_naming_the_setting(gres: str, sentence: str) -> None:
    with pytest.raises(InvalidConfig, match="^" + sentence):
        split_gres(gres, "node1")


def test_outside_a_job_on_its_node_there_is_no_share() -> None:
    assert slurm_share({"PATH": "/bin"}) is None
    assert slurm_share({"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0"}) is None  # an salloc shell on the login node


def test_a_steps_gpus_win_over_its_jobs() -> None:
    share = slurm_share({"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n", "SLURM_JOB_GPUS": "0-3", "SLURM_STEP_GPUS": "2"})
    assert share == SlurmShare("7", "n", (2,))
    batch = slurm_share({"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n", "SLURM_JOB_GPUS": "0-1,3"})
    assert batch is not None and batch.gpus == (0, 1, 3)


def test_cuda_visible_devices_counts_only_when_it_holds_slurms_indices() -> None:
    base = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n"}
    indices = slurm_share({**base, "CUDA_VISIBLE_DEVICES": "1"})
    assert indices is not None and indices.gpus == (1,)
    in_a_slice = slurm_share({**base, "CUDA_VISIBLE_DEVICES": "GPU-5e1a0000-0000-4000-8000-00000000a100"})
    assert in_a_slice is not None and in_a_slice.gpus == ()


def test_nvml_sees_the_node_or_only_the_jobs_gpus() -> None:
    share = SlurmShare("7", "n", (2, 3))
    assert share.nvml_map(4) == {2: 2, 3: 3}  # NVML lists the node's four GPUs
    assert share.nvml_map(2) == {0: 2, 1: 3}  # cgroups confine the devices: NVML lists the job's two
    with pytest.raises(InvalidConfig, match="^Slurm job 7 holds GPU 3 of node n, but NVML lists only 3 GPUs here"):
        share.nvml_map(3)


def test_a_shard_jobs_gpu_is_its_shards_of_the_card() -> None:
    snapshot = Inventory("2x16GiB", env=STEP).snapshot()
    (gpu,) = snapshot.gpus  # the node's other GPU is not the job's
    assert (gpu.index, gpu.memory_total, gpu.card_memory, gpu.slurm_job) == (1, 8 * GiB, 16 * GiB, "1234")
    assert gpu.share == "Slurm job 1234: 16/32 shards of GPU 1, 8.0 GiB"
    assert gpu.pod_share is None


def test_an_uneven_split_is_given_per_gpu() -> None:
    (gpu,) = Inventory("2x16GiB", env={**STEP, "SLURM_SHARDS_ON_NODE": "12", "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU": "40,24"}).snapshot().gpus
    assert gpu.share == "Slurm job 1234: 12/24 shards of GPU 1, 8.0 GiB"


def test_a_whole_gpu_job_has_its_gpus_whole() -> None:
    env = {k: v for k, v in STEP.items() if k != "SLURM_SHARDS_ON_NODE"}
    (gpu,) = Inventory("2x16GiB", env=env).snapshot().gpus
    assert (gpu.index, gpu.memory_total, gpu.share) == (1, 16 * GiB, "Slurm job 1234: GPU 1, whole")


def test_a_job_without_gpus_has_none() -> None:
    snapshot = Inventory("2x16GiB", env={"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "node2"}).snapshot()
    assert not snapshot.available and snapshot.gpus == ()
    assert snapshot.message == (
        "Slurm job 9 holds no GPU on node node2 (it asked for no gpu or shard GRES): ask for --gres=shard:N or --gres=gpu:N."
    )


@pytest.mark.parametrize(
    ("name", "value", "sentence"),
    [
        ("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU", "half", "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU='half' is not a number of shards; use a whole number"),
        ("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU", "0", "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU='0' is not a number of shards"),
        ("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU", "32,", "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU='32,' is not a number of shards"),
        ("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU", "40", None),
        ("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU", "40,24", None),
        ("SLURM_SHARDS_ON_NODE", "lots", "SLURM_SHARDS_ON_NODE='lots' is not a number of shards; Slurm sets a whole number, at least 1."),
        ("SLURM_STEP_GPUS", "gpu1", "SLURM_STEP_GPUS='gpu1' does not name GPUs; Slurm sets GPU indices such as 0,1 or 0-3."),
        (
            "SLURM_STEP_GPUS",
            "0-99999999",
            "SLURM_STEP_GPUS='0-99999999' does not name a node's GPUs; Slurm sets indices below 1024, in ranges from low to high, such as 0,1 or 0-3.",
        ),
        ("SLURM_STEP_GPUS", "3-1", "SLURM_STEP_GPUS='3-1' does not name a node's GPUs"),
    ],
)
def test_a_value_the_job_gets_wrong_is_one_sentence(name: str, value: str, sentence: str | None) -> None:
    env = {**STEP, name: value}
    if sentence is None:
        Inventory("2x16GiB", env=env).snapshot()
        return
    with pytest.raises(InvalidConfig, match="^" + sentence.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        Inventory("2x16GiB", env=env).snapshot()


def test_a_per_gpu_list_must_reach_the_jobs_gpu() -> None:
    sentence = "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU='40,24' names the shards of 2 GPUs, but Slurm job 1234 holds GPU 2; use a whole number"
    with pytest.raises(InvalidConfig, match="^" + sentence):
        Inventory("2x16GiB", env={**STEP, "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU": "40,24", "SLURM_STEP_GPUS": "2"}).snapshot()


def test_without_scontrol_the_sentence_names_the_setting() -> None:
    env = {k: v for k, v in STEP.items() if k != "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"}
    with pytest.raises(InvalidConfig, match="^Slurm job 1234 holds GPU shards, but scontrol is not installed here"):
        ask_scontrol("node1", {**env, "PATH": "/nonexistent"})


def test_what_a_parent_learnt_is_handed_to_its_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurmshare, "_looked_up", {})
    env = {k: v for k, v in STEP.items() if k != "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"}
    child = {**env, "PATH": "/nonexistent", "JUPYTER_VGPU_SLURM_NODE_SHARDS": "node1=32"}  # no scontrol needed
    assert slurm_share(child) == SlurmShare("1234", "node1", (1,), 16, (32,))
    elsewhere = {**child, "JUPYTER_VGPU_SLURM_NODE_SHARDS": "node7=32"}  # srun carried it to another node
    with pytest.raises(InvalidConfig, match="scontrol is not installed"):
        slurm_share(elsewhere)


def test_the_admins_setting_is_checked_and_reaches_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU", "")  # undone after the test, as what load_settings sets
    monkeypatch.delenv("JUPYTER_VGPU_SLURM_SHARDS_PER_GPU")
    with pytest.raises(InvalidConfig, match=r"^c\.VGPU\.slurm_shards_per_gpu='a third' is not a number of shards"):
        VGPU(slurm_shards_per_gpu="a third")
    from traitlets.config import Config

    config = Config()
    config.VGPU.slurm_shards_per_gpu = "16"
    load_settings(config)
    assert os.environ["JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"] == "16"


def test_a_jobs_ledger_is_on_the_nodes_own_disk_in_a_private_folder_of_the_users(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("JUPYTER_VGPU_LEDGER", "XDG_RUNTIME_DIR", "SLURM_CLUSTER_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-slurm.conf"))
    base = tmp_path / f"jupyter-vgpu-{os.geteuid()}"
    assert VGPU().resolved_ledger_path == base / "job-slurm-1234" / "ledger.sqlite"
    # A step without SLURM_CLUSTER_NAME (srun --jobid from outside the job) finds the batch script's
    # folder through slurm.conf's ClusterName: one job, one ledger.
    (tmp_path / "slurm.conf").write_text("# a site's\nClusterName=Gpu-East # the cluster\nSlurmctldPort=6817\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    assert VGPU().resolved_ledger_path == base / "job-gpu-east-1234" / "ledger.sqlite"
    assert oct(base.stat().st_mode & 0o777) == "0o700"
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "gpu-east")
    assert VGPU().resolved_ledger_path == base / "job-gpu-east-1234" / "ledger.sqlite"  # another cluster's job 1234 is another
    monkeypatch.setenv("JUPYTER_VGPU_LEDGER", str(tmp_path / "mine.sqlite"))
    assert VGPU().resolved_ledger_path == tmp_path / "mine.sqlite"  # a path the user names wins
    assert job_ledger_path({"SLURM_JOB_ID": "1234"}) is None  # not on a node of the job


def mounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str) -> None:
    fake = tmp_path / "mounts"
    fake.write_text(table)
    monkeypatch.setattr(filesystem, "MOUNTS", fake)
    monkeypatch.setattr(filesystem, "_warned", set())


def test_a_ledger_on_nfs_is_warned_about_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from jupyter_vgpu.ledger import SQLiteLedger

    mounts(tmp_path, monkeypatch, f"/dev/vda1 / ext4 rw 0 0\nfiler:/home {tmp_path} nfs4 rw,relatime 0 0\n")
    path = tmp_path / "vgpu" / "ledger.sqlite"
    with caplog.at_level(logging.WARNING, logger="jupyter_vgpu"):
        for _ in range(2):
            SQLiteLedger(path, Inventory("16GiB")).close()
    said = [r.getMessage() for r in caplog.records if "network file system" in r.getMessage()]
    assert said == [
        f"jupyter-vgpu: the ledger {path} is on a network file system (nfs4), where SQLite's locks are not safe: point "
        "JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a folder on this machine's own disk, such as /tmp."
    ]


def test_a_local_folder_under_a_network_mount_is_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "scratch"
    mounts(tmp_path, monkeypatch, f"filer:/ / nfs rw 0 0\ntmpfs {local} tmpfs rw 0 0\n")
    assert filesystem.network_filesystem(local / "jupyter-vgpu-1") is None
    assert filesystem.network_filesystem(tmp_path / "home") == "nfs"
    mounts(tmp_path, monkeypatch, "lustre@o2ib:/fs /lus lustre rw 0 0\n")
    assert filesystem.network_filesystem(Path("/lus/home/alice")) == "lustre"
    assert filesystem.network_filesystem(Path("/lustre-like")) is None  # a prefix is not a mount point


@pytest.mark.parametrize(
    ("env", "card_fraction"),
    [
        ({}, False),  # no scheduler: CUDA sees the GPU the slice is of
        ({"CUDA_DEVICE_MEMORY_LIMIT_0": "8g"}, False),  # HAMi-core makes CUDA report the pod's share
        ({"GPU_PORTION": "0.5"}, True),  # KAI: CUDA still sees the whole card
        (STEP, True),  # a job's shards: CUDA still sees the whole card
        ({"GPU_PORTION": "half"}, False),  # said where the GPUs are read; the slice's own size stays right
    ],
)
def test_a_slices_fractions_are_of_what_cuda_sees_under_the_share_its_environment_names(env: dict[str, str], card_fraction: bool) -> None:
    from jupyter_vgpu.slices import Slice, SliceRequest
    from jupyter_vgpu.slices.environment import with_slice

    # 4 GiB of a GPU the lens made 8 GiB (half a 16 GiB card)
    held = Slice(
        id="abcdef012345", owner="u", uid=0, holder_kind="kernel", holder="k", pid=None, pid_start=None, gpus=("GPU-0",),
        gpu_indices=(0,), memory=(4 * GiB,), memory_total=(8 * GiB,), context_allowance=0, logical_devices=1, request=SliceRequest.parse(0.5),
    )  # fmt: skip
    given = with_slice({"PATH": "/bin", **env}, held, ledger_path="/l")
    assert float(given["JUPYTER_VGPU_MEMORY_FRACTION"]) == (0.25 if card_fraction else 0.5)
    assert given["PATH"] == "/bin" and given["JUPYTER_VGPU_MEMORY_LIMIT"] == str(4 * GiB)  # the rest kept, the slice's size as booked
