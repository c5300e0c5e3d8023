"""The GPUs as a scheduler gave them to this process: a pod's share (:mod:`.podshare`: HAMi, KAI)
or a Slurm job's GPUs and shards (:mod:`.slurmshare`). The inventory reads the card; a lens makes
each GPU what this process has of it (its capacity, the processes that count against it, the share
in words), so placement, every view and the slices' sizes see the share, not the card."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import VGPUError
from .model import GPU
from .podshare import PodShare, pod_share
from .slurmshare import SlurmShare, slurm_share


@dataclass(frozen=True)
class SchedulerLens:
    """The shares this process's environment names (none: the GPUs as they are)."""

    pod: PodShare | None = None
    job: SlurmShare | None = None

    @classmethod
    def of(cls, env: Mapping[str, str]) -> SchedulerLens:
        """Read from ``env`` (:class:`~jupyter_vgpu.errors.InvalidConfig` for a value not allowed)."""
        return cls(pod_share(env), slurm_share(env))

    @classmethod
    def here(cls, env: Mapping[str, str]) -> SchedulerLens:
        """As :meth:`of`, but no share where ``env`` names one not allowed: that is said where the
        GPUs are read, and a slice's own size stays right without it."""
        try:
            return cls.of(env)
        except VGPUError:
            return cls()

    def cuda_portion(self) -> float | None:
        """The part of each GPU this process has that CUDA does not report (CUDA, and so every
        framework's fraction, still sees the whole card): a KAI pod's portion, a Slurm job's
        shards (which never span GPUs). None where CUDA sees what the process has: no share,
        whole GPUs, or a HAMi pod (HAMi-core makes CUDA report the share itself)."""
        if self.pod is not None and self.pod.portion is not None:
            return self.pod.portion
        job = self.job
        return job.portion(job.gpus[0]) if job is not None and job.sharded and job.gpus else None

    def apply(self, gpus: tuple[GPU, ...], count: int, message: str | None) -> tuple[tuple[GPU, ...], str | None]:
        """``gpus`` (of ``count`` NVML sees) as this process has them, and what to say of them."""
        job, share = self.job, self.pod
        if job is not None:
            by_nvml = job.nvml_map(count)
            gpus = tuple(_in_job(g, job, by_nvml[g.index]) for g in gpus if g.index in by_nvml)
            if not job.gpus:
                message = (
                    f"Slurm job {job.job} holds no GPU on node {job.node} (it asked for no gpu or shard GRES): "
                    "ask for --gres=shard:N or --gres=gpu:N."
                )
        if share is not None:
            gpus = tuple(_in_pod(g, share) for g in gpus)
        return gpus, message


def _in_pod(gpu: GPU, share: PodShare) -> GPU:
    """The GPU as this pod has it: capacity is the scheduler's share, and memory outside the pod
    (other pods' processes, which NVML lists on the card with pids this pod cannot map) is not
    counted against it; the pod's own use is what its kernels' frameworks report."""
    limit = share.limit_for(gpu.index, gpu.memory_total)
    if gpu.mig_mode or limit is None:
        return replace(gpu, sm_limit=share.sm_limit)
    return replace(
        gpu,
        memory_total=min(gpu.memory_usable, limit),
        memory_used=None,
        memory_reserved_by_driver=0,
        processes=(),
        pod_share=share.describe(gpu.index, gpu.memory_usable),
        share=share.describe(gpu.index, gpu.memory_usable),
        card_memory=gpu.memory_total,
        sm_limit=share.sm_limit,
    )


def _in_job(gpu: GPU, job: SlurmShare, slurm_index: int) -> GPU:
    """The GPU as this Slurm job has it. With shards, capacity is the job's shards of the card and
    only the job's own processes count against it: other jobs' processes use their own shards
    (Slurm fences none of them: docs/cluster.md). A whole GPU stays as NVML sees it, other
    jobs' use included (a whole-GPU job may land on a GPU whose shards are in use)."""
    described = job.describe(slurm_index, gpu.memory_usable)
    limit = job.limit_for(slurm_index, gpu.memory_usable)
    if gpu.mig_mode or limit is None:
        return replace(gpu, share=described, slurm_job=job.job)
    own = tuple(p for p in gpu.processes if _in_this_job(p.pid, job.job))
    return replace(
        gpu,
        memory_total=limit,
        memory_used=None if any(p.used is None for p in own) else sum(p.used or 0 for p in own),
        memory_reserved_by_driver=0,
        processes=own,
        share=described,
        slurm_job=job.job,
        card_memory=gpu.memory_total,
    )


def _in_this_job(pid: int, job: str) -> bool:
    """Whether process ``pid`` runs in Slurm job ``job`` (its environment says so; another user's
    process cannot be read, and is not this job's)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"SLURM_JOB_ID={job}".encode() in environ.split(b"\0")
