"""Every Slurm job's slices on this node, for its exporter (``jupyter vgpu exporter --jobs``, run
as root on a Slurm GPU node, asks :meth:`.launcher.SlurmLauncher.node_jobs`; docs/cluster.md,
"Scraping every node").

On a Slurm node the processes of each job book in a ledger of the job's own, in a private folder
of the job's user (:mod:`jupyter_vgpu.jobfolder`): no ledger of the node holds them all. So at
each reading the exporter asks the node which jobs run on it and with which processes
(``scontrol listpids '*' <node>``, answered by the node's own slurmstepd: never slurmctld, so the
exporters of a thousand nodes add nothing to the controller's load), and for each job:

* its user is the real uid of its processes (``/proc/<pid>/status``), and its folders are where
  that job's environment (``/proc/<pid>/environ``: ``TMPDIR``, ``XDG_RUNTIME_DIR``,
  ``SLURM_CLUSTER_NAME``) makes :func:`~jupyter_vgpu.jobfolder.user_base` put them, found without
  making anything (:func:`~jupyter_vgpu.jobfolder.found_user_base`); the job id is Slurm's, never
  the environment's;
* only the user's private folders are read (one anybody else made, or a link, is passed over, as
  the job's own processes pass it over), and each ledger is read **as that user**: the effective
  uid and groups are the user's for the read, then root's again (:func:`acting_as`), so root never
  opens a file in a user's folder and SQLite never leaves a ``-shm`` of root's there;
* a slice whose record names another uid than the job's is left out: a user's own ledger never
  speaks for somebody else.

Run as another user than root, the exporter reads that user's jobs only, and says so once in its
log. A job whose ledger cannot be read is left out and said in the log (once, until it changes);
when the node's jobs cannot be listed at all, the reading fails in one sentence (the page's
``node_up`` 0: the cluster view shows the node stale, never as empty).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...errors import VGPUError
from ...jobfolder import JOB, JOB_ID, found_user_base, job_ledgers
from ...ledger.peek import peek_slices
from ...slices.records import Slice
from ...units import shorten

log = logging.getLogger("jupyter_vgpu.exporter")

#: Seconds ``scontrol listpids`` may take (the node's slurmstepd answers in milliseconds).
SCONTROL_TIMEOUT = 10.0
#: What ``scontrol listpids`` says on a node that runs no job step (Slurm 22.05's words).
NO_STEPS = ("no job steps", "no steps", "no running")


@dataclass(frozen=True)
class Job:
    """A Slurm job on this node as its processes show it."""

    id: str
    uid: int
    gid: int
    env: Mapping[str, str]


def jobs_on_node(node: str, *, timeout: float = SCONTROL_TIMEOUT) -> dict[str, list[int]]:
    """The jobs running on the Slurm node ``node`` (this machine) and their processes: job id ->
    pids. What stops it is one sentence (VGPUError)."""
    argv = ["scontrol", "listpids", "*", node]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise VGPUError(f"The Slurm jobs on {node} cannot be listed: scontrol is not installed here (slurm-client).") from None
    except subprocess.TimeoutExpired:
        raise VGPUError(f"The Slurm jobs on {node} cannot be listed: `{' '.join(argv)}` did not answer within {timeout:g} s.") from None
    jobs: dict[str, list[int]] = {}
    for line in done.stdout.splitlines()[1:]:  # PID JOBID STEPID LOCALID GLOBALID
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit() and JOB_ID.fullmatch(fields[1]):
            jobs.setdefault(fields[1], []).append(int(fields[0]))
    if done.returncode != 0 and not jobs and not any(words in done.stderr.lower() for words in NO_STEPS):
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise VGPUError(f"The Slurm jobs on {node} cannot be listed: `{' '.join(argv)}` says {shorten(said[-1] if said else done.returncode)}.")
    return jobs


def job_of(job_id: str, pids: list[int]) -> Job | None:
    """The job's user and environment, from the first of its processes that can be read (None:
    none can, they have ended)."""
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        ids = {key: value.split() for key, _, value in (line.partition(":") for line in status.splitlines()) if key in ("Uid", "Gid")}
        if "Uid" not in ids or "Gid" not in ids:
            continue
        env = dict(item.decode(errors="replace").partition("=")[::2] for item in environ.split(b"\0") if b"=" in item)
        env[JOB] = job_id  # Slurm's id for the job, never what its environment says
        return Job(job_id, int(ids["Uid"][0]), int(ids["Gid"][0]), env)
    return None


@contextmanager
def acting_as(uid: int, gid: int) -> Iterator[None]:
    """Files opened inside are opened as ``uid`` (effective uid, gid and groups), then as before.
    Root only (the saved uid stays root's, so the user can neither signal nor trace this process
    meanwhile); for the process's own uid, nothing changes."""
    if uid == os.geteuid():
        yield
        return
    groups, egid, euid = os.getgroups(), os.getegid(), os.geteuid()
    os.setgroups([gid])
    os.setegid(gid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(euid)
        os.setegid(egid)
        os.setgroups(groups)


class SlurmJobs:
    """Called at each reading of the node (:class:`~jupyter_vgpu.metrics.node.NodeSampler`'s
    ``extra``): every slice booked in the ledgers of the Slurm jobs that run on ``node`` (the
    node's name in Slurm)."""

    def __init__(self, node: str, *, timeout: float = SCONTROL_TIMEOUT) -> None:
        self.node = node
        self.timeout = timeout
        self.root = os.geteuid() == 0
        self._said: dict[str, str] = {}  # what the log last said of a job or a ledger

    def __call__(self) -> list[Slice]:
        found: list[Slice] = []
        said: dict[str, str] = {}
        for job_id, pids in sorted(self.jobs().items()):
            job = job_of(job_id, pids)
            if job is None:
                continue
            if not self.root and job.uid != os.geteuid():
                said["root"] = "This exporter is not root: it shows its own user's Slurm jobs only; run it as root to see every job's slices."
                continue
            found += self._slices(job, said)
        for key, sentence in said.items():
            if self._said.get(key) != sentence:
                log.warning("jupyter-vgpu exporter: %s", sentence)
        self._said = said
        return found

    def jobs(self) -> dict[str, list[int]]:
        return jobs_on_node(self.node, timeout=self.timeout)

    def _slices(self, job: Job, said: dict[str, str]) -> list[Slice]:
        found: list[Slice] = []
        with acting_as(job.uid, job.gid):
            base = found_user_base(job.env, job.uid)
            for path in job_ledgers(base, job.env, job.uid) if base is not None else ():
                try:
                    slices = peek_slices(path)
                except VGPUError as error:
                    said[str(path)] = f"Slurm job {job.id}: {error}"
                    continue
                own = [s for s in slices if s.uid == job.uid]
                found += own
                if len(own) != len(slices):
                    said[f"{path} uid"] = f"Slurm job {job.id}: slices of another uid than the job's in {path} are not shown."
        return found
