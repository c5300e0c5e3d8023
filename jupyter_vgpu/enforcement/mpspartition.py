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

from collections.abc import Callable, Collection, Mapping, MutableMapping

from ..units import format_bytes
from .base import Enforcement, HeldSlice, PlacedGPU, Tier, Where
from .mps import MPS, sm_share

#: Set in the slice's environment: its processes join the slice's cgroup at start.
ENV_JOIN = "JUPYTER_VGPU_PARTITION"
#: Set by a process that could not join: why (:meth:`MPSPartition.enter`).
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
    """The slice's cgroup (``gpus.memory_cgroups``) is its hold: made with the slice's memory as the
    driver's limit on each of its GPUs when its first process joins, changed with a resize, removed
    when the slice ends (or, busy then, at a later sweep). Only the process that keeps the book
    (root: a root server, the node broker) manages cgroups; a broker's client asks it to join."""

    tier = Tier.MPS_PARTITION
    hard = True
    bursts = True  # the driver's hard limit is the limit, its soft limit (guaranteed) the request
    variables = (*MPS.variables, ENV_JOIN, ENV_PROBLEM)
    enters = True

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

    # -- the slice's life ------------------------------------------------------------------------
    @staticmethod
    def _set_limits(slice_: HeldSlice, where: Where) -> None:
        """The slice's cgroup with its memory on each of its GPUs as the limit (0 on the others)."""
        from ..gpus import memory_cgroups

        assert where.hardware is not None
        amounts = {gpu: (guaranteed, cap) for gpu, guaranteed, cap in zip(slice_.gpus, slice_.memory, slice_.memory_allowed)}
        memory_cgroups.create(slice_.id, where.hardware.partition_limits(amounts))

    def resized(self, slice_: HeldSlice, where: Where) -> None:
        from ..gpus import memory_cgroups

        if where.hardware is not None and memory_cgroups.slice_cgroup(slice_.id).is_dir():
            self._set_limits(slice_, where)  # the driver's limit follows (a refusal undoes the resize)

    def ended(self, slice_: HeldSlice, where: Where) -> None:
        from ..gpus import memory_cgroups

        if where.hardware is not None:
            memory_cgroups.remove(slice_.id)  # never raises; one still in use goes at a later sweep

    def sweep(self, live: Collection[str], where: Where) -> None:
        from ..gpus import memory_cgroups

        if where.hardware is not None and memory_cgroups.parent_cgroup().is_dir():
            memory_cgroups.sweep(live)  # cgroups left by a crash, or busy when their slice ended

    def join(self, slice_: HeldSlice, pid: int, where: Where) -> str:
        from ..gpus import memory_cgroups

        if where.hardware is None:
            return super().join(slice_, pid, where)
        cgroup = memory_cgroups.slice_cgroup(slice_.id)
        if not cgroup.is_dir():
            self._set_limits(slice_, where)
        memory_cgroups.move(cgroup, pid)
        return str(cgroup)

    def enter(self, env: MutableMapping[str, str], join: Callable[[], str | None]) -> str | None:
        """Join the slice's cgroup before any of the process's code runs. A child of a process that
        joined is in it already; one whose parent could not join does not try again (the reason is
        in ``JUPYTER_VGPU_PARTITION_PROBLEM``, which ``%vgpu`` says), so a broker that is down costs
        one wait in a process tree, not one per process."""
        slice_id = env.get(ENV_JOIN, "")
        if not slice_id or in_partition(slice_id):
            env.pop(ENV_PROBLEM, None)
            return None
        if env.get(ENV_PROBLEM):
            return env[ENV_PROBLEM]  # this process or its parent tried already
        why = join()
        if why is None:
            if in_partition(slice_id):
                env.pop(ENV_PROBLEM, None)
                return None
            why = "the process is not in the slice's cgroup after joining it"
        env[ENV_PROBLEM] = why
        return why
