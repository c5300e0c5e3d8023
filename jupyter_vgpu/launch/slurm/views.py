"""How the ``slurm`` launcher's kernels are seen (the view side of the launcher contract,
:class:`~jupyter_vgpu.launch.launchers.Launcher`): this server's kernel jobs as rows, the user's for
``jupyter vgpu status``, a pending job taken out of Slurm's queue, the orphans a restarted server
cancels, and its settings checked (``salloc`` options, restarts, the partition's GPU memory). The rows' words are :mod:`.rows`."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import InvalidRequest, LeftLine, VGPUError
from ...units import parse_bytes, shorten
from ..elsewhere import Elsewhere
from . import client as slurmctl
from . import ending as slurmending
from .rows import KERNELS, RUNS, TITLE, report_folder_of, report_root, server_rows, user_rows

#: A row's id, and a pending one's ticket: ``slurm-<job id>``.
PREFIX = "slurm-"


class SlurmViews:
    """The view side of :class:`~.launcher.SlurmLauncher`."""

    title = TITLE
    runs = RUNS
    option = "slurm"
    option_help = "start each kernel as a Slurm job on a GPU node Slurm picks (launcher slurm)"
    options_help = "an salloc option for the kernels' jobs (partition, account, time, QOS), once per option: --slurm-arg=--partition=gpu"
    counts: tuple[tuple[str, str], ...] = (
        (
            "restarts",
            "how many times a kernel whose job Slurm ended (its time limit, a cancel, a preemption) is started again "
            "in a new job (default 0: never, and its notebook is told why)",
        ),
    )
    more_settings: tuple[tuple[str, str], ...] = (
        ("gpu_memory", "the memory of one GPU of the partition, such as 16GiB, so that a kernel asking for gpu_memory is asked of Slurm as shards"),
    )
    label = "Slurm"

    def rows(self, env: Mapping[str, str]) -> list[Elsewhere]:
        return server_rows(env)

    def user_rows(self, env: Mapping[str, str]) -> tuple[list[Elsewhere], str | None]:
        """Where this user has started kernels as Slurm jobs from this host (their reports folder
        exists) and outside a job; elsewhere nothing is asked of Slurm."""
        if env.get("SLURM_JOB_ID") or not shutil.which("squeue") or not report_root().is_dir():
            return [], None
        try:
            return user_rows(env), None
        except VGPUError as error:
            return [], str(error)

    async def leave_line(self, row_id: str, env: Mapping[str, str]) -> bool | None:
        import asyncio

        if not row_id.startswith(PREFIX):
            return None
        job = row_id[len(PREFIX) :]
        if not (job.isascii() and job.isdigit()) or len(job) > 18:
            raise InvalidRequest(f"{shorten(row_id)} is not a place in line; GET /api/vgpu/slices lists them.")
        if not await asyncio.to_thread(cancel_waiting, job, dict(env)):
            raise LeftLine(f"No kernel of this server waits in Slurm's queue in job {job}, nor is its job ending; it may have started or left.")
        return True

    def clean_up(self, env: Mapping[str, str]) -> list[str]:
        """Cancel this user's kernel jobs that a server or kernel manager of this host started and
        that has gone (crashed, killed, restarted): nobody owns them any more. Another running
        server's jobs are its own."""
        said = []
        for job in slurmctl.cancel_orphans(env):
            shutil.rmtree(report_folder_of(job.kernel_id), ignore_errors=True)  # a server killed outright left it
            said.append(f"cancelled Slurm job {job.job_id} of kernel {job.kernel_id}, whose server has gone")
        return said + sweep_reports(env)

    def check_options(self, options: Sequence[str]) -> list[str]:
        return list(slurmctl.check_args(list(options)))

    def check_setting(self, key: str, value: Any) -> Any:
        """``gpu_memory`` (the admin's, usually: ``c.VGPUProvisioner.launcher_settings``), in bytes."""
        if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, int) and value < 1):
            raise InvalidRequest(f"slurm_{key} {shorten(value)} is not allowed; use a size such as 16GiB.")
        return parse_bytes(value, what=f"slurm_{key}")


def sweep_reports(env: Mapping[str, str]) -> list[str]:
    """Remove the reports folders whose kernel's job (``job.json``) Slurm no longer lists: what a
    server killed outright left. A folder without ``job.json`` may be a start under way: kept."""
    from ...slices.reports import read_report_file
    from .names import JOB_FILE

    try:
        folders = [f for f in report_root().iterdir() if f.is_dir() and not f.is_symlink()]
    except OSError:
        return []
    if not folders:
        return []
    listed = {job.job_id for job in slurmctl.kernel_jobs(env)}
    said = []
    for folder in folders:
        job = read_report_file(folder / JOB_FILE) or {}
        if isinstance(job.get("job_id"), str) and job["job_id"] not in listed:
            shutil.rmtree(folder, ignore_errors=True)
            said.append(f"removed the reports folder of kernel {folder.name}, whose Slurm job {job['job_id']} has ended")
    return said


def cancel_waiting(job_id: str, env: Mapping[str, str]) -> bool:
    """Take a kernel of this process out of Slurm's queue (``scancel`` its pending job): its start
    then fails, saying it stopped waiting. A job this process shut down whose cancel Slurm has not
    confirmed (:mod:`.ending`) is cancelled again at once: SlurmDown, in one sentence, while
    Slurm does not answer. False when no kernel of this process waits in that job, nor is it
    ending. Blocking: call it off the event loop."""
    record = next((k for k in KERNELS.values() if k.job_id == job_id and k.state == "PENDING"), None)
    if record is None:  # a job this process shut down that Slurm has not confirmed ended: try again now
        confirmed = slurmending.cancel_now(job_id, dict(env))
        if confirmed is False:
            raise slurmctl.down(
                env, f"job {job_id} is not cancelled yet; it stays listed as ending and its cancel is tried again every {slurmending.RETRY:g} s"
            )
        return bool(confirmed)
    record.cancelled = True
    slurmctl.cancel(job_id, env)
    return True


__all__ = ["PREFIX", "SlurmViews", "cancel_waiting"]
