"""A Slurm kernel's folder on its node belongs to its job (issue 39, S1): another user's folders
planted where the next jobs' ledgers would have gone change nothing, a private folder of the
user's taken by another user refuses the start in one sentence, and no folder outlives its
kernel. The test cluster runs jobs as root; "another user" is a folder chowned to uid 65534."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_vgpu.errors import VGPUError
from jupyter_vgpu.launch.slurm.rows import server_rows
from jupyter_vgpu.server.elsewhere import elsewhere_view

from .cluster import SlurmCluster
from .login import BOUND, Login, run_code

pytestmark = pytest.mark.slow

OTHER_UID = 65534


def next_job_id(slurm: SlurmCluster) -> int:
    held = slurm.run("sbatch", "--hold", "--parsable", "--wrap=true", timeout=20).stdout.strip().split(";")[0]
    slurm.run("scancel", held, timeout=10)
    return int(held) + 1


def plant(folder: Path) -> Path:
    """A folder of another user's, as ``mkdir -m 700`` by them makes it."""
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, OTHER_UID)
    return folder


def base_of(login: Login) -> Path:
    return login.folder / "node-tmp" / f"jupyter-vgpu-{os.geteuid()}"


@pytest.fixture(autouse=True)
def _no_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


@pytest.mark.parametrize("now", [False, True], ids=["shutdown", "shutdown-now"])
async def test_another_users_folders_at_the_next_job_ids_leave_the_kernel_fenced_and_no_folder_outlives_it(login: Login, now: bool) -> None:
    first = next_job_id(login.cluster)
    planted = [plant(login.folder / "node-tmp" / f"jupyter-vgpu-{job}") for job in range(first, first + 4)]
    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    out = await run_code(km, "import os; print(os.environ.get('JUPYTER_VGPU_SLICE_ID'), os.environ['JUPYTER_VGPU_MEMORY_LIMIT'])")
    slice_id, limit = out.split()
    assert slice_id != "None" and int(limit) > 0  # a slice of the job's share: its frameworks are fitted to it
    shown = await run_code(km, "%vgpu")
    assert "no slice" not in shown and "Unfenced" not in shown
    assert [p.name for p in base_of(login).glob("kernel-*")] != []
    await asyncio.wait_for(km.shutdown_kernel(now=now), BOUND)
    await login.until(lambda: login.kernel_jobs() == {}, "the job gone")
    assert list(base_of(login).glob("kernel-*")) == []
    assert all(p.stat().st_uid == OTHER_UID and list(p.iterdir()) == [] for p in planted)  # theirs, untouched


async def test_a_private_folder_taken_by_another_user_means_a_fresh_one_and_no_safe_folder_a_refusal(login: Login) -> None:
    """Hardening round five, M3: one `mkdir -m 700 /tmp/jupyter-vgpu-<uid>` by another user made
    every Slurm kernel of this user's on the node fail, with a 500 at the kernel's start."""
    taken = plant(base_of(login))
    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    fresh = base_of(login).with_name(f"{base_of(login).name}.1")
    assert [p.parent for p in fresh.glob("kernel-*")] == [fresh]  # the kernel's folder is in a fresh private one
    assert fresh.stat().st_uid == os.geteuid() and fresh.stat().st_mode & 0o777 == 0o700
    await asyncio.wait_for(km.shutdown_kernel(), BOUND)
    await login.until(lambda: login.kernel_jobs() == {}, "the job gone")
    assert list(taken.iterdir()) == [] and list(fresh.glob("kernel-*")) == []

    os.chown(fresh, OTHER_UID, OTHER_UID)  # every name taken: the start is refused in one sentence
    for number in range(2, 65):
        plant(base_of(login).with_name(f"{base_of(login).name}.{number}"))
    with pytest.raises(VGPUError) as refused:
        await login.start(login.spec("quarter-again", gpu_fraction=0.25))
    said = str(refused.value)
    assert getattr(refused.value, "status_code", None) == 503, type(refused.value)  # its status, not a 500
    assert said.endswith(
        f"{taken} belongs to uid {OTHER_UID}, not to you (uid 0), and so are the next 64 names, so this Slurm job has no "
        "safe folder for its ledger on this node; remove them, or set TMPDIR to a folder of yours on the node."
    )
    assert "\n" not in said and "unfenced" not in said
    await login.until(lambda: login.kernel_jobs() == {}, "the job cancelled")
    assert list(taken.iterdir()) == []


async def test_a_kernel_whose_share_cannot_be_had_as_a_slice_says_unfenced_in_vgpu_and_its_rest_row(login: Login) -> None:
    name = login.spec("whole", gpu_fraction=1)
    spec_file = login.kernels_dir / name / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["env"] = {"JUPYTER_VGPU_CONTEXT_ALLOWANCE": "lots"}  # read on the node only: its settings cannot be loaded there
    spec_file.write_text(json.dumps(spec))
    km = await login.start(name)
    shown = await run_code(km, "%vgpu")
    assert "Unfenced: " in shown and "The kernel runs with the job's GPUs, unfenced: its frameworks are not fitted to the share." in shown
    (row,) = await login.until(lambda: [r for r in server_rows(os.environ) if r.fields.get("unfenced")], "the job's row unfenced")
    assert row.fields["unfenced"] == (
        "JUPYTER_VGPU_CONTEXT_ALLOWANCE 'lots' is not a size such as 6GiB, 512MiB, 1.5GB or a number of bytes. Or use 'auto'. "
        "The kernel runs with the job's GPUs, unfenced: its frameworks are not fitted to the share."
    )
    view = elsewhere_view(row, SimpleNamespace(action="warn"), {})  # type: ignore[arg-type]
    assert view["share_note"] == f"Unfenced: {row.fields['unfenced']}"
    await asyncio.wait_for(km.shutdown_kernel(), BOUND)
