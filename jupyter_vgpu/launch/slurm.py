"""``slurm``: a GPU kernel as a Slurm job, on whichever node Slurm places it (DESIGN.md, "Slurm").

A kernelspec with ``"launcher": "slurm"`` (and ``slurm_args``: partition, account, time, QOS)
starts its kernel in two phases, so that it works across hosts:

1. **allocate** (:meth:`SlurmLauncher.allocate`, from the provisioner's ``pre_launch``): ``salloc
   --no-shell`` asks for the slice as GPU shards (fraction x shards per GPU, rounded up) or whole
   GPUs (``gpu:N``), in a job named ``jupyter-vgpu-kernel-<kernel id>``. Slurm's queue is the
   waiting line: with ``wait_timeout`` 0 a job that would wait is cancelled and the start refused
   with Slurm's reason; above 0 the kernel waits, its reason and place shown, and gives up (scancel)
   after ``wait_timeout``. Then learn the node and its address.
2. **launch** (:meth:`SlurmLauncher.launch`): write the connection file with the node's address
   and start the kernel in the allocation (``srun --jobid``) through :mod:`.node`, which gives it
   jupyter-vgpu's normal start inside the job (the job's share is its budget), and learn from
   the node (``job.json``) the ports the kernel listens on: the node replaces any of the login
   node's choice that is taken there.

The login node books nothing in its own ledger (``books_elsewhere``): Slurm is the book. Interrupt
is ``scancel --signal=INT`` (SIGINT to ``srun`` is not forwarded); a restart, forced or not, ends the
step and keeps the job; a kill ends the step (SIGKILL to ``srun`` alone would leave the kernel running)
and a shutdown cancels the job;
a server that starts again cancels its orphans (:func:`.slurmctl.cancel_orphans`).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SliceUnavailable
from ..slices.reports import ENV_REPORTS, read_report_file, report_bytes
from ..units import describe_fraction
from . import slurmctl, slurmending
from .launchers import Launcher
from .node import (
    ENV_ASKED,
    ENV_CONNECTION,
    ENV_CONNECTION_FILE,
    ENV_ENDED,
    ENV_KERNEL,
    ENV_LAUNCH,
    JOB_FILE,
    PORT_NAMES,
)

if TYPE_CHECKING:
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    from ..slices import SliceRequest

#: Seconds between looks at a pending job's reason and place.
PENDING_POLL = 1.0

#: Slurm's pending reasons a user meets most, in words.
REASONS = {
    "Resources": "no node has the GPU shards free now",
    "Priority": "jobs ahead of it come first",
    "QOSMaxGRESPerUser": "your QOS's limit on GPU shares is reached",
    "QOSGrpGRES": "the QOS's GPU shares are all in use",
    "AssocGrpGRES": "your account's GPU shares are all in use",
    "AssocMaxGRESPerJob": "your account allows fewer GPU shares per job",
    "ReqNodeNotAvail": "the nodes it may use are not available",
    "PartitionTimeLimit": "its time limit is above the partition's",
}


#: How Slurm ends a job, in words (``JobState`` of a job that ended).
ENDINGS = {
    "TIMEOUT": "its time limit was reached",
    "PREEMPTED": "it was preempted",
    "CANCELLED": "it was cancelled outside this server (scancel by you or an administrator)",
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "DEADLINE": "its deadline passed",
    "OUT_OF_MEMORY": "it ran out of memory",
    "FAILED": "it failed",
    "COMPLETED": "it completed",
}


def ending_text(job_id: str, state: str, reason: str) -> str:
    """``Slurm ended this kernel's job 12: its time limit was reached (TIMEOUT, TimeLimit).``"""
    if not state:
        return f"Slurm ended this kernel's job {job_id} and no longer remembers why."
    words = ENDINGS.get(state, state.lower())
    said = state + (f", {reason}" if reason not in ("", "None") else "")
    return f"Slurm ended this kernel's job {job_id}: {words} ({said})."


def reason_text(reason: str) -> str:
    words = REASONS.get(reason)
    return f"{reason}: {words}" if words else reason


def share_text(shards: int | None, per_gpu: int | None, whole: int | None, fraction: float | None) -> str:
    """What a kernel's job holds, as every view says it: ``8/32 shards (1/4 GPU)``, ``2 GPUs``."""
    if shards:
        text = f"{shards}/{per_gpu} shards" if per_gpu else f"{shards} shards"
        return text + (f" ({describe_fraction(fraction)} GPU)" if fraction else "")
    count = whole or 1
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


@dataclass
class SlurmKernel:
    """One kernel of this process in Slurm: what the views show."""

    kernel_id: str
    asked: slurmctl.Ask
    labels: dict[str, str]
    job_id: str | None = None
    state: str = "PENDING"
    reason: str = ""
    position: int | None = None
    node: str | None = None
    gpus: list[int] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    #: Why Slurm ended the job of the kernel this one replaced (a restart in a new job).
    ended: str | None = None
    #: Its user took it out of Slurm's queue (:func:`cancel_waiting`): its start says so.
    cancelled: bool = False


#: This process's Slurm kernels by kernel id (the server's views list them).
KERNELS: dict[str, SlurmKernel] = {}


def report_root() -> Path:
    """Where Slurm kernels write their reports for the login node: a per-user folder under the
    Jupyter data dir (the home, which a cluster's nodes share)."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "vgpu" / "slurm"


def report_folder_of(kernel_id: str) -> Path:
    return report_root() / re.sub(r"[^A-Za-z0-9_.-]", "_", kernel_id)


def kernel_report(kernel_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(``job.json``, the kernel's slice report) from the kernel's reports folder."""
    folder = report_folder_of(kernel_id)
    job = read_report_file(folder / JOB_FILE) or {}
    slice_id = job.get("slice_id")
    report = read_report_file(folder / f"{slice_id}.json") if isinstance(slice_id, str) else None
    return job, report


def job_row(job: slurmctl.KernelJob, record: SlurmKernel | None = None) -> dict[str, Any]:
    """A kernel job as the views show it (REST ``/api/vgpu/slices`` and ``jupyter vgpu status``):
    the slice fields a row of the slice view has, plus ``job_id``, ``node``, ``partition``,
    ``slurm_state``, ``slurm_reason`` (and ``slurm_reason_text``, in words), ``position``,
    ``shards``, ``shards_per_gpu`` and ``share_text``; ``memory_reserved`` is the job's budget on
    its GPU once the kernel has said it from its node (else None)."""
    facts, report = kernel_report(job.kernel_id)
    shards = job.shards
    noted = job.starter.get("per_gpu", "")
    per_gpu = record.asked.per_gpu if record else (int(noted) if noted.isdigit() else None)
    whole = job.whole_gpus
    fraction = (shards / per_gpu) if shards and per_gpu else (1.0 if whole else (record.asked.fraction if record else None))
    gpus = record.gpus if record and record.gpus else [int(g) for g in str(facts.get("gpus") or "").split(",") if g.isdigit()]
    node = job.node or (record.node if record else None) or None
    used = report_bytes(report.get("memory_used")) if report else None
    asked = record.asked.text if record else (f"{shards} shards" if shards else f"{whole or '?'} GPU")
    reason = None if job.reason in ("", "None") else job.reason
    return {
        "id": f"slurm-{job.job_id}",
        "kernel_id": job.kernel_id,
        "holder_kind": "kernel",
        "job_id": job.job_id,
        "node": node,
        "gpus": [f"slurm:{node}:{i}" for i in gpus] if node else [],
        "gpu_indices": gpus,
        "fraction": fraction,
        "shards": shards,
        "shards_per_gpu": per_gpu,
        "share_text": share_text(shards, per_gpu, whole, fraction),
        "request_text": asked,
        "partition": job.partition or None,
        "slurm_state": job.state,
        "slurm_reason": reason,
        "slurm_reason_text": REASONS.get(reason) if reason else None,
        "position": job.position,
        "state": "running" if job.state == "RUNNING" else job.state.lower(),
        "memory_used": used,
        "memory_reserved": report_bytes(facts.get("memory")),
        "usage_source": "reported" if used is not None else "none",
        "frameworks": (report or {}).get("frameworks") or {},
        "tier": f"Slurm job {job.job_id}" + (f" on {node}" if node else "") + " (shards fence nothing: cooperative limits)",
        "labels": dict(record.labels) if record else {},
        "created": record.created if record else None,
        "slurm_ended": record.ended if record else None,
        "unfenced": facts.get("unfenced") if isinstance(facts.get("unfenced"), str) else None,
    }


def user_rows(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """This user's kernel jobs, for ``jupyter vgpu status`` on a login node."""
    return [job_row(job) for job in slurmctl.kernel_jobs(env)]


class Unlisted(slurmctl.SlurmDown):
    """``squeue`` did not answer: ``rows`` are this process's kernel jobs as it last knew them."""

    def __init__(self, message: str, rows: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.rows = rows


def _remembered(record: SlurmKernel) -> slurmctl.KernelJob:
    """A kernel job of this process as it was last seen (when Slurm cannot list it now)."""
    assert record.job_id is not None
    return slurmctl.KernelJob(record.job_id, record.kernel_id, record.state, record.reason, record.node or "", record.asked.gres, "", "")


def _with_ending(row: dict[str, Any]) -> dict[str, Any]:
    """``ending``: why a job this process shut down still runs (one sentence), else None."""
    ending = slurmending.ENDING.get(str(row["job_id"]))
    row["ending"] = slurmending.ending_text(ending) if ending is not None else None
    return row


def server_rows(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The user's kernel jobs with this process's first (one ``squeue``), a job whose kernel was
    shut down but whose cancel Slurm has not confirmed marked ``ending``; [] without a Slurm kernel
    here, at no cost. When Slurm does not answer, :class:`Unlisted` carries this process's jobs as
    last seen. Blocking: call it off the event loop."""
    if not KERNELS and not slurmending.ENDING:
        return []
    try:
        jobs = slurmctl.kernel_jobs(env)
    except slurmctl.SlurmDown as error:
        records = [r for r in KERNELS.values() if r.job_id]
        records += [e.record for e in slurmending.ENDING.values()]
        raise Unlisted(str(error), [_with_ending(job_row(_remembered(r), r)) for r in records]) from None
    ending = {e.job_id: e.record for e in slurmending.ENDING.values()}
    for job in jobs:
        record = KERNELS.get(job.kernel_id)
        if record is not None and job.job_id == record.job_id:
            record.state, record.reason = job.state, job.reason
            record.position, record.node = job.position, job.node or record.node

    def ours(job: slurmctl.KernelJob) -> bool:
        return job.kernel_id in KERNELS or job.job_id in ending

    return [_with_ending(job_row(j, KERNELS.get(j.kernel_id) or ending.get(j.job_id))) for j in sorted(jobs, key=lambda j: not ours(j))]


def cancel_waiting(job_id: str, env: Mapping[str, str]) -> bool:
    """Take a kernel of this process out of Slurm's queue (``scancel`` its pending job): its start
    then fails, saying it stopped waiting. False when no kernel of this process waits in that job.
    Blocking: call it off the event loop."""
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


class SlurmLauncher(Launcher):
    """The kernel is a step of its own Slurm job on a node Slurm picks."""

    name = "slurm"
    description = "a Slurm job on a GPU node Slurm picks (salloc, then srun --jobid)"
    books_elsewhere = True

    # -- phase 1: the allocation ------------------------------------------------------------
    async def allocate(self, provisioner: LocalProvisioner, request: SliceRequest, env: dict[str, str]) -> None:
        state = _state(provisioner)
        kernel_id = str(provisioner.kernel_id)
        ended = None
        if state.get("job_id"):  # a restart: the kernel keeps its job while Slurm runs it
            job_state, why = await asyncio.to_thread(slurmctl.job_state, state["job_id"], env)
            if job_state == "RUNNING":
                state.pop("ended", None)
                state.pop("slurm_ended", None)  # said once, by the kernel that replaced the ended one
                return
            ended = state.get("slurm_ended") or ending_text(state["job_id"], job_state, why)
            provisioner.log.warning("Kernel %s: %s A new job is asked for.", kernel_id, ended)
            state.clear()
        slurm_args = list(getattr(provisioner, "slurm_args", None) or ())
        per_gpu = None
        if request.memory is not None or (request.fraction or 1.0) < 1:
            per_gpu = await asyncio.to_thread(slurmctl.shards_per_gpu, slurmctl.partition_of(slurm_args), env)
        asked = slurmctl.ask_for(
            request.fraction, request.memory, request.gpus, per_gpu=per_gpu, gpu_memory=getattr(provisioner, "slurm_gpu_memory", None)
        )
        provisioner.log.info("Kernel %s asks Slurm for %s.", kernel_id, asked.text)
        labels = {k: v for k, v in (getattr(provisioner, "_start_labels", None) or {}).items()}
        record = KERNELS[kernel_id] = SlurmKernel(kernel_id, asked, labels, ended=ended)
        try:
            record.job_id = await self._salloc(provisioner, asked, slurm_args, env, record)
            state["job_id"] = record.job_id
            node, address, gpus = await asyncio.to_thread(slurmctl.placement, record.job_id, env)
        except BaseException:
            KERNELS.pop(kernel_id, None)
            if record.job_id:
                await asyncio.to_thread(slurmctl.cancel, record.job_id, env)
            state.clear()
            raise
        record.state, record.reason, record.position, record.node, record.gpus = "RUNNING", "", None, node, gpus
        state.update(node=node, address=address, gpus=gpus, asked=asked.text)
        if ended:
            state["slurm_ended"] = f"{ended} This kernel was restarted in job {record.job_id}: variables were lost."
            record.ended = state["slurm_ended"]
        on = ", ".join(map(str, gpus)) or "?"
        provisioner.log.info("Kernel %s runs in Slurm job %s on node %s (GPU %s, %s).", kernel_id, record.job_id, node, on, asked.text)

    async def _salloc(
        self, provisioner: LocalProvisioner, asked: slurmctl.Ask, slurm_args: list[str], env: dict[str, str], record: SlurmKernel
    ) -> str:
        """Submit the allocation and wait for Slurm to grant it; the job id."""
        salloc = shutil.which("salloc", path=env.get("PATH")) or "salloc"
        argv = [
            salloc, "--no-shell", f"--job-name={slurmctl.job_name(record.kernel_id)}", f"--comment={slurmctl.starter_comment(per_gpu=asked.per_gpu)}",
            f"--gres={asked.gres}", "--nodes=1", "--ntasks=1", *slurm_args,
        ]  # fmt: skip
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env
            )
        except FileNotFoundError:
            raise slurmctl.SlurmDown("Slurm's salloc is not installed on this host; install Slurm's client commands here.") from None
        assert process.stderr is not None
        wait = float(getattr(provisioner, "wait_timeout", 0) or 0)
        began = time.monotonic()
        said: list[str] = []
        told = False
        try:
            while True:
                try:
                    line = await asyncio.wait_for(process.stderr.readline(), PENDING_POLL)
                except asyncio.TimeoutError:
                    line = None
                if line == b"":
                    break  # salloc ended: refused, or granted (--no-shell)
                if line:
                    text = line.decode(errors="replace").strip()
                    said.append(text)
                    found = re.search(r"(Pending|Granted) job allocation (\d+)", text)
                    if found:
                        record.job_id = found.group(2)
                        if found.group(1) == "Granted":
                            break
                        if wait <= 0:
                            raise await self._refuse_now(provisioner, record, env)
                if record.job_id is None:
                    if time.monotonic() - began > slurmctl.client_timeout():
                        raise slurmctl.down(env, f"salloc got no job id within {slurmctl.client_timeout():.0f} s")
                    continue
                await self._pending(provisioner, record, env, announce=not told)
                told = True
                if time.monotonic() - began > wait:
                    reason = reason_text(record.reason) if record.reason else "pending"
                    raise SliceUnavailable(
                        f"Kernel '{record.labels.get('kernel_display_name', record.kernel_id)}' waited {wait:g} s in Slurm's "
                        f"queue (job {record.job_id}: {reason}) and gave up; the job is cancelled."
                    )
            rest = await asyncio.wait_for(process.stderr.read(), slurmctl.client_timeout())
            said += rest.decode(errors="replace").splitlines()
            code = await asyncio.wait_for(process.wait(), slurmctl.client_timeout())
        except BaseException:
            _end(process)
            raise
        if record.cancelled:
            from ..errors import LeftLine

            raise LeftLine(
                f"Stopped waiting in Slurm's queue after {time.monotonic() - began:.0f} s: "
                f"job {record.job_id} ({asked.text}) was cancelled."
            )
        if record.job_id is None or code != 0:
            message = slurmctl.said("\n".join(said)) or f"salloc exited with status {code}"
            if any(mark in message for mark in slurmctl._DOWN):
                raise slurmctl.down(env, message)
            from ..errors import InvalidRequest

            raise InvalidRequest(f"Slurm refused the job of kernel '{record.labels.get('kernel_display_name', record.kernel_id)}': {message} (slurm_args {' '.join(slurm_args) or 'none'}).")
        if told:
            provisioner.log.info("Kernel %s left Slurm's queue after %.0f s: job %s runs.", record.kernel_id, time.monotonic() - began, record.job_id)
        return record.job_id

    async def _pending(self, provisioner: LocalProvisioner, record: SlurmKernel, env: dict[str, str], *, announce: bool) -> None:
        assert record.job_id is not None
        jobs = await asyncio.to_thread(slurmctl.kernel_jobs, env, job_ids=[record.job_id])
        for job in jobs:
            record.state, record.reason, record.position = job.state, job.reason, job.position
        if announce:
            provisioner.log.info(
                "Kernel %s waits in Slurm's queue: job %s pending (%s), place %s.",
                record.kernel_id, record.job_id, reason_text(record.reason or "None"), record.position or "?",
            )  # fmt: skip

    async def _refuse_now(self, provisioner: LocalProvisioner, record: SlurmKernel, env: dict[str, str]) -> SliceUnavailable:
        """wait_timeout 0 and Slurm would keep the job waiting: cancel it, with Slurm's reason."""
        assert record.job_id is not None
        for _ in range(10):  # the scheduler names its reason within moments of the submission
            await self._pending(provisioner, record, env, announce=False)
            if record.reason not in ("", "None"):
                break
            await asyncio.sleep(0.1)
        await asyncio.to_thread(slurmctl.cancel, record.job_id, env)
        name = record.labels.get("kernel_display_name", record.kernel_id)
        return SliceUnavailable(
            f"Slurm cannot start kernel '{name}' now: its job {record.job_id} would wait ({reason_text(record.reason or 'pending')}), "
            "and this kernel does not wait (wait_timeout 0); the job is cancelled."
        )

    # -- phase 2: the kernel in the allocation ----------------------------------------------
    async def launch(self, provisioner: LocalProvisioner, cmd: list[str], **kwargs: Any) -> Any:
        from jupyter_client.connect import write_connection_file
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        state = _state(provisioner)
        kernel_id = str(provisioner.kernel_id)
        info: dict[str, Any] = dict(provisioner.connection_info)
        info["ip"] = state["address"]  # the kernel listens on its node's address, which this host reaches
        km = provisioner.parent
        env = dict(kwargs.get("env") or os.environ)
        if km is not None and getattr(km, "connection_file", None):
            fields: dict[str, Any] = {k: info[k] for k in ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port", "ip", "key", "transport", "signature_scheme", "kernel_name") if k in info}
            Path(km.connection_file).unlink(missing_ok=True)
            write_connection_file(km.connection_file, **fields)
            km.ip = state["address"]
            env[ENV_CONNECTION_FILE] = km.connection_file
            env[ENV_CONNECTION] = Path(km.connection_file).read_text()
        provisioner.connection_info = info  # type: ignore[assignment]
        folder = report_folder_of(kernel_id)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        env.update({ENV_KERNEL: kernel_id, ENV_REPORTS: str(folder), ENV_ASKED: str(state.get("asked", ""))})
        if state.get("slurm_ended"):
            env[ENV_ENDED] = state["slurm_ended"]
        launch = env[ENV_LAUNCH] = uuid.uuid4().hex
        srun = shutil.which("srun", path=env.get("PATH")) or "srun"
        argv = [
            srun, f"--jobid={state['job_id']}", "--nodes=1", "--ntasks=1", "--input=none", "--kill-on-bad-exit=1",
            sys.executable, "-m", "jupyter_vgpu.launch.node", "--", *cmd,
        ]  # fmt: skip
        kwargs["env"] = env
        await LocalProvisioner.launch_kernel(provisioner, argv, **kwargs)
        ports = await self._ports_on_node(provisioner, folder, launch)
        moved = {name: port for name, port in ports.items() if info.get(name) != port}
        if moved:
            provisioner.log.info(
                "Kernel %s listens on other ports than this host chose (taken on %s): %s.",
                kernel_id, state.get("node"), ", ".join(f"{name} {port}" for name, port in moved.items()),
            )  # fmt: skip
            info.update(moved)
            provisioner.connection_info = info  # type: ignore[assignment]
            if km is not None:  # its clients connect there (and it writes the file where the node's is not shared)
                for name, port in moved.items():
                    setattr(km, name, port)
        return provisioner.connection_info

    async def _ports_on_node(self, provisioner: LocalProvisioner, folder: Path, launch: str) -> dict[str, int]:
        """The ports the node said the kernel listens on (``job.json`` of this launch); {} if the
        step ended first or the node said nothing within the client timeout (the login node's
        choice then stands)."""
        bound = max(30.0, slurmctl.client_timeout())
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            job = await asyncio.to_thread(read_report_file, folder / JOB_FILE)
            if job and job.get("launch") == launch:
                if job.get("refused"):
                    from ..errors import InvalidConfig

                    raise InvalidConfig(f"Kernel {provisioner.kernel_id} was not started on {job.get('node') or 'its node'}: {job['refused']}")
                ports = job.get("ports") or {}
                return {name: int(ports[name]) for name in PORT_NAMES if isinstance(ports.get(name), int) and 0 < ports[name] < 65536}
            process = getattr(provisioner, "process", None)
            if process is not None and process.poll() is not None:
                return {}  # the step ended: jupyter_client sees the kernel die
            await asyncio.sleep(0.05)
        provisioner.log.warning(
            "Kernel %s: its node did not say its ports within %.0f s (is %s shared with the node?); the ports chosen here stand.",
            provisioner.kernel_id, bound, folder,
        )  # fmt: skip
        return {}

    # -- the kernel's life ------------------------------------------------------------------
    async def send_signal(self, provisioner: LocalProvisioner, signum: int) -> None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        job = _state(provisioner).get("job_id")
        if job and signum not in (0, signal.SIGKILL, signal.SIGTERM):
            # srun forwards no SIGINT to the kernel: Slurm signals the job's steps itself
            try:
                await asyncio.to_thread(slurmctl.cancel, job, _env(provisioner), signal=str(signum))
            except slurmctl.SlurmDown as error:  # a shutdown goes on: its cancel is retried (slurmending)
                provisioner.log.warning("Kernel %s: signal %s not sent: %s", provisioner.kernel_id, signum, error)
            return
        await LocalProvisioner.send_signal(provisioner, signum)

    async def kill(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        if job := _state(provisioner).get("job_id"):
            # SIGKILL to srun would leave the kernel running under slurmstepd: Slurm kills the
            # kernel's step. The job stays (Slurm takes SIGKILL to a job as its cancel): a forced
            # restart keeps its place on the node (jupyter_client says restart=False then too),
            # and a shutdown's cleanup cancels it.
            try:
                await asyncio.to_thread(slurmctl.kill_steps, job, _env(provisioner))
            except slurmctl.SlurmDown as error:  # its step ends with its job, whose cancel is retried
                provisioner.log.warning("Kernel %s: its step in job %s is not ended: %s", provisioner.kernel_id, job, error)
        await LocalProvisioner.kill(provisioner, restart=restart)

    async def terminate(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        await LocalProvisioner.terminate(provisioner, restart=restart)  # SIGTERM to srun ends the step

    async def poll(self, provisioner: LocalProvisioner) -> int | None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        state = _state(provisioner)
        # A server started again (load_provisioner_info): its srun is another process's child.
        # The kernel lives while its step runs in the job.
        orphaned = getattr(provisioner, "process", None) is None and state.get("job_id") and not state.get("ended")
        if orphaned and await asyncio.to_thread(slurmctl.has_step, state["job_id"], _env(provisioner)):
            return None
        status: int | None = await LocalProvisioner.poll(provisioner)
        if status is not None and state.get("job_id") and not state.get("ended"):
            job_state, why = await asyncio.to_thread(slurmctl.job_state, state["job_id"], _env(provisioner))
            if job_state not in ("RUNNING", "COMPLETING", ""):
                state["ended"] = f"{job_state.lower()}{f': {why}' if why not in ('', 'None') else ''}"
                state["slurm_ended"] = ending_text(state["job_id"], job_state, why)
                provisioner.log.warning("Kernel %s ended: %s", provisioner.kernel_id, state["slurm_ended"])
        return status

    def has_kernel(self, provisioner: LocalProvisioner) -> bool:
        """Also a kernel this process did not start (a server started again): its job."""
        state = _state(provisioner)
        return provisioner.process is not None or bool(state.get("job_id") and not state.get("ended"))

    async def cleanup(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        if restart:
            return
        state = _state(provisioner)
        kernel_id = str(provisioner.kernel_id)
        record = KERNELS.pop(kernel_id, None)
        if job := state.get("job_id"):
            env = _env(provisioner)
            try:
                await asyncio.to_thread(slurmctl.cancel, job, env, confirm=True)
            except slurmctl.SlurmDown as error:
                # The job keeps its shards until Slurm cancels it: retried until Slurm confirms
                # it, and shown as ending meanwhile (slurmending).
                provisioner.log.warning("Kernel %s: %s Its job %s is cancelled once Slurm answers.", kernel_id, error, job)
                slurmending.hand_over(job, kernel_id, record or _record_of(kernel_id, state), str(error))
                state.clear()
                await asyncio.to_thread(shutil.rmtree, report_folder_of(kernel_id), True)
                return
            # The job keeps its shards until its steps have ended: a start right after this
            # shutdown would otherwise be refused ("Resources") for shards that are being freed.
            if not await asyncio.to_thread(slurmctl.wait_gone, job, env, timeout=slurmctl.client_timeout()):
                provisioner.log.warning("Kernel %s: Slurm job %s is still ending %.0f s after its cancel.", kernel_id, job, slurmctl.client_timeout())
        state.clear()
        await asyncio.to_thread(shutil.rmtree, report_folder_of(kernel_id), True)

    def alive(self, pid: int | None, start: float | None = None, stamp: str | None = None) -> bool:
        from ..slices.holders import process_alive

        return process_alive(pid, start, stamp)  # srun, on this host

    def report_folder(self, ledger_path: str | Path, labels: Mapping[str, str]) -> Path:
        return report_root()


def _record_of(kernel_id: str, state: Mapping[str, Any]) -> SlurmKernel:
    """What the views show of a kernel this process did not start (a server started again)."""
    asked = slurmctl.Ask("", None, None, 1, 1.0, str(state.get("asked") or "?"))
    record = SlurmKernel(kernel_id, asked, {}, job_id=str(state["job_id"]), state="RUNNING", node=state.get("node"))
    record.gpus = list(state.get("gpus") or [])
    return record


def _state(provisioner: Any) -> dict[str, Any]:
    """What this launcher keeps of one kernel (saved with the kernel by the provisioner)."""
    state: dict[str, Any] = provisioner.launch_state
    return state


def _env(provisioner: Any) -> dict[str, str]:
    return dict(os.environ)


def _end(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        try:
            process.terminate()  # salloc cancels the job it waits for
        except ProcessLookupError:
            pass


def job_summary(row: Mapping[str, Any]) -> str:
    """``Slurm job 12 on node1: running, 8/32 shards`` or ``Slurm job 13: pending (Resources), place 1``."""
    text = f"Slurm job {row['job_id']}"
    if row.get("node") and row.get("slurm_state") == "RUNNING":
        text += f" on {row['node']}"
    if row.get("slurm_state") == "PENDING":
        text += f": pending ({row.get('slurm_reason') or 'None'})"
        if row.get("position"):
            text += f", place {row['position']}"
    return text



