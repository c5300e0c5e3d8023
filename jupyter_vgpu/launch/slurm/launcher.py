"""``slurm``: a GPU kernel as a Slurm job, on whichever node Slurm places it (DESIGN.md, "Slurm").

A kernelspec with ``"launcher": "slurm"`` (and ``"slurm": {"args": [...]}``: partition, account, time, QOS)
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
a server that starts again cancels its orphans (:func:`.client.cancel_orphans`), and a cancel
Slurm did not confirm is retried until it does (:mod:`.ending`). How its kernels are seen
(their records and rows for the views) is :mod:`.rows`.
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import SliceUnavailable
from ...slices.reports import ENV_REPORTS, read_report_file
from ..launchers import Launcher
from ..refusals import refusals_of
from . import client as slurmctl
from . import ending as slurmending
from .names import (
    ENV_ASKED,
    ENV_CONNECTION,
    ENV_CONNECTION_FILE,
    ENV_ENDED,
    ENV_KERNEL,
    ENV_LAUNCH,
    JOB_FILE,
    PORT_NAMES,
)
from .rows import (
    KERNELS,
    SlurmKernel,
    ended_summary,
    ending_text,
    placed_text,
    reason_text,
    refusal_advice,
    report_folder_of,
    report_root,
)
from .views import SlurmViews

if TYPE_CHECKING:
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    from ...slices import Slice, SliceRequest

#: Seconds between looks at a pending job's reason and place.
PENDING_POLL = 1.0

class SlurmLauncher(SlurmViews, Launcher):
    """The kernel is a step of its own Slurm job on a node Slurm picks; how its kernels are seen is
    :class:`~.views.SlurmViews`."""

    name = "slurm"
    description = "a Slurm job on a GPU node Slurm picks (salloc, then srun --jobid)"
    books_elsewhere = True

    # -- phase 1: the allocation ------------------------------------------------------------
    async def allocate(self, provisioner: LocalProvisioner, request: SliceRequest, env: dict[str, str]) -> None:
        state = _state(provisioner)
        kernel_id = str(provisioner.kernel_id)
        ended = None if state.get("job_id") else state.get("slurm_ended")  # set: an earlier restart got no job
        if state.get("job_id"):  # a restart: the kernel keeps its job while Slurm runs it
            job_state, why = await asyncio.to_thread(slurmctl.final_state, state["job_id"], env)  # how it ended, once Slurm says
            if job_state == "RUNNING":
                state.pop("ended", None)
                state.pop("slurm_ended", None)  # said once, by the kernel that replaced the ended one
                return
            ended = state.get("slurm_ended") or ending_text(state["job_id"], job_state, why)
            asked_again, allowed = int(state.get("new_jobs") or 0), self.settings(provisioner).count("restarts")
            if asked_again >= allowed:
                raise _no_new_job(provisioner, ended, allowed)
            provisioner.log.warning("Kernel %s: %s A new job is asked for (%d of slurm_restarts %d).", kernel_id, ended, asked_again + 1, allowed)
            state.clear()
            state["new_jobs"] = asked_again + 1
        slurm_args = list(self.settings(provisioner).args)
        per_gpu = None
        if request.memory is not None or (request.fraction or 1.0) < 1:
            per_gpu = await asyncio.to_thread(slurmctl.shards_per_gpu, slurmctl.partition_of(slurm_args), env)
        asked = slurmctl.ask_for(
            request.fraction, request.memory, request.gpus, per_gpu=per_gpu, gpu_memory=self.settings(provisioner).more.get("gpu_memory")
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
            counted = state.get("new_jobs")
            state.clear()
            if counted:  # a restart that got no job still counts the new jobs asked before, and why
                state.update(new_jobs=counted, slurm_ended=ended)
            raise
        record.state, record.reason, record.position, record.node, record.gpus = "RUNNING", "", None, node, gpus
        state.update(node=node, address=address, gpus=gpus, asked=asked.text)
        if ended:
            state["slurm_ended"] = f"{ended} This kernel was restarted in job {record.job_id}: variables were lost."
            record.ended = state["slurm_ended"]
        provisioner.log.info("Kernel %s runs in %s.", kernel_id, placed_text(record.job_id, node, gpus, asked.text))

    async def _salloc(
        self, provisioner: LocalProvisioner, asked: slurmctl.Ask, slurm_args: list[str], env: dict[str, str], record: SlurmKernel
    ) -> str:
        """Submit the allocation and wait for Slurm to grant it; the job id."""
        salloc = shutil.which("salloc", path=env.get("PATH")) or "salloc"
        argv = [
            salloc, "--no-shell", f"--job-name={slurmctl.job_name(record.kernel_id, record.labels.get('path'))}",
            f"--comment={slurmctl.starter_comment(per_gpu=asked.per_gpu, notebook=record.labels.get('path'))}",
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
                            raise await self._refuse_now(provisioner, record, env, slurm_args)
                if record.job_id is None:
                    if time.monotonic() - began > slurmctl.client_timeout():
                        raise slurmctl.down(env, f"salloc got no job id within {slurmctl.client_timeout():.0f} s")
                    continue
                await self._pending(provisioner, record, env, announce=not told)
                told = True
                if time.monotonic() - began > wait:
                    reason = reason_text(record.reason) if record.reason else "pending"
                    raise _refusal(
                        f"Kernel '{record.labels.get('kernel_display_name', record.kernel_id)}' waited {wait:g} s in Slurm's "
                        f"queue (job {record.job_id}: {reason}) and gave up; the job is cancelled.",
                        record, slurm_args, waited=wait,
                    )  # fmt: skip
            rest = await asyncio.wait_for(process.stderr.read(), slurmctl.client_timeout())
            said += rest.decode(errors="replace").splitlines()
            code = await asyncio.wait_for(process.wait(), slurmctl.client_timeout())
        except BaseException:
            _end(process)
            raise
        if record.cancelled:
            from ...errors import LeftLine

            raise LeftLine(
                f"Stopped waiting in Slurm's queue after {time.monotonic() - began:.0f} s: "
                f"job {record.job_id} ({asked.text}) was cancelled."
            )
        if record.job_id is None or code != 0:
            message = slurmctl.said("\n".join(said)) or f"salloc exited with status {code}"
            if any(mark in message for mark in slurmctl._DOWN):
                raise slurmctl.down(env, message)
            from ...errors import InvalidRequest

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

    async def _refuse_now(self, provisioner: LocalProvisioner, record: SlurmKernel, env: dict[str, str], slurm_args: list[str]) -> SliceUnavailable:
        """wait_timeout 0 and Slurm would keep the job waiting: cancel it, with Slurm's reason."""
        assert record.job_id is not None
        for _ in range(10):  # the scheduler names its reason within moments of the submission
            await self._pending(provisioner, record, env, announce=False)
            if record.reason not in ("", "None"):
                break
            await asyncio.sleep(0.1)
        await asyncio.to_thread(slurmctl.cancel, record.job_id, env)
        name = record.labels.get("kernel_display_name", record.kernel_id)
        return _refusal(
            f"Slurm cannot start kernel '{name}' now: its job {record.job_id} would wait ({reason_text(record.reason or 'pending')}), "
            "and this kernel does not wait in Slurm's queue; the job is cancelled.",
            record, slurm_args, waited=None,
        )  # fmt: skip

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
            sys.executable, "-m", "jupyter_vgpu.launch.slurm.node", "--", *cmd,
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
                    from ...errors import InvalidConfig

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
            except slurmctl.SlurmDown as error:  # a shutdown goes on: its cancel is retried (launch.slurm.ending)
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
            try:
                job_state, why = await asyncio.to_thread(slurmctl.final_state, state["job_id"], _env(provisioner))
            except slurmctl.SlurmDown:
                # srun ended: it is reaped now (jupyter_client's wait), or it stays a zombie under the
                # server (hardening round five, L-2). How its job ended is asked again at the next poll.
                return status
            if job_state != "RUNNING":
                state["ended"] = f"{(job_state or 'gone').lower()}{f': {why}' if why not in ('', 'None') else ''}"
                state["slurm_ended"] = ending_text(state["job_id"], job_state, why)
                provisioner.log.warning("Kernel %s ended: %s", provisioner.kernel_id, state["slurm_ended"])
                allowed = self.settings(provisioner).count("restarts")
                if int(state.get("new_jobs") or 0) >= allowed:
                    _let_go(provisioner, _no_new_job_text(state["slurm_ended"], allowed))
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
                # it, and shown as ending meanwhile (launch.slurm.ending).
                provisioner.log.warning("Kernel %s: %s Its job %s is cancelled once Slurm answers.", kernel_id, error, job)
                slurmending.hand_over(job, kernel_id, record or _record_of(kernel_id, state), str(error))
                state.clear()
                await asyncio.to_thread(shutil.rmtree, report_folder_of(kernel_id), True)
                return
            # The job keeps its shards until its steps have ended: a start right after this
            # shutdown would otherwise be refused ("Resources") for shards that are being freed.
            if not await asyncio.to_thread(slurmctl.wait_gone, job, env, timeout=slurmctl.client_timeout()):
                provisioner.log.warning("Kernel %s: Slurm job %s is still ending %.0f s after its cancel.", kernel_id, job, slurmctl.client_timeout())
        # Without a job (a restart that got none): the new jobs asked before, and why, are still counted.
        kept = {} if job else {key: state[key] for key in ("new_jobs", "slurm_ended") if state.get(key)}
        state.clear()
        state.update(kept)
        await asyncio.to_thread(shutil.rmtree, report_folder_of(kernel_id), True)

    def alive(self, pid: int | None, start: float | None = None, stamp: str | None = None) -> bool:
        from ...slices.holders import process_alive

        return process_alive(pid, start, stamp)  # srun, on this host

    def node_jobs(self, node: str) -> Callable[[], Sequence[Slice]]:
        """Every Slurm job's slices on ``node``, each job's ledgers read as its user (:mod:`.jobs`)."""
        from .jobs import SlurmJobs

        return SlurmJobs(node)

    def report_folder(self, ledger_path: str | Path, labels: Mapping[str, str]) -> Path:
        return report_root()


def _refusal(summary: str, record: SlurmKernel, slurm_args: list[str], *, waited: float | None) -> SliceUnavailable:
    """A start Slurm did not place, with what to do (the refusal's record and its dialog), and
    nothing for this host's idle reclaim to make room for (``elsewhere``)."""
    advice = refusal_advice(record.reason, waited=waited, partition=slurmctl.partition_of(slurm_args))
    detail: dict[str, Any] = {"summary": summary, "asked": record.asked.text, "advice": advice, "elsewhere": "slurm"}
    if waited is not None:
        detail["waited"] = waited
    return SliceUnavailable(summary, detail=detail)


def _no_new_job_text(ended: str, allowed: int) -> str:
    times = "no new job" if not allowed else f"no new job beyond {allowed}"
    return (
        f"{ended.rstrip('.')}; {times} is asked for this kernel (slurm_restarts {allowed}), so its variables are lost: "
        "start a new kernel for this notebook (Kernel > Change Kernel..., or open the notebook again) to run in a new job."
    )


def _no_new_job(provisioner: Any, ended: str, allowed: int) -> SliceUnavailable:
    """A kernel whose job Slurm ended (its time limit, a cancel, a preemption) is not started again
    in a new job beyond ``slurm_restarts``: a restart is refused in one sentence, and
    jupyter_client's restarter, which would ask again at every look, gives up on it."""
    sentence = _no_new_job_text(ended, allowed)
    if not _let_go(provisioner, sentence):
        provisioner.log.warning("Kernel %s: %s", provisioner.kernel_id, sentence)
        _forget(provisioner)
    restarter = getattr(provisioner.parent, "_restarter", None)
    if restarter is not None and getattr(provisioner.parent, "autorestart", False):
        provisioner.parent.stop_restarter()
        restarter._fire_callbacks("dead")  # the notebook sees its kernel dead; the server lets it go
    return SliceUnavailable(sentence)


def _let_go(provisioner: Any, sentence: str) -> bool:
    """Forget the kernel whose job ended for good and say why where its notebook looks (jupyter_server's
    kernel model ``reason``); tell jupyter_client's restarter, if one watches it, that its next
    restart has failed, so that it declares the kernel dead (the notebook hears it) instead of
    restarting it. Whether one did."""
    km = provisioner.parent
    if km is not None and hasattr(km, "reason"):
        km.reason = sentence
    restarter = getattr(km, "_restarter", None)
    if restarter is None or not getattr(km, "autorestart", False):
        return False  # a restart asked by hand is refused (allocate)
    provisioner.log.warning("Kernel %s: %s", provisioner.kernel_id, sentence)
    restarter._restarting, restarter._restart_count = True, restarter.restart_limit
    labels = getattr(provisioner, "_start_labels", None) or {}
    server = getattr(km, "parent", None)
    refusals_of(server if server is not None else provisioner).add(
        {"t": time.time(), "kernel_id": str(provisioner.kernel_id), "path": labels.get("path"), "kernel_name": labels.get("kernel_name"),
         "kernel_display_name": labels.get("kernel_display_name"), "status": 503, "reason": "job_ended", "message": sentence, "summary": ended_summary(sentence)}
    )  # fmt: skip
    _forget(provisioner)
    return True


def _forget(provisioner: Any) -> None:
    """A kernel whose job ended and that gets no new one: nothing of it is left to show or cancel."""
    _state(provisioner).clear()
    KERNELS.pop(str(provisioner.kernel_id), None)
    shutil.rmtree(report_folder_of(str(provisioner.kernel_id)), ignore_errors=True)


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
