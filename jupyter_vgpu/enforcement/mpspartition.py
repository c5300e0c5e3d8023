"""MPS memory partitioning (driver r615 / CUDA 13.4): the driver holds every process of the slice
to the slice's memory, all device memory counted, through a cgroup of the slice's own.

Where an MPS control daemon serves the GPU and the driver offers memory partitioning to the
process that places slices (root: a root server, or the node broker; ``gpus.memory_cgroups``), a slice
gets a cgroup with its memory as the hard and soft limit on each of its GPUs. Its processes join
that cgroup as they start (the start-up hook, and ``jupyter vgpu run`` before it starts the
command), so children are held too; the MPS server also gets the slice's thread percentage and,
as a second line, the pinned limit of the MPS tier. A process that could not join says so, and
is held by the frameworks' limits and the MPS pinned limit only.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..units import format_bytes
from .base import Enforcement, PlacedGPU, Tier
from .mps import MPS, sm_share

#: Set in the slice's environment: its processes join the slice's cgroup at start.
ENV_JOIN = "JUPYTER_VGPU_PARTITION"
#: Set by a process that could not join: why (``ledger.join.join_here``).
ENV_PROBLEM = "JUPYTER_VGPU_PARTITION_PROBLEM"


def in_partition(slice_id: str, pid: int | str = "self") -> bool:
    """Whether process ``pid`` is in the slice's cgroup (``gpus.memory_cgroups`` names it after the
    slice: its cgroup v2 line in /proc ends with the slice id)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return False
    return bool(slice_id) and any(line.startswith("0::") and line.rstrip().endswith(f"/{slice_id}") for line in lines)


def problem(env: Mapping[str, str]) -> str | None:
    """Why this process is not held by its slice's memory partition (None: it is)."""
    slice_id = env.get(ENV_JOIN, "")
    if in_partition(slice_id):
        return None
    return env.get(ENV_PROBLEM) or "this process is not in the slice's cgroup"


class MPSPartition(Enforcement):
    tier = Tier.MPS_PARTITION
    hard = True
    variables = (*MPS.variables, ENV_JOIN, ENV_PROBLEM)

    def applies(self, gpus: list[PlacedGPU], mig_devices: int) -> bool:
        if mig_devices or not gpus:
            return False  # not with MIG (NVIDIA: MIG handles are not supported)
        return all(g.mps and getattr(g, "memory_partitioning", None) for g in gpus)

    def environment(
        self, memory: tuple[int, ...], fraction: float, *, slice_id: str = "", folder: str = "", setup: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        return {**MPS().environment(memory, fraction), ENV_JOIN: slice_id}

    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        return "enforced (MPS memory partitioning)"

    fallback = "MPS's pinned limit"  # the MPS tier's variables stay set

    def not_held(self, env: Mapping[str, str]) -> str | None:
        return problem(env)

    def inside(self, devices: tuple[str, ...], memory_reserved: int | None, env: Mapping[str, str]) -> str | None:
        if why := problem(env):  # what holds it then is the MPS tier's limit
            held = MPS().inside(devices, memory_reserved, env)
            return f"the MPS server only: {why}, so the driver does not count all of this kernel's memory; {held}"
        threads = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "")
        return (
            f"the driver refuses allocations past {format_bytes(memory_reserved)} per GPU for every process of "
            f"this kernel (its cgroup's memory limit, all device memory counted), and MPS runs it on {threads}% of the SMs"
        )

    def share_note(self, fraction: float | None = None, percentage: int | None = None) -> str:
        share = sm_share(fraction, percentage)
        return f"memory, enforced by the driver for all device memory (MPS memory partitioning), and {share} (MPS)"
