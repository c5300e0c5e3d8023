"""How the ``slurm`` launcher's kernels are seen (DESIGN.md, launchers: "how it is seen"): this
process's kernel records (:data:`KERNELS`), Slurm's states and reasons in words, and each kernel
job as a row of the views (REST ``/api/vgpu/slices``, the sidebar, ``jupyter vgpu status``), a job
whose cancel Slurm has not confirmed marked ending (:mod:`.ending`). How the kernels live is
:mod:`.slurm`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...slices.reports import read_report_file, report_bytes
from ...units import describe_fraction
from ..elsewhere import Elsewhere, State, Unlisted
from . import client as slurmctl
from . import ending as slurmending
from .names import JOB_FILE

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
    "COMPLETING": "it is ending, and Slurm has not yet said why",
}


#: Reasons a job waits for a limit of the user's own (account, QOS) rather than for free shards.
OWN_LIMITS = ("QOSMaxGRESPerUser", "AssocGrpGRES", "AssocMaxGRESPerJob", "QOSGrpGRES")


def refusal_advice(reason: str, *, waited: float | None, partition: str | None) -> list[str]:
    """What the person whose Slurm kernel did not start can do, best first (the dialog's list,
    as the local "no room" dialog's): wait in Slurm's queue, see what holds the GPUs, or end a
    kernel of their own."""
    if waited is None:
        tips = [
            "Wait in Slurm's queue: a kernel installed with `jupyter vgpu kernelspec install --slurm --wait SECONDS` "
            "(and this kernel's share and --slurm-arg options) waits for its job in Slurm's order, its place shown in the GPUs panel."
        ]
    else:
        tips = [f"Wait longer: this kernel waits {waited:g} s in Slurm's queue (its wait_timeout)."]
    if reason in OWN_LIMITS:
        tips.append("Shut down a kernel of yours that holds GPU shares (`squeue --me` lists your jobs), or ask your Slurm administrator about the limit.")
    else:
        tips.append(f"See what holds the GPUs: `squeue{f' -p {partition}' if partition else ''} -t RUNNING`.")
        tips.append("Or shut down the kernels you no longer use: their jobs free their shards.")
    return tips


def ending_text(job_id: str, state: str, reason: str) -> str:
    """``Slurm ended this kernel's job 12: its time limit was reached (TIMEOUT, TimeLimit).``"""
    if not state:
        return f"Slurm ended this kernel's job {job_id} and no longer remembers why."
    words = ENDINGS.get(state, state.lower())
    said = state + (f", {reason}" if reason not in ("", "None") else "")
    return f"Slurm ended this kernel's job {job_id}: {words} ({said})."


def ended_summary(sentence: str) -> str:
    """The gist of a kernel's end for a notification, which JupyterLab cuts at 140 characters:
    ``Slurm ended this kernel's job 12 (TIMEOUT, TimeLimit): start a new kernel to go on.`` (the
    whole sentence is the record's ``message``)."""
    head = sentence.split(":", 1)[0].split(" and ", 1)[0]
    code = re.search(r"\(([^()]*)\)[.;]", sentence)
    return f"{head}{f' ({code.group(1)})' if code else ''}: start a new kernel to go on."


def placed_text(job_id: str, node: str, gpus: list[int], asked: str) -> str:
    """``Slurm job 12 on node node1, GPUs 0 and 1; it asked for 2 whole GPUs (gpu:2)``."""
    if not gpus:
        on = "GPU not known"
    elif len(gpus) == 1:
        on = f"GPU {gpus[0]}"
    else:
        on = f"GPUs {', '.join(map(str, gpus[:-1]))} and {gpus[-1]}"
    return f"Slurm job {job_id} on node {node}, {on}; it asked for {asked}"


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
        "labels": dict(record.labels) if record else _labels_of(job),
        "created": record.created if record else None,
        "slurm_ended": record.ended if record else None,
        "unfenced": facts.get("unfenced") if isinstance(facts.get("unfenced"), str) else None,
        "simulated": facts.get("simulated") is True,
    }


def _labels_of(job: slurmctl.KernelJob) -> dict[str, str]:
    """What a job this process did not start says of its kernel: its notebook (its comment)."""
    from urllib.parse import unquote

    notebook = job.starter.get("notebook")
    return {"path": unquote(notebook)} if notebook else {}


#: The card the ``slurm`` launcher's kernels are shown in, and where its kernelspecs' kernels run.
TITLE = "Slurm jobs"
RUNS = "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them"
#: The launcher's own fields of a row (REST keeps them at the top level: docs/rest.md).
OWN_FIELDS = (
    "job_id", "node", "partition", "slurm_state", "slurm_reason", "slurm_reason_text", "shards", "shards_per_gpu",
    "share_text", "slurm_ended", "ending", "unfenced", "usage_source",
)  # fmt: skip


def as_elsewhere(row: Mapping[str, Any]) -> Elsewhere:
    """A kernel job (:func:`job_row`) as every view sees a kernel that runs elsewhere."""
    job, node = row["job_id"], row.get("node")
    pending = row.get("slurm_state") == "PENDING"
    state: State = "pending" if pending else "ending" if row.get("ending") else "running"
    name = f"Slurm job {job}" + (f" on {node}" if node and row.get("slurm_state") == "RUNNING" else "")
    where = [name]
    if indices := row.get("gpu_indices") or []:
        where.append(f"{'GPUs' if len(indices) > 1 else 'GPU'} {', '.join(map(str, indices))}")
    where.append(str(row.get("share_text") or ""))
    on = node or "its node"
    reason = row.get("slurm_reason")
    partition = row.get("partition")
    position = row.get("position")
    queue = f"partition {partition}'s queue" if partition else "Slurm's queue"
    place_text = f"place {position} in {queue}" if position else "its place in Slurm's queue is not known yet"
    if row.get("ending"):
        note = f"Ending: {row['ending']}"
    elif row.get("unfenced"):
        note = f"Unfenced: {row['unfenced']}"
    else:
        note = f"GPU memory through Slurm job {job} on {on} (shards fence nothing: its frameworks are fitted to the share)"
    used = row.get("memory_used")
    simulated = bool(row.get("simulated"))
    usage_note = (
        f"Reported by the kernel itself, from {on}: what its frameworks say they hold."
        if used is not None
        else f"No use reported yet: the kernel reports from {on} what its frameworks hold once they use the GPU."
    )
    titles = {
        "pending": f"Slurm keeps job {job} in its queue: {reason_text(reason) if reason else 'no reason given yet'}",
        "ending": f"Slurm has not confirmed the cancel of job {job} yet: it is tried again until it does",
        "running": f"Slurm runs job {job} on {on}",
    }
    return Elsewhere(
        launcher="slurm", title=TITLE, id=str(row["id"]), kernel_id=str(row["kernel_id"]), state=state,
        state_title=titles[state], where=tuple(w for w in where if w), note=note, usage_note=usage_note,
        summary=job_summary(row), share=str(row.get("share_text") or ""), tier=str(row.get("tier") or ""),
        fraction=row.get("fraction"), gpus=tuple(row.get("gpus") or ()), gpu_indices=tuple(row.get("gpu_indices") or ()),
        reason=reason, reason_text=row.get("slurm_reason_text"), place=position if pending else None,
        place_text=place_text if pending else None, request_text=row.get("request_text"),
        memory_reserved=row.get("memory_reserved"), memory_used=used, frameworks=row.get("frameworks") or {},
        labels=row.get("labels") or {}, created=row.get("created"), ended=row.get("slurm_ended"),
        cancel=pending or state == "ending", fields={k: row.get(k) for k in OWN_FIELDS},
        engine="Slurm", line="Slurm's queue", ref=str(job),
        notice=row["ending"] if row.get("ending") else f"Unfenced: {row['unfenced']}" if row.get("unfenced") else None,
        simulated=simulated,
    )  # fmt: skip


def user_rows(env: Mapping[str, str]) -> list[Elsewhere]:
    """This user's kernel jobs, for ``jupyter vgpu status`` on a login node."""
    return [as_elsewhere(job_row(job)) for job in slurmctl.kernel_jobs(env)]


def _remembered(record: SlurmKernel) -> slurmctl.KernelJob:
    """A kernel job of this process as it was last seen (when Slurm cannot list it now)."""
    assert record.job_id is not None
    return slurmctl.KernelJob(record.job_id, record.kernel_id, record.state, record.reason, record.node or "", record.asked.gres, "", "")


def _with_ending(row: dict[str, Any]) -> dict[str, Any]:
    """``ending``: why a job this process shut down still runs (one sentence), else None."""
    ending = slurmending.ENDING.get(str(row["job_id"]))
    row["ending"] = slurmending.ending_text(ending) if ending is not None else None
    return row


def server_rows(env: Mapping[str, str]) -> list[Elsewhere]:
    """The user's kernel jobs with this process's first (one ``squeue``), a job whose kernel was
    shut down but whose cancel Slurm has not confirmed marked ``ending``; [] without a Slurm kernel
    here, at no cost. When Slurm does not answer, :class:`~..elsewhere.Unlisted` carries this
    process's jobs as last seen. Blocking: call it off the event loop."""
    if not KERNELS and not slurmending.ENDING:
        return []
    try:
        jobs = slurmctl.kernel_jobs(env)
    except slurmctl.SlurmDown as error:
        records = [r for r in KERNELS.values() if r.job_id]
        records += [e.record for e in slurmending.ENDING.values()]
        raise Unlisted(str(error), [as_elsewhere(_with_ending(job_row(_remembered(r), r))) for r in records]) from None
    ending = {e.job_id: e.record for e in slurmending.ENDING.values()}
    for job in jobs:
        record = KERNELS.get(job.kernel_id)
        if record is not None and job.job_id == record.job_id:
            record.state, record.reason = job.state, job.reason
            record.position, record.node = job.position, job.node or record.node

    def ours(job: slurmctl.KernelJob) -> bool:
        return job.kernel_id in KERNELS or job.job_id in ending

    ordered = sorted(jobs, key=lambda j: not ours(j))
    return [as_elsewhere(_with_ending(job_row(j, KERNELS.get(j.kernel_id) or ending.get(j.job_id)))) for j in ordered]


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
