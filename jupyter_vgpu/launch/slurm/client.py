"""Slurm's client commands, as the ``slurm`` launcher (:mod:`.slurm`) and the views use them.

Every call has a timeout: Slurm's clients wait for a controller that is down, for ever by
default. A call that fails is one sentence: "Slurm does not answer (slurmctld at host:6817): ...".
Nothing here runs on a GPU node; the kernel's own start there is :mod:`.node`.

A kernel's job is named ``jupyter-vgpu-kernel-<kernel id>`` and its comment says which process
on which host started it (``jupyter-vgpu host=login1 pid=4242 start=1700000000``): a server that
starts again cancels the jobs whose starter has gone from its host (:func:`cancel_orphans`), and
never those of a server that still runs, nor those started from another host.
"""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InvalidConfig, InvalidRequest
from ...units import describe_fraction, format_bytes, shorten

#: Seconds a client command (squeue, scontrol, scancel, sinfo, salloc's answer) may take;
#: JUPYTER_VGPU_SLURM_TIMEOUT overrides it.
CLIENT_TIMEOUT = 15.0
ENV_TIMEOUT = "JUPYTER_VGPU_SLURM_TIMEOUT"


def client_timeout() -> float:
    try:
        return float(os.environ.get(ENV_TIMEOUT) or CLIENT_TIMEOUT)
    except ValueError:
        return CLIENT_TIMEOUT
JOB_PREFIX = "jupyter-vgpu-kernel-"
COMMENT_PREFIX = "jupyter-vgpu"
#: Options that ask Slurm for GPUs: the kernelspec's share says that, not ``slurm_args``.
GPU_OPTIONS = ("--gres", "--gpus", "-G", "--gpus-per-node", "--gpus-per-task", "--tres-per-node", "--mem-per-gpu")
_DOWN = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "Zero Bytes were transmitted")


class SlurmDown(InvalidConfig):
    """Slurm's controller does not answer, or a client is missing on this host."""


def controller(env: Mapping[str, str]) -> str:
    """Where slurmctld is, as slurm.conf says (``host:port``), for messages; "?" when unread."""
    conf = Path(env.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    host, port = "?", "6817"
    try:
        text = conf.read_text(errors="replace")
    except OSError:
        return f"{host}:{port}"
    for line in text.splitlines():
        key, _, value = line.split("#", 1)[0].strip().partition("=")
        if key.lower() in ("slurmctldhost", "controlmachine") and host == "?":
            name, _, address = value.strip().partition("(")  # SlurmctldHost=name(address)
            host = address.rstrip(")") or name
        elif key.lower() == "slurmctldport":
            port = value.strip()
    return f"{host}:{port}"


def down(env: Mapping[str, str], what: str) -> SlurmDown:
    return SlurmDown(f"Slurm does not answer (slurmctld at {controller(env)}): {what}.")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def said(text: str) -> str:
    """Slurm's last line, without its ``salloc: error:`` prefix."""
    line = _last_line(text)
    return re.sub(r"^\w+: (error: )?", "", line).rstrip(".")


def call(args: Sequence[str], env: Mapping[str, str], *, timeout: float | None = None, check: bool = True) -> str:
    """Run one client command; its output. A controller that does not answer, or a command that
    fails (with ``check``), is one sentence (:class:`SlurmDown`, or InvalidRequest)."""
    timeout = client_timeout() if timeout is None else timeout
    try:
        done = subprocess.run(
            list(args), env=dict(env), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError:
        raise SlurmDown(f"Slurm's {args[0]} is not installed on this host; install Slurm's client commands here.") from None
    except subprocess.TimeoutExpired:
        raise down(env, f"{args[0]} gave no answer within {timeout:.0f} s") from None
    if done.returncode != 0 and check:
        message = said(done.stderr or done.stdout) or f"{args[0]} exited with status {done.returncode}"
        if any(mark in message for mark in _DOWN):
            raise down(env, message)
        raise InvalidRequest(f"Slurm refused {args[0]}: {message}.")
    return done.stdout


# -- what a kernel asks for ------------------------------------------------------------------


def partition_of(slurm_args: Sequence[str]) -> str | None:
    """The partition ``slurm_args`` names (``-p gpu``, ``--partition=gpu``), else None."""
    args = list(slurm_args)
    for i, arg in enumerate(args):
        if arg in ("-p", "--partition") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--partition="):
            return arg.split("=", 1)[1]
        if arg.startswith("-p") and len(arg) > 2:
            return arg[2:]
    return None


def check_args(value: Any) -> tuple[str, ...]:
    """``slurm_args`` as a kernelspec gives them: a list of strings, none asking for GPUs."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(a, str) for a in value):
        raise InvalidRequest(
            f"slurm_args {shorten(value)} is not allowed; use a list of salloc options such as "
            '["--partition=gpu", "--time=8:00:00"].'
        )
    for arg in value:
        if arg.split("=", 1)[0] in GPU_OPTIONS or (arg.startswith("-G") and arg != "-G"):
            raise InvalidRequest(
                f"slurm_args {shorten(arg)} asks Slurm for GPUs, which the kernel's share (gpu_fraction, gpus) "
                "says; leave it out."
            )
        if "\n" in arg or "\0" in arg:
            raise InvalidRequest(f"slurm_args {shorten(arg)} is not one salloc option.")
    return tuple(value)


def shards_per_gpu(partition: str | None, env: Mapping[str, str]) -> int:
    """How many shards Slurm splits each GPU of ``partition`` (the default one: None) into: the
    admin's setting, else the nodes' GRES as ``sinfo`` lists them."""
    from ...gpus.slurmshare import ENV_SHARDS_PER_GPU, parse_shards_per_gpu, split_gres

    fix = f"set {ENV_SHARDS_PER_GPU} (c.VGPU.slurm_shards_per_gpu) to the shards of one GPU"
    admin = env.get(ENV_SHARDS_PER_GPU, "").strip()
    if admin:
        return min(parse_shards_per_gpu(admin))  # uneven GPUs: the smallest, so a share never asks too few
    out = call(["sinfo", "--noheader", "--format=%P|%G"], env)
    found: set[int] = set()
    where = f"partition {partition}" if partition else "the default partition"
    names = sorted({line.split("|", 1)[0].rstrip("*") for line in out.splitlines() if line.strip()})
    if partition and partition not in names:
        raise InvalidRequest(f"slurm_args name partition {shorten(partition)}, which Slurm does not have; use one of: {', '.join(names)}.")
    for line in out.splitlines():
        name, _, gres = line.partition("|")
        if name.rstrip("*") != partition if partition else not name.endswith("*"):
            continue
        try:
            found.add(split_gres(gres, name.rstrip("*"), fix))
        except InvalidConfig:
            continue  # a group of nodes without shards
    if not found:
        raise InvalidConfig(f"No node of {where} has GPU shards (Gres=gpu:N,shard:M in slurm.conf); {fix}.")
    if len(found) > 1:
        counts = ", ".join(map(str, sorted(found)))
        raise InvalidConfig(f"The nodes of {where} split their GPUs into different numbers of shards ({counts}); {fix}.")
    return found.pop()


@dataclass(frozen=True)
class Ask:
    """What a kernel asks Slurm for: ``gres`` (``shard:8`` or ``gpu:2``) and, in words, why."""

    gres: str
    shards: int | None
    per_gpu: int | None
    gpus: int
    fraction: float
    text: str


def ask_for(
    fraction: float | None, memory: int | None, gpus: int, *, per_gpu: int | None, gpu_memory: int | None
) -> Ask:
    """The GRES of a slice: whole GPUs as ``gpu:N``; a share of one GPU as its shards, rounded
    up. A share Slurm cannot place (of several GPUs, below one shard, in bytes with no GPU memory
    said) is refused in one sentence."""
    if memory is not None:
        if gpu_memory is None:
            raise InvalidRequest(
                f"gpu_memory {format_bytes(memory)} cannot be asked of Slurm, which shares a GPU in shards, not bytes, "
                'and the GPU memory of the partition is not said ("slurm": {"gpu_memory": "16GiB"} in c.VGPUProvisioner.launcher_settings '
                "or the kernelspec); use gpu_fraction."
            )
        if memory > gpu_memory:
            raise InvalidRequest(
                f"gpu_memory {format_bytes(memory)} is more than one GPU of this partition ({format_bytes(gpu_memory)}), "
                "and one Slurm job's shards never span GPUs; ask for at most that, or for whole GPUs."
            )
        fraction = memory / gpu_memory
    fraction = 1.0 if fraction is None else fraction
    if fraction >= 1:
        return Ask(f"gpu:{gpus}", None, per_gpu, gpus, 1.0, f"{gpus} whole GPU{'s' if gpus != 1 else ''} (gpu:{gpus})")
    if gpus > 1:
        raise InvalidRequest(
            f"A share of {gpus} GPUs cannot be asked of Slurm: one job's shards never span GPUs; "
            "ask for a share of one GPU, or for whole GPUs."
        )
    assert per_gpu is not None
    exact = fraction * per_gpu
    if exact < 1 - 1e-9:
        raise InvalidRequest(
            f"gpu_fraction {describe_fraction(fraction)} is less than one of the {per_gpu} shards Slurm splits each GPU into; "
            f"ask for at least 1/{per_gpu}."
        )
    shards = min(per_gpu, math.ceil(exact - 1e-9))
    share = describe_fraction(fraction)
    rounded = "" if abs(exact - round(exact)) < 1e-9 else f", {exact:.2f} rounded up"
    return Ask(f"shard:{shards}", shards, per_gpu, 1, shards / per_gpu, f"{share} GPU: {shards} of {per_gpu} shards{rounded}")


# -- kernel jobs -----------------------------------------------------------------------------


def job_name(kernel_id: str, notebook: str | None = None) -> str:
    """``train-jupyter-vgpu-kernel-<kernel id>``: the notebook's name first, which ``squeue``'s
    8-character column shows (the name without it where there is none)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(notebook).stem)[:32].strip("._-") if notebook else ""
    return f"{stem}-{JOB_PREFIX}{kernel_id}" if stem else f"{JOB_PREFIX}{kernel_id}"


def kernel_of(name: str) -> str | None:
    """The kernel id in a kernel job's name (:func:`job_name`); None for another job."""
    before, sep, kernel_id = name.rpartition(JOB_PREFIX)
    return kernel_id if sep and kernel_id and (not before or before.endswith("-")) else None


def starter_comment(pid: int | None = None, per_gpu: int | None = None, notebook: str | None = None) -> str:
    """Which process on which host starts a kernel's job (its orphans are found by it), the
    shards of one GPU its share was counted in (for views that did not start it), and its
    notebook (URL-quoted: ``scontrol show job`` and ``squeue -o %k`` show it to an admin)."""
    import psutil

    pid = os.getpid() if pid is None else pid
    try:
        start = int(psutil.Process(pid).create_time())
    except psutil.Error:
        start = 0
    text = f"{COMMENT_PREFIX} host={socket.gethostname()} pid={pid} start={start}"
    from urllib.parse import quote

    return text + (f" per_gpu={per_gpu}" if per_gpu else "") + (f" notebook={quote(notebook)}" if notebook else "")


@dataclass
class KernelJob:
    """One kernel's job as ``squeue`` lists it."""

    job_id: str
    kernel_id: str
    state: str  # RUNNING, PENDING, ...
    reason: str
    node: str
    gres: str
    comment: str
    partition: str
    position: int | None = None
    starter: dict[str, str] = field(default_factory=dict)

    @property
    def shards(self) -> int | None:
        match = re.search(r"shard:(\d+)", self.gres)
        return int(match.group(1)) if match else None

    @property
    def whole_gpus(self) -> int | None:
        match = re.search(r"gpu:(\d+)", self.gres)
        return int(match.group(1)) if match else None


_SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%b|%P|%k"


def kernel_jobs(env: Mapping[str, str], *, job_ids: Sequence[str] = ()) -> list[KernelJob]:
    """This user's kernel jobs (or those of ``job_ids``), pending ones with their place among the
    partition's pending jobs (1: next)."""
    args = ["squeue", "--noheader", f"--format={_SQUEUE_FORMAT}"]
    args += [f"--jobs={','.join(job_ids)}"] if job_ids else [f"--user={os.getuid()}"]
    out = call(args, env, check=not job_ids)  # a job Slurm forgot fails --jobs: none listed
    jobs = []
    for line in out.splitlines():
        parts = line.split("|", 7)
        if len(parts) != 8 or (kernel_id := kernel_of(parts[1].strip())) is None:
            continue
        job_id, _, state, reason, node, gres, partition, comment = (p.strip() for p in parts)
        starter = dict(p.split("=", 1) for p in comment.split()[1:] if "=" in p) if comment.startswith(COMMENT_PREFIX) else {}
        jobs.append(KernelJob(job_id, kernel_id, state, reason, node, gres, comment, partition, starter=starter))
    pending = [j for j in jobs if j.state == "PENDING"]
    if pending:
        for partition in {j.partition for j in pending}:
            order = call(
                ["squeue", "--noheader", "--states=PENDING", f"--partition={partition}", "--sort=-p,i", "--format=%i"], env
            ).split()
            for job in pending:
                if job.partition == partition and job.job_id in order:
                    job.position = order.index(job.job_id) + 1
    return jobs


def job_state(job_id: str, env: Mapping[str, str]) -> tuple[str, str]:
    """(state, reason) of a job, also after it ended while Slurm still remembers it (``scontrol``);
    ("", "") when Slurm has forgotten it."""
    out = call(["scontrol", "--oneliner", "show", "job", job_id], env, check=False)
    state = re.search(r"\bJobState=(\S+)", out)
    reason = re.search(r"\bReason=(\S+)", out)
    return (state.group(1) if state else "", reason.group(1) if reason else "")


def final_state(job_id: str, env: Mapping[str, str]) -> tuple[str, str]:
    """:func:`job_state` once the job is no longer completing (its steps ending): how it ended,
    which Slurm says only then (at most the client timeout)."""
    import time

    deadline = time.monotonic() + client_timeout()
    while True:
        state, reason = job_state(job_id, env)
        if state != "COMPLETING" or time.monotonic() > deadline:
            return state, reason
        time.sleep(0.1)


def placement(job_id: str, env: Mapping[str, str]) -> tuple[str, str, list[int]]:
    """(node, its address, the job's GPU indices there) of a running job."""
    out = call(["scontrol", "--oneliner", "--details", "show", "job", job_id], env)
    node = re.search(r"\bNodeList=(\S+)", out)
    if not node or node.group(1) in ("", "(null)"):
        raise InvalidConfig(f"Slurm gave job {job_id} no node.")
    name = node.group(1)
    indices: list[int] = []
    for match in re.finditer(r"\bGRES=\S*?\(IDX:([\d,-]+)\)", out):
        for part in match.group(1).split(","):
            first, _, last = part.partition("-")
            indices.extend(range(int(first), int(last or first) + 1))
    address = re.search(r"\bNodeAddr=(\S+)", call(["scontrol", "--oneliner", "show", "node", name], env))
    return name, address.group(1) if address else name, sorted(set(indices))


def cancel(job: str, env: Mapping[str, str], *, signal: str | None = None, confirm: bool = False) -> None:
    """``scancel`` a job (or, with ``signal``, signal its steps); a job already gone is no error.
    With ``confirm``, a controller that does not answer raises :class:`SlurmDown` however
    scancel says it (a timeout, or at once)."""
    args = ["scancel", *([f"--signal={signal}"] if signal else []), job]
    if not confirm:
        call(args, env, check=False)
        return
    try:
        call(args, env)
    except SlurmDown:
        raise
    except InvalidRequest:
        pass  # Slurm answered: the job is already ending, ended or forgotten


def gone(job: str, env: Mapping[str, str]) -> bool:
    """Whether Slurm confirms that ``job`` holds nothing (ended, or forgotten); SlurmDown when
    the controller does not answer (never taken for a forgotten job)."""
    try:
        out = call(["scontrol", "--oneliner", "show", "job", job], env)
    except SlurmDown:
        raise
    except InvalidRequest:
        return True  # "Invalid job id specified": Slurm has forgotten it
    state = re.search(r"\bJobState=(\S+)", out)
    return not state or state.group(1).split("+")[0] not in HOLDING


#: Job states in which a job still holds its node's resources.
HOLDING = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT")


def wait_gone(job: str, env: Mapping[str, str], *, timeout: float) -> bool:
    """Wait until a cancelled job holds nothing (ended, or forgotten by Slurm), at most ``timeout``
    seconds; whether it did. A cancelled job keeps its GPU shards until its steps have ended."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        state, _ = job_state(job, env)
        if state.split("+")[0] not in HOLDING:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def steps(job: str, env: Mapping[str, str]) -> list[str]:
    """The job's running steps (``12.0``; not Slurm's own ``extern`` or ``batch``)."""
    out = call(["squeue", "--noheader", "--steps", f"--jobs={job}", "--format=%i"], env, check=False)
    found = (line.strip() for line in out.splitlines())
    return [step for step in found if step.startswith(f"{job}.") and step.split(".", 1)[1].isdigit()]


def has_step(job: str, env: Mapping[str, str]) -> bool:
    """Whether the job runs a step (the kernel, for a kernel job): what a server that did not
    start the kernel's ``srun`` asks instead of polling it."""
    return bool(steps(job, env))


def kill_steps(job: str, env: Mapping[str, str], *, grace: float = 3.0) -> None:
    """End the job's steps and keep the job (Slurm takes SIGKILL to a job as its cancel): SIGTERM
    first, which a kernel's start on its node (:mod:`.node`) answers by killing the kernel and
    removing its folder there, then SIGKILL to any step still running after ``grace`` seconds."""
    import time

    running = steps(job, env)
    for step in running:
        cancel(step, env, signal="TERM")
    deadline = time.monotonic() + grace
    while running and time.monotonic() < deadline:
        time.sleep(0.1)
        running = steps(job, env)
    for step in running:
        cancel(step, env, signal="KILL")


def orphans(env: Mapping[str, str]) -> list[KernelJob]:
    """This user's kernel jobs started from this host by a process that has gone."""
    import psutil

    host = socket.gethostname()
    found = []
    for job in kernel_jobs(env):
        starter = job.starter
        if starter.get("host") != host or not starter.get("pid", "").isdigit():
            continue
        try:
            alive = int(psutil.Process(int(starter["pid"])).create_time()) == int(starter.get("start") or 0)
        except (psutil.Error, ValueError):
            alive = False
        if not alive:
            found.append(job)
    return found


def cancel_orphans(env: Mapping[str, str]) -> list[KernelJob]:
    """Cancel :func:`orphans`; the jobs cancelled."""
    found = orphans(env)
    for job in found:
        cancel(job.job_id, env)
    return found
