"""The share of the node's GPUs a Slurm job holds (docs/cluster.md, "Slurm").

Slurm places and counts GPU shares but, in its own documentation's words, sharding "does not fence
the processes running on the GPU" (SchedMD/slurm:doc/html/gres.shtml). Inside a job, what the job
was given is its GPU budget, as a HAMi or KAI pod's share is (:mod:`.podshare`):

* its GPUs are the ones Slurm names, by Slurm's index on the node: ``SLURM_STEP_GPUS`` in a step
  (``srun``), ``SLURM_JOB_GPUS`` in a batch script, else ``CUDA_VISIBLE_DEVICES`` where it holds
  indices. NVML lists every GPU of the node (unless the node's cgroups confine devices, and then
  only the job's): :meth:`SlurmShare.nvml_map` maps one view onto the other;
* with shards (``--gres=shard:N``, Slurm 22.05+), the budget on the job's GPU is
  ``SLURM_SHARDS_ON_NODE`` / shards per GPU x the GPU's memory. One job's shards never span GPUs.
  Slurm tells a job its shards, not the GPU's: the shards per GPU come from the admin's setting
  (``JUPYTER_VGPU_SLURM_SHARDS_PER_GPU``, ``c.VGPU.slurm_shards_per_gpu``), else from
  ``scontrol show node $SLURMD_NODENAME`` (``Gres=gpu:2,shard:64``: 32 each), asked once per node
  and process and handed to child processes in ``JUPYTER_VGPU_SLURM_NODE_SHARDS``;
* with whole GPUs (``--gres=gpu:N``) the GPUs are the job's, whole.

A job that asked for neither has no GPU. Outside a job step or batch script (no ``SLURM_JOB_ID``
and ``SLURMD_NODENAME``: a login node, an ``salloc`` shell) there is no share.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from ..errors import InvalidConfig
from ..units import format_bytes, shorten

JOB = "SLURM_JOB_ID"
NODE = "SLURMD_NODENAME"
SHARDS = "SLURM_SHARDS_ON_NODE"
STEP_GPUS = "SLURM_STEP_GPUS"
JOB_GPUS = "SLURM_JOB_GPUS"
VISIBLE = "CUDA_VISIBLE_DEVICES"
#: More GPUs than any node has (Slurm's GPU indices on a node are below it): a range of GPU
#: indices is bounded by it before it is counted out.
MAX_GPUS = 1024
#: The admin's setting: shards per GPU on every node ("32"), or per GPU index ("40,24") where
#: gres.conf splits a node's GPUs unevenly. Also ``c.VGPU.slurm_shards_per_gpu``.
ENV_SHARDS_PER_GPU = "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"
#: What one process learnt from ``scontrol`` (``node1=32``), for its child processes on that node.
ENV_NODE_SHARDS = "JUPYTER_VGPU_SLURM_NODE_SHARDS"
SHARDS_PER_GPU_ALLOWED = 'a whole number of shards per GPU ("32"), or one per GPU index ("40,24")'
#: Seconds ``scontrol`` may take (it waits for slurmctld, for ever when it is down).
SCONTROL_TIMEOUT = 10.0

_INDEX_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$", re.ASCII)
_GRES = re.compile(r"(?:^|\s)Gres=(\S+)")
_COUNT = re.compile(r"^(\d+)([KMG]?)$", re.ASCII)

_looked_up: dict[str, tuple[int, ...]] = {}  # node -> shards per GPU, asked of scontrol in this process


@dataclass(frozen=True)
class SlurmShare:
    """What Slurm gave this job on this node: its GPUs by Slurm's index and, with shards, how many
    of how many per GPU (``per_gpu`` indexed like ``gpus``)."""

    job: str
    node: str
    gpus: tuple[int, ...]
    shards: int | None = None
    per_gpu: tuple[int, ...] = ()

    @property
    def sharded(self) -> bool:
        return self.shards is not None

    def portion(self, slurm_index: int) -> float | None:
        """The job's part of GPU ``slurm_index`` (None: the whole GPU)."""
        if self.shards is None or slurm_index not in self.gpus:
            return None
        return min(1.0, self.shards / self.per_gpu[self.gpus.index(slurm_index)])

    def limit_for(self, slurm_index: int, card: int) -> int | None:
        """The job's bytes on GPU ``slurm_index`` of ``card`` bytes (None: the whole GPU)."""
        portion = self.portion(slurm_index)
        return None if portion is None else math.floor(portion * card)

    def describe(self, slurm_index: int, card: int) -> str:
        """``Slurm job 1234: 16/32 shards of GPU 0, 8.0 GiB`` (or ``..: GPU 0, whole``)."""
        limit = self.limit_for(slurm_index, card)
        if limit is None or self.shards is None:
            return f"Slurm job {self.job}: GPU {slurm_index}, whole"
        per_gpu = self.per_gpu[self.gpus.index(slurm_index)]
        return f"Slurm job {self.job}: {self.shards}/{per_gpu} shards of GPU {slurm_index}, {format_bytes(limit)}"

    def nvml_map(self, count: int) -> dict[int, int]:
        """NVML's index -> Slurm's, for the job's GPUs among the ``count`` NVML lists.

        Where NVML lists exactly the job's GPUs (cgroups confine the devices, or the job holds
        the whole node), the i-th is the job's i-th. Otherwise NVML lists the node's and Slurm's
        index is NVML's: Slurm numbers a node's GPUs in the order of gres.conf's ``File=``
        (``/dev/nvidia[0-3]``) or, with ``AutoDetect=nvml``, as NVML does."""
        if count == len(self.gpus):
            return dict(enumerate(self.gpus))
        beyond = [i for i in self.gpus if i >= count]
        if beyond:
            raise InvalidConfig(
                f"Slurm job {self.job} holds GPU {', '.join(map(str, beyond))} of node {self.node}, but NVML lists only "
                f"{count} GPU{'s' if count != 1 else ''} here; check that gres.conf names this node's GPUs."
            )
        return {i: i for i in self.gpus}


def in_job(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is a process of a job on its node (a step or a batch script)."""
    return bool(env.get(JOB, "").strip() and env.get(NODE, "").strip())


def allocation_note(env: Mapping[str, str]) -> str | None:
    """Where a shell inside a job's allocation but not on its node (``salloc`` on a login node) has
    the job's GPUs, in one sentence; None elsewhere."""
    job = env.get(JOB, "").strip()
    if not job or in_job(env):
        return None
    nodes = (env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "").strip() or "its node"
    return (
        f"This shell is in Slurm job {job}'s allocation but not on its node: the job's GPUs or GPU shards are on "
        f"{nodes}, which srun reaches from here (srun jupyter vgpu status, srun python train.py)."
    )


def slurm_share(env: Mapping[str, str], *, cache: MutableMapping[str, str] | None = None) -> SlurmShare | None:
    """This job's share from ``env``; None outside a job. A value that cannot be read raises
    InvalidConfig naming the variable and what is allowed (then nothing is reserved).

    ``cache``: where the shards per GPU that ``scontrol`` reported are kept for child processes
    (``os.environ`` when ``env`` is it)."""
    if not in_job(env):
        return None
    job, node = env[JOB].strip(), env[NODE].strip()
    gpus = _job_gpus(env)
    shards = _shards(env[SHARDS]) if env.get(SHARDS, "").strip() else None
    if shards is None or len(gpus) != 1:
        return SlurmShare(job, node, gpus)  # whole GPUs (one job's shards never span GPUs)
    per_node = shards_per_gpu(env, node, cache=cache if cache is not None else (os.environ if env is os.environ else None))
    slurm_index = gpus[0]
    if len(per_node) == 1:
        return SlurmShare(job, node, gpus, shards, per_node)
    if slurm_index >= len(per_node):
        raise InvalidConfig(
            f"{ENV_SHARDS_PER_GPU}={shorten(env.get(ENV_SHARDS_PER_GPU, ''))} names the shards of {len(per_node)} GPUs, "
            f"but Slurm job {job} holds GPU {slurm_index}; use {SHARDS_PER_GPU_ALLOWED}."
        )
    return SlurmShare(job, node, gpus, shards, (per_node[slurm_index],))


def _job_gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    for name in (STEP_GPUS, JOB_GPUS):
        if env.get(name, "").strip():
            return _indices(name, env[name])
    visible = env.get(VISIBLE, "").strip()
    if visible and all(part.strip().isdigit() for part in visible.split(",")):
        return _indices(VISIBLE, visible)
    return ()


def _indices(name: str, value: str) -> tuple[int, ...]:
    found: list[int] = []
    for part in value.split(","):
        match = _INDEX_RANGE.match(part.strip())
        if not match:
            raise InvalidConfig(f"{name}={shorten(value)} does not name GPUs; Slurm sets GPU indices such as 0,1 or 0-3.")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last >= MAX_GPUS or first > last:
            raise InvalidConfig(
                f"{name}={shorten(value)} does not name a node's GPUs; Slurm sets indices below {MAX_GPUS}, "
                "in ranges from low to high, such as 0,1 or 0-3."
            )
        found.extend(range(first, last + 1))
    return tuple(sorted(set(found)))


def _shards(value: str) -> int:
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise InvalidConfig(f"{SHARDS}={shorten(value)} is not a number of shards; Slurm sets a whole number, at least 1.")
    return int(text)


def parse_shards_per_gpu(value: str, name: str = ENV_SHARDS_PER_GPU) -> tuple[int, ...]:
    """``"32"`` -> (32,); ``"40,24"`` -> (40, 24): shards of every GPU, or of each GPU by index."""
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        raise InvalidConfig(f"{name}={shorten(value)} is not a number of shards; use {SHARDS_PER_GPU_ALLOWED}.")
    return tuple(int(p) for p in parts)


def shards_per_gpu(
    env: Mapping[str, str], node: str, *, cache: MutableMapping[str, str] | None = None
) -> tuple[int, ...]:
    """Shards per GPU on ``node``: the admin's setting, else what this process or its parent
    learnt, else ``scontrol show node`` (then remembered in this process and in ``cache``)."""
    if env.get(ENV_SHARDS_PER_GPU, "").strip():
        return parse_shards_per_gpu(env[ENV_SHARDS_PER_GPU])
    known = env.get(ENV_NODE_SHARDS, "")
    name, _, value = known.partition("=")
    if name == node and value:
        try:
            return parse_shards_per_gpu(value, ENV_NODE_SHARDS)
        except InvalidConfig:
            pass  # not ours to trust: ask again
    if node not in _looked_up:
        _looked_up[node] = ask_scontrol(node, env)
    if cache is not None:
        cache[ENV_NODE_SHARDS] = f"{node}={','.join(map(str, _looked_up[node]))}"
    return _looked_up[node]


def ask_scontrol(node: str, env: Mapping[str, str], timeout: float = SCONTROL_TIMEOUT) -> tuple[int, ...]:
    """Shards per GPU from ``scontrol show node`` (its ``Gres=gpu:2,shard:64``)."""
    import subprocess  # here: a process outside a shard job never pays for it

    fix = f"set {ENV_SHARDS_PER_GPU} (c.VGPU.slurm_shards_per_gpu) to {SHARDS_PER_GPU_ALLOWED}"
    try:
        done = subprocess.run(
            ["scontrol", "--oneliner", "show", "node", node], env=dict(env), capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError:
        raise InvalidConfig(f"Slurm job {env.get(JOB)} holds GPU shards, but scontrol is not installed here to say how many each GPU has; {fix}.") from None
    except subprocess.TimeoutExpired:
        raise InvalidConfig(f"scontrol did not say within {timeout:.0f} s how many shards each GPU of node {node} has (is slurmctld up?); {fix}.") from None
    match = _GRES.search(done.stdout)
    if done.returncode != 0 or not match:
        said = (done.stderr or done.stdout).strip().splitlines()
        reason = f": {said[-1]}" if said else ""
        raise InvalidConfig(f"scontrol show node {node} did not give the node's GRES{reason}; {fix}.")
    return (split_gres(match.group(1), node, fix),)


def split_gres(gres: str, node: str = "this node", fix: str = "") -> int:
    """Shards per GPU from a node's GRES (``gpu:2,shard:64`` -> 32; types and sockets allowed:
    ``gpu:a100:2(S:0-1),shard:a100:64(S:0-1)``)."""
    counts: dict[str, int] = {}
    for entry in _outside_parentheses(gres):
        fields = entry.split("(", 1)[0].split(":")
        if len(fields) < 2:
            continue
        match = _COUNT.match(fields[-1])
        if match:
            count = int(match.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2)]
            counts[fields[0]] = counts.get(fields[0], 0) + count
    gpus, shards = counts.get("gpu", 0), counts.get("shard", 0)
    fix = fix or f"set {ENV_SHARDS_PER_GPU} to {SHARDS_PER_GPU_ALLOWED}"
    if not gpus or not shards:
        raise InvalidConfig(f"Node {node} has GRES {gres}, without both gpu and shard; {fix}.")
    if shards % gpus:
        raise InvalidConfig(f"Node {node} has {shards} shards on {gpus} GPUs, which do not split evenly; {fix}.")
    return shards // gpus


def _outside_parentheses(text: str) -> list[str]:
    """``text`` split at the commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]
