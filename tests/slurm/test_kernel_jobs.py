"""A GPU kernel as a Slurm job (launcher ``slurm``): real kernels started from this process as a
login node, placed by Slurm on the test cluster's nodes, and nothing left behind."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.errors import VGPUError
from jupyter_vgpu.launch.slurm import SlurmLauncher
from jupyter_vgpu.ledger import open_ledger

from .cluster import SlurmCluster
from .login import BOUND, Login, run_code

pytestmark = pytest.mark.slow


def login_ledger_slices() -> list[object]:
    ledger = open_ledger()
    try:
        return list(ledger.slices())
    finally:
        ledger.close()


def fill(slurm: SlurmCluster, count: int = 2) -> list[str]:
    """Jobs that hold every GPU of ``count`` nodes (not kernels)."""
    jobs = []
    for _ in range(count):
        out = slurm.run("salloc", "--no-shell", "--job-name=filler", "--gres=gpu:2", "--nodes=1", timeout=20).stderr
        jobs.append(out.split("Granted job allocation")[1].split()[0])
    return jobs


async def test_kernels_are_placed_by_slurm_over_both_nodes_and_book_nothing_here(login: Login) -> None:
    name = login.spec("whole", gpu_fraction=1)
    kms = [await login.start(name) for _ in range(3)]
    seen = set()
    for km in kms:
        out = await run_code(km, "import os; print(os.environ['SLURMD_NODENAME'], os.environ['SLURM_JOB_ID'])")
        node, job = out.split()
        assert job == login.job_of(km)
        assert login.kernel_jobs()[job] == {"name": f"jupyter-vgpu-kernel-{km.kernel_id}", "state": "RUNNING", "reason": "None", "node": node}
        seen.add(node)
    assert seen == {"node1", "node2"}  # two GPUs a node: the third whole-GPU kernel is on the other
    assert login_ledger_slices() == []  # Slurm is the book on the login node
    for km in kms:
        await km.shutdown_kernel()
    await login.until(lambda: login.kernel_jobs() == {}, "the jobs gone")


async def test_a_share_is_asked_as_shards_and_vgpu_says_the_job_and_node(login: Login) -> None:
    km = await login.start(login.spec("third", display="Python 3 (1/3 GPU, Slurm)", gpu_fraction="1/3"))
    job = login.job_of(km)
    detail = login.cluster.run("scontrol", "--details", "show", "job", job, timeout=10).stdout
    assert "shard:11" in detail  # 1/3 of 32 shards is 10.67: rounded up
    out = await run_code(km, "import os; print(os.environ['SLURM_SHARDS_ON_NODE'])\n%vgpu")
    node = login.kernel_jobs()[job]["node"]
    assert out.startswith("11\n")
    assert f"Slurm job {job} on {node} · asked 1/3 GPU: 11 of 32 shards, 10.67 rounded up" in out
    # The kernel's slice is the whole of its job's share: it says what it asked, not "1 GPU".
    assert re.search(r"\n\s*share\s+1/3 GPU: 11 of 32 shards, 10.67 rounded up\n", out), out
    on_node = await run_code(km, "import subprocess, sys\nprint(subprocess.run([sys.executable, '-m', 'jupyter_vgpu.cli', 'status'], capture_output=True, text=True).stdout)")
    assert "[1/3 GPU: 11 of 32 shards, 10.67 rounded up" in on_node.replace("\u00a0", " ") and "[1 GPU" not in on_node, on_node
    shown = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "jupyter_vgpu.cli", "status"], capture_output=True, text=True, timeout=30
    )
    gpu = login.cluster.run("scontrol", "--details", "show", "job", job, timeout=10).stdout.split("IDX:")[1][0]
    flat = " ".join(shown.stdout.split())  # status folds its lines to the terminal's width
    assert f"Slurm job {job} on {node} GPU {gpu} 11/32 shards (11/32 GPU) kernel {km.kernel_id}" in flat, shown.stderr


async def test_interrupt_reaches_the_kernel_through_slurm(login: Login) -> None:
    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    await run_code(km, "pass")
    cell = asyncio.ensure_future(run_code(km, "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted')"))
    await asyncio.sleep(1.5)
    began = time.monotonic()
    await km.interrupt_kernel()
    assert (await asyncio.wait_for(cell, 30)).strip() == "interrupted"
    assert time.monotonic() - began < 20


async def test_the_kernel_on_its_node_holds_the_jobs_share_as_its_slice(login: Login) -> None:
    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    out = await run_code(km, "import os; print(os.environ['JUPYTER_VGPU_MEMORY_RESERVED'], os.environ['JUPYTER_VGPU_LEDGER'])")
    reserved, ledger = out.split()
    assert int(reserved) == 4 * 2**30  # 8 of 32 shards of a 16 GiB GPU
    folder = Path(ledger).parent  # this start's own, in the user's private folder on the node
    assert folder.parent == login.folder / "node-tmp" / f"jupyter-vgpu-{os.geteuid()}"
    assert re.fullmatch(rf"kernel-\w+-{login.job_of(km)}-\w+", folder.name) and Path(ledger).name == "ledger.sqlite"


@pytest.mark.parametrize("now", [False, True], ids=["restart", "restart-now"])
async def test_a_restart_keeps_the_job_and_a_shutdown_cancels_it(login: Login, now: bool) -> None:
    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    job = login.job_of(km)
    pid_before = (await run_code(km, "import os; print(os.getpid())")).strip()
    await asyncio.wait_for(km.restart_kernel(now=now), BOUND)
    assert login.job_of(km) == job
    assert (await run_code(km, "import os; print(os.getpid())")).strip() != pid_before
    assert list(login.kernel_jobs()) == [job]
    await asyncio.wait_for(km.shutdown_kernel(), BOUND)
    await login.until(lambda: login.kernel_jobs() == {}, "the job gone")


async def test_a_port_taken_on_the_node_is_replaced_there_and_the_kernel_answers(login: Login, monkeypatch: pytest.MonkeyPatch) -> None:
    """The login node picks the kernel's ports on its own host; on the node one of them is taken
    (here the nodes are this host: a socket listens on it between the two phases)."""
    taken: list[socket.socket] = []
    launch = SlurmLauncher.launch

    async def launch_where_the_shell_port_is_taken(self: SlurmLauncher, provisioner: Any, cmd: list[str], **kwargs: Any) -> Any:
        listener = socket.socket()
        listener.bind((provisioner.launch_state["address"], provisioner.connection_info["shell_port"]))
        listener.listen()
        taken.append(listener)
        return await launch(self, provisioner, cmd, **kwargs)

    monkeypatch.setattr(SlurmLauncher, "launch", launch_where_the_shell_port_is_taken)
    try:
        km = await login.start(login.spec("quarter", gpu_fraction=0.25))
        assert (await run_code(km, "print(6 * 7)")).strip() == "42"
        (listener,) = taken
        assert km.shell_port != listener.getsockname()[1]
        on_file = json.loads(Path(km.connection_file).read_text())
        assert on_file["shell_port"] == km.shell_port and on_file["iopub_port"] == km.iopub_port
    finally:
        for listener in taken:
            listener.close()


async def test_a_forced_kill_cancels_the_job_and_leaves_no_kernel_running(login: Login) -> None:
    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    kernel_pid = int((await run_code(km, "import os; print(os.getpid())")).strip())
    await asyncio.wait_for(km.shutdown_kernel(now=True), BOUND)
    await login.until(lambda: login.kernel_jobs() == {}, "the job gone")
    await login.until(lambda: not _exists(kernel_pid), "the kernel under slurmstepd ended")


async def seen_dead(km: Any) -> None:
    """Until the kernel's provisioner sees its kernel ended (its srun gone), as the restarter would."""
    deadline = time.monotonic() + BOUND
    while await km.provisioner.poll() is None:
        assert time.monotonic() < deadline, f"the kernel seen dead within {BOUND:.0f} s"
        await asyncio.sleep(0.1)


async def test_a_kernel_whose_job_slurm_ended_is_not_started_again_in_a_new_job_by_default_and_says_why(login: Login) -> None:
    from jupyter_vgpu.errors import SliceUnavailable

    km = await login.start(login.spec("quarter", gpu_fraction=0.25))
    job = login.job_of(km)
    login.cluster.run("scancel", job, timeout=10)  # its user, from a shell
    await login.until(lambda: not login.kernel_jobs(), "the job ended")
    await seen_dead(km)
    with pytest.raises(SliceUnavailable) as refused:
        await asyncio.wait_for(km.restart_kernel(now=True), BOUND)
    assert str(refused.value) == (
        f"Slurm ended this kernel's job {job}: it was cancelled outside this server (scancel by you or an administrator) (CANCELLED); "
        "no new job is asked for this kernel (slurm_restarts 0), so its variables are lost: "
        "start a new kernel for this notebook (Kernel > Change Kernel..., or open the notebook again) to run in a new job."
    )
    assert login.kernel_jobs() == {}  # nothing was asked of Slurm


async def test_a_kernel_whose_job_reached_its_time_limit_is_not_started_again(login: Login) -> None:
    """A real time limit: --time=1 is Slurm's minute, checked by slurmctld every half minute or so."""
    from jupyter_vgpu.errors import SliceUnavailable

    km = await login.start(login.spec("minute", gpu_fraction=0.25, slurm_args=["--time=1"]))
    job = login.job_of(km)
    await login.until(lambda: not login.kernel_jobs(), "the job ended by its time limit", bound=180)
    await seen_dead(km)
    with pytest.raises(SliceUnavailable, match=rf"^Slurm ended this kernel's job {job}: its time limit was reached \(TIMEOUT"):
        await asyncio.wait_for(km.restart_kernel(now=True), BOUND)
    assert login.kernel_jobs() == {}


async def test_a_restarted_kernel_after_slurm_ended_its_job_runs_in_a_new_job_and_says_why(login: Login) -> None:
    from jupyter_vgpu.errors import SliceUnavailable
    from jupyter_vgpu.launch.slurm.rows import server_rows

    km = await login.start(login.spec("quarter", gpu_fraction=0.25, slurm_restarts=1))
    job = login.job_of(km)
    login.cluster.run("scancel", job, timeout=10)  # as an administrator would, outside the server
    await login.until(lambda: not login.kernel_jobs(), "the job ended")
    await asyncio.sleep(0.5)
    assert await km.provisioner.poll() is not None  # type: ignore[union-attr]
    await asyncio.wait_for(km.restart_kernel(now=True), BOUND)
    new_job = login.job_of(km)
    assert new_job != job
    why = (
        f"Slurm ended this kernel's job {job}: it was cancelled outside this server (scancel by you or an administrator) "
        f"(CANCELLED). This kernel was restarted in job {new_job}: variables were lost."
    )
    out = await run_code(km, "import os; print(os.environ['SLURM_JOB_ID'])")
    assert out.splitlines() == [f"jupyter-vgpu: {why}", new_job]  # under the first cell, once
    shown = await run_code(km, "%vgpu")
    assert why in " ".join(shown.split())  # %vgpu's "previous job" row
    assert "jupyter-vgpu: Slurm ended" not in shown  # said once
    rows = await asyncio.to_thread(server_rows, dict(os.environ))
    assert [(r.fields["job_id"], r.ended) for r in rows] == [(new_job, why)]  # the REST row says it too
    await asyncio.wait_for(km.restart_kernel(), BOUND)  # a restart in the same job: nothing more to say
    assert login.job_of(km) == new_job
    assert (await run_code(km, "print('x')")).strip() == "x"
    assert "previous job" not in await run_code(km, "%vgpu")
    # slurm_restarts 1: one new job, and no second.
    login.cluster.run("scancel", new_job, timeout=10)
    await login.until(lambda: not login.kernel_jobs(), "the new job ended")
    await seen_dead(km)
    with pytest.raises(SliceUnavailable, match=r"no new job beyond 1 is asked for this kernel \(slurm_restarts 1\)"):
        await asyncio.wait_for(km.restart_kernel(now=True), BOUND)
    assert login.kernel_jobs() == {}


async def test_a_restart_that_gets_no_job_still_counts_against_slurm_restarts(login: Login) -> None:
    from jupyter_vgpu.errors import SliceUnavailable

    km = await login.start(login.spec("once", gpu_fraction=0.25, slurm_restarts=1))  # wait_timeout 0: a job that would wait is refused
    job = login.job_of(km)
    login.cluster.run("scancel", job, timeout=10)
    await login.until(lambda: not login.kernel_jobs(), "the job ended")
    await seen_dead(km)
    fillers = fill(login.cluster)
    with pytest.raises(SliceUnavailable, match=r"^Slurm cannot start kernel .* would wait"):
        await asyncio.wait_for(km.restart_kernel(now=True), BOUND)  # no room: the one new job allowed is not asked
    for filler in fillers:
        login.cluster.run("scancel", filler, timeout=10)
    await login.until(lambda: not login.kernel_jobs(), "the fillers ended")
    await asyncio.wait_for(km.restart_kernel(now=True), BOUND)
    new_job = login.job_of(km)
    out = await run_code(km, "print('in the new job')")
    assert f"Slurm ended this kernel's job {job}: it was cancelled" in out and f"restarted in job {new_job}" in out  # still said why
    login.cluster.run("scancel", new_job, timeout=10)
    await login.until(lambda: not login.kernel_jobs(), "the new job ended")
    await seen_dead(km)
    with pytest.raises(SliceUnavailable, match=r"no new job beyond 1 is asked for this kernel \(slurm_restarts 1\)"):
        await asyncio.wait_for(km.restart_kernel(now=True), BOUND)  # the refused restart did not reset the count
    assert login.kernel_jobs() == {}


async def test_a_restarted_server_talks_to_the_running_jobs_kernel_and_its_shutdown_cancels_the_job(login: Login) -> None:
    from jupyter_client import AsyncKernelManager
    from jupyter_client.provisioning import KernelProvisionerFactory

    name = login.spec("quarter", gpu_fraction=0.25)
    km = await login.start(name)
    job = login.job_of(km)
    await run_code(km, "x = 41")
    info = await km.provisioner.get_provisioner_info()  # type: ignore[union-attr]
    connection = km.get_connection_info()
    assert info["vgpu_launch"]["job_id"] == job
    # The server goes away without shutting the kernel down; a new one loads what it saved.
    reborn = AsyncKernelManager(kernel_name=name, kernel_id=km.kernel_id)
    reborn.load_connection_info(connection)
    factory = KernelProvisionerFactory.instance(parent=reborn.parent)
    reborn.provisioner = factory.create_provisioner_instance(km.kernel_id, reborn.kernel_spec, parent=reborn)
    await reborn.provisioner.load_provisioner_info(info)  # type: ignore[union-attr]
    km.provisioner = None  # the old manager is gone: it must cancel nothing
    login.managers.remove(km)
    login.managers.append(reborn)
    assert await reborn.is_alive()
    assert (await run_code(reborn, "print(x + 1)")).strip() == "42"  # the same kernel, in the same job
    assert login.job_of(reborn) == job and list(login.kernel_jobs()) == [job]
    await asyncio.wait_for(reborn.shutdown_kernel(), BOUND)
    assert login.kernel_jobs() == {}  # the shutdown waited for the job to end


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- waiting is Slurm's queue --------------------------------------------------------------------


async def test_a_start_that_would_wait_is_refused_with_slurms_reason(login: Login) -> None:
    fill(login.cluster)
    name = login.spec("quarter", display="Python 3 (1/4 GPU, Slurm)", gpu_fraction=0.25)
    began = time.monotonic()
    with pytest.raises(VGPUError) as refused:
        await login.start(name)
    summary, advice = str(refused.value).split("\n")  # what happened, then what to do
    assert "Slurm cannot start kernel 'Python 3 (1/4 GPU, Slurm)' now" in summary
    assert "(Resources: no node has the GPU shards free now)" in summary
    assert advice.startswith("What you can do: Wait in Slurm's queue: a kernel installed with `jupyter vgpu kernelspec install --slurm --wait SECONDS`")
    assert time.monotonic() - began < 15
    assert [j["name"] for j in login.kernel_jobs().values()] == ["filler", "filler"]  # its job cancelled


async def test_a_start_right_after_a_shutdown_gets_the_freed_gpu_without_waiting(login: Login) -> None:
    fill(login.cluster, 1)  # one node full
    login.cluster.run("salloc", "--no-shell", "--job-name=filler", "--gres=gpu:1", "--nodes=1", timeout=20)  # and one GPU of the other
    name = login.spec("whole", gpu_fraction=1, wait_timeout=0)
    km = await login.start(name)
    for now in (True, False, True, False):  # the last free GPU, handed from a kernel shut down to one started at once
        job = login.job_of(km)
        await asyncio.wait_for(km.shutdown_kernel(now=now), BOUND)
        km = await login.start(name)  # refused with "Resources" if the cancelled job still held it
        assert login.job_of(km) != job
        assert (await run_code(km, "import os; print(os.environ['SLURM_JOB_ID'])")).strip() == login.job_of(km)


async def test_a_kernel_waits_pending_with_its_reason_and_starts_when_a_job_ends(login: Login) -> None:
    from jupyter_vgpu.launch.slurm.rows import KERNELS

    fillers = fill(login.cluster)
    km_task = asyncio.ensure_future(login.start(login.spec("waits", gpu_fraction=0.25, wait_timeout=60)))
    record = await login.until(lambda: next((k for k in KERNELS.values() if k.reason == "Resources"), None), "a pending kernel")
    assert record.state == "PENDING" and record.position == 1
    assert login.kernel_jobs()[record.job_id]["state"] == "PENDING"
    login.cluster.run("scancel", fillers[0], timeout=10)
    km = await asyncio.wait_for(km_task, BOUND)
    assert (await run_code(km, "import os; print(os.environ['SLURM_JOB_ID'])")).strip() == record.job_id


async def test_a_kernel_that_waits_too_long_gives_up_and_cancels_its_job(login: Login) -> None:
    fill(login.cluster)
    name = login.spec("short", gpu_fraction=0.25, wait_timeout=2)
    with pytest.raises(VGPUError, match=r"waited 2 s in Slurm's queue \(job \d+: Resources: .*\) and gave up; the job is cancelled"):
        await login.start(name)
    assert [j["name"] for j in login.kernel_jobs().values()] == ["filler", "filler"]


# -- bad input: one sentence, in bounded time, nothing left --------------------------------------


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"gpu_fraction": "1/64"}, "gpu_fraction 1/64 is less than one of the 32 shards Slurm splits each GPU into; ask for at least 1/32."),
        ({"gpu_fraction": 0.25, "slurm_args": ["--partition=nowhere"]}, "slurm_args name partition 'nowhere', which Slurm does not have; use one of: gpu."),
        ({"gpu_fraction": 0.25, "slurm_args": ["--time=soon"]}, "Slurm refused the job of kernel 'Python 3 (test, Slurm)': "),
        ({"gpu_memory": "4GiB"}, "gpu_memory 4.0 GiB cannot be asked of Slurm"),
        ({"gpu_fraction": 0.5, "gpus": 2}, "A share of 2 GPUs cannot be asked of Slurm: one job's shards never span GPUs"),
        ({"gpu_fraction": 0.25, "slurm_args": ["--gres=gpu:1"]}, "slurm_args '--gres=gpu:1' asks Slurm for GPUs"),
        ({"gpu_fraction": 0.25, "slurm_args": "--partition=gpu"}, "slurm_args '--partition=gpu' is not allowed; use a list of text, one slurm option each."),
    ],
    ids=["below-one-shard", "unknown-partition", "rejected-time", "memory-unsaid", "share-of-two", "gres-in-args", "args-not-a-list"],
)
async def test_bad_input_is_one_sentence_and_leaves_nothing(login: Login, config: dict[str, object], said: str) -> None:
    name = login.spec("bad", **config)
    began = time.monotonic()
    with pytest.raises(VGPUError) as refused:
        await login.start(name)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value) and "Traceback" not in str(refused.value)
    assert time.monotonic() - began < 15
    assert login.kernel_jobs() == {}
    assert login_ledger_slices() == []


async def test_slurmctld_down_is_one_sentence_within_the_client_timeout(login: Login) -> None:
    name = login.spec("quarter", gpu_fraction=0.25)
    login.cluster.stop_controller()
    began = time.monotonic()
    with pytest.raises(VGPUError, match=r"^Slurm does not answer \(slurmctld at [^)]+:\d+\): "):
        await login.start(name)
    assert time.monotonic() - began < 20
    login.cluster.start_controller()
    assert login.kernel_jobs() == {}


async def test_status_in_an_salloc_shell_on_the_login_node_says_where_the_jobs_gpus_are(login: Login) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_VGPU_SIMULATE"}  # the login node has no GPU
    shown = await asyncio.to_thread(
        subprocess.run, ["salloc", "--gres=shard:8", sys.executable, "-m", "jupyter_vgpu.cli", "status"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    job = re.search(r"Granted job allocation (\d+)", shown.stderr)
    assert job, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert "No GPU: " in flat, flat
    assert re.search(
        rf"This shell is in Slurm job {job.group(1)}'s allocation but not on its node: the job's GPUs or GPU shards are on "
        r"node[12], which srun reaches from here \(srun jupyter vgpu status, srun python train.py\)\.", flat
    ), flat
