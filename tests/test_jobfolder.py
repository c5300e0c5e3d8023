"""A Slurm job's folder on its node is the user's own (issue 39, S1): made in a private folder of
the user's, exclusively, checked, never a folder someone else made; a bad job id is one sentence.
Another user is played by chown to another uid, which needs root (tests/slurm runs it on a real
cluster)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_vgpu.errors import InvalidConfig
from jupyter_vgpu.jobfolder import job_ledger_path, kernel_folder, remove, sweep, user_base

OTHER_UID = 65534  # nobody


def job(tmp_path: Path, job_id: str = "17", **more: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": job_id, "SLURMD_NODENAME": "node1", "TMPDIR": str(tmp_path), **more}


@pytest.mark.parametrize("value", ["../../x", "12/..", "", "1e3", "-1", "１２"])
def test_a_job_id_that_is_not_slurms_is_one_sentence(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidConfig, match=r"^SLURM_JOB_ID=.* is not a Slurm job id; Slurm sets a number such as 1234\.$"):
        job_ledger_path(job(tmp_path, value))
    assert list(tmp_path.glob("*/job-*")) == []


def test_a_folder_planted_by_another_user_is_never_used_and_a_fresh_one_is(tmp_path: Path) -> None:
    """Hardening round five, M3: one `mkdir -m 700 /tmp/jupyter-vgpu-<uid>` by another user made
    every Slurm kernel and run of this user's on the node fail."""
    if os.geteuid() != 0:
        pytest.skip("playing another user takes chown, which needs root")
    base = tmp_path / f"jupyter-vgpu-{os.geteuid()}"
    base.mkdir(mode=0o700)
    os.chown(base, OTHER_UID, OTHER_UID)
    folder = kernel_folder(job(tmp_path))
    fresh = tmp_path / f"jupyter-vgpu-{os.geteuid()}.1"
    assert folder.parent == fresh and fresh.stat().st_uid == 0 and fresh.stat().st_mode & 0o777 == 0o700
    assert job_ledger_path(job(tmp_path)).parent.parent == fresh  # every process of the job finds the same one
    assert list(base.iterdir()) == []  # never used
    for number in range(2, 66):  # and when every name is taken: one sentence
        taken = tmp_path / f"jupyter-vgpu-{os.geteuid()}.{number}"
        taken.mkdir(mode=0o700)
        os.chown(taken, OTHER_UID, OTHER_UID)
    os.chown(fresh, OTHER_UID, OTHER_UID)
    with pytest.raises(InvalidConfig) as refused:
        kernel_folder(job(tmp_path))
    assert str(refused.value) == (
        f"{base} belongs to uid {OTHER_UID}, not to you (uid 0), and so are the next 64 names, so this Slurm job has no "
        "safe folder for its ledger on this node; remove them, or set TMPDIR to a folder of yours on the node."
    )


@pytest.mark.parametrize("make", ["link", "open"])
def test_a_base_that_is_a_link_or_open_to_others_is_passed_over(tmp_path: Path, make: str) -> None:
    base = tmp_path / f"jupyter-vgpu-{os.geteuid()}"
    if make == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        base.symlink_to(tmp_path / "elsewhere")
    else:
        base.mkdir()
        base.chmod(0o777)
    assert user_base(job(tmp_path)) == tmp_path / f"jupyter-vgpu-{os.geteuid()}.1"
    assert not list(base.iterdir())  # nothing made in it


def test_each_kernel_start_gets_a_new_private_folder_removed_with_it(tmp_path: Path) -> None:
    env = job(tmp_path, SLURM_CLUSTER_NAME="c1")
    first, second = kernel_folder(env), kernel_folder(env)
    assert first != second and first.parent == second.parent == tmp_path / f"jupyter-vgpu-{os.geteuid()}"
    assert first.name.startswith("kernel-c1-17-") and oct(first.stat().st_mode & 0o777) == "0o700"
    remove(first)
    assert not first.exists() and second.exists()


def test_a_folder_whose_starter_has_gone_is_swept_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    env = job(tmp_path)
    live = kernel_folder(env)
    left = kernel_folder(env)
    (left / ".starter").write_text("999999999 1")  # a SIGKILL left it: its starter is gone
    assert sweep(live.parent) == [left]
    assert live.exists() and not left.exists()


def test_the_xdg_runtime_dir_is_the_base_when_it_is_the_users(tmp_path: Path) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    assert user_base(job(tmp_path, XDG_RUNTIME_DIR=str(runtime))) == runtime
    runtime.chmod(0o755)  # not private: the node's temporary folder instead
    assert user_base(job(tmp_path, XDG_RUNTIME_DIR=str(runtime))) == tmp_path / f"jupyter-vgpu-{os.geteuid()}"


def test_jupyter_vgpu_in_a_job_with_a_job_id_that_is_not_slurms_says_so_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jupyter_vgpu.cli import main

    monkeypatch.delenv("JUPYTER_VGPU_LEDGER", raising=False)
    for name, value in job(tmp_path, "../../x", JUPYTER_VGPU_SIMULATE="1x16GiB").items():
        monkeypatch.setenv(name, value)
    assert main(["status"]) != 0
    err = capsys.readouterr().err
    assert err == "jupyter vgpu: SLURM_JOB_ID='../../x' is not a Slurm job id; Slurm sets a number such as 1234.\n"
    assert not (tmp_path.parent / "x").exists()
