"""MPS memory partitioning (driver r615 / CUDA 13.4): a memory limit per slice that the driver
enforces for all device memory of every process in the slice's cgroup.

NVIDIA's MPS v3 memory partitioning (docs.nvidia.com/deploy/mps, "MPS v3 Memory Partitioning")
limits a cgroup v2 group's device memory on each GPU: the hard limit fails allocations past it
(``dmem.max`` under the kernel's dmem controller, Linux >= 6.14; older kernels get the driver's
own fallback backend), the soft limit is what the group is guaranteed (``dmem.min``). NVML sets
both for a cgroup by its path (``nvmlDeviceSetMemoryLimits_v1``, root only); removing the cgroup
clears them. Not on MIG devices.

One cgroup per slice, ``<cgroup root>/jupyter-vgpu/<slice id>``, with soft = hard = the slice's
memory on each of its GPUs (the ledger guarantees that memory, so it is both the guarantee and
the cap); an elastic slice's hard limit is its limit, and its soft limit its request (issue 42). The slice's processes join it when they start (``ledger.join.enter_here``, which asks the tier: a process that
may move itself, root; otherwise the node broker, root, moves the process that asks), their
children inherit it, and it is removed with the slice. This module is the mechanism; the tier
(``enforcement.mpspartition``) is the words and the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import VGPUError
from ..units import MiB, format_bytes, shorten

ENV_CGROUP_ROOT = "JUPYTER_VGPU_CGROUP_ROOT"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
#: The cgroup that holds one cgroup per slice, under the cgroup root.
PARENT = "jupyter-vgpu"
_SLICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class PartitionError(VGPUError):
    """A slice's memory partition could not be set up or joined (one sentence, with the fix)."""


def cgroup_root(env: Mapping[str, str] | None = None) -> Path:
    """Where the cgroup v2 hierarchy is mounted (``JUPYTER_VGPU_CGROUP_ROOT``, default /sys/fs/cgroup)."""
    return Path((os.environ if env is None else env).get(ENV_CGROUP_ROOT, "").strip() or DEFAULT_CGROUP_ROOT)


def manage_problem(root: Path | None = None) -> str | None:
    """Why this process cannot give slices a cgroup of their own under ``root`` (None: it can)."""
    root = cgroup_root() if root is None else root
    if not (root / "cgroup.controllers").is_file():
        return f"{root} is not a cgroup v2 hierarchy (no cgroup.controllers there)"
    parent = root / PARENT
    where = parent if parent.is_dir() else root
    if not os.access(where, os.W_OK | os.X_OK):
        return f"this process may not create cgroups in {where} (setting memory limits needs root, or the node broker)"
    return None


def dmem_regions(root: Path | None = None) -> dict[str, int]:
    """The NVIDIA regions the kernel's dmem controller knows (``dmem.capacity`` of the root
    cgroup: ``nvidia/<PCI address>/vidmem <bytes>``), by normalised PCI address. Empty where the
    kernel has no dmem controller (the driver then uses its own fallback)."""
    root = cgroup_root() if root is None else root
    regions: dict[str, int] = {}
    try:
        text = (root / "dmem.capacity").read_text(errors="replace")
    except OSError:
        return regions
    for line in text.splitlines():
        name, _, size = line.strip().partition(" ")
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "nvidia" and size.strip().isdigit():
            regions[pci_address(parts[1])] = int(size)
    return regions


def pci_address(text: str) -> str:
    """``00000000:01:00.0`` (NVML's bus id) and ``0000:01:00.0`` (the kernel's) as one form."""
    parts = text.strip().lower().split(":")
    try:
        return (
            f"{int(parts[0], 16):04x}:{int(parts[1], 16):02x}:{parts[2]}" if len(parts) == 3 else text.strip().lower()
        )
    except ValueError:
        return text.strip().lower()


def supported(nvml: Any, handle: Any, root: Path | None = None) -> bool:
    """Whether the driver offers memory partitioning on this GPU: NVML answers the limits of the
    root cgroup (drivers before r615 have no such call; MIG devices refuse it)."""
    try:
        limits = nvml.c_nvmlGetMemoryLimits_v1_t()
        limits.nameSpace = str(cgroup_root() if root is None else root).encode()
        nvml.nvmlDeviceGetMemoryLimits_v1(handle, limits)
    except Exception:  # AttributeError (nvidia-ml-py too old), NVMLError (FunctionNotFound, NotSupported...)
        return False
    return True


def _limits(nvml: Any, handle: Any, cgroup: Path) -> tuple[int, int, int]:
    """(soft, hard, used) of ``cgroup`` on one GPU, as the driver keeps them."""
    now = nvml.c_nvmlGetMemoryLimits_v1_t()
    now.nameSpace = str(cgroup).encode()
    nvml.nvmlDeviceGetMemoryLimits_v1(handle, now)
    return int(now.softLimit), int(now.hardLimit), int(now.currentUsed)


def _set(nvml: Any, handle: Any, cgroup: Path, soft: int, hard: int) -> None:
    limits = nvml.c_nvmlSetMemoryLimits_v1_t()
    limits.nameSpace = str(cgroup).encode()
    limits.softLimit = soft
    limits.hardLimit = hard
    nvml.nvmlDeviceSetMemoryLimits_v1(handle, limits)


def set_limits(cgroup: Path, limits: Iterable[tuple[Any, Any, int, int]]) -> None:
    """Soft and hard limit of ``cgroup`` on each GPU (``limits``: NVML module, device handle,
    soft and hard bytes; 0 on a GPU that is not the slice's), read back to be sure they took. Never below what
    the cgroup uses now; on any refusal the limits set so far are put back as they were."""
    done: list[tuple[Any, Any, int, int]] = []
    try:
        for nvml, handle, guaranteed, amount in limits:
            soft, hard, used = _limits(nvml, handle, cgroup)
            if amount and used > amount:
                raise PartitionError(
                    f"The slice's processes use {format_bytes(used)} on a GPU where its limit would be {format_bytes(amount)}; "
                    "free memory first (or restart the kernel), then resize."
                )
            _set(nvml, handle, cgroup, min(guaranteed, amount), amount)
            done.append((nvml, handle, soft, hard))
            kept = _limits(nvml, handle, cgroup)[1]
            if not amount - MiB <= kept <= amount:  # the driver may round to its page size
                raise PartitionError(
                    f"The driver keeps {format_bytes(kept)} as the limit of {cgroup} where {format_bytes(amount)} was set."
                )
    except Exception as error:
        for nvml, handle, soft, hard in reversed(done):
            try:
                _set(nvml, handle, cgroup, soft, hard)
            except Exception:
                pass  # the cgroup goes with the slice, and its limits with it
        if isinstance(error, PartitionError):
            raise
        raise PartitionError(f"The driver refused a memory limit for {cgroup}: {error}.") from None


def parent_cgroup(root: Path | None = None) -> Path:
    """The cgroup that holds the slices' cgroups."""
    return (cgroup_root() if root is None else root) / PARENT


def slice_cgroup(slice_id: str, root: Path | None = None) -> Path:
    """The cgroup of one slice."""
    if not _SLICE_ID.fullmatch(slice_id):
        raise PartitionError(f"Slice id {shorten(slice_id)} cannot name a cgroup.")
    return parent_cgroup(root) / slice_id


def create(slice_id: str, limits: Iterable[tuple[Any, Any, int, int]], root: Path | None = None) -> Path:
    """The slice's cgroup with its limit on each GPU (see :func:`set_limits`); set again in place
    (a resize) where it exists. A cgroup made here and refused its limits is removed."""
    cgroup = slice_cgroup(slice_id, root)
    made = not cgroup.is_dir()
    try:
        # Only the manager (root) looks inside: a slice's cgroup.procs lists its user's pids, and
        # its processes know their cgroup from /proc/self/cgroup.
        cgroup.parent.mkdir(mode=0o711, exist_ok=True)
        os.chmod(cgroup.parent, 0o711)
        _enable_dmem(cgroup.parent)
        cgroup.mkdir(mode=0o700, exist_ok=True)
        os.chmod(cgroup, 0o700)
    except OSError as error:
        raise PartitionError(f"Cannot create the slice's cgroup {cgroup}: {error.strerror or error}.") from None
    try:
        set_limits(cgroup, limits)
    except PartitionError:
        if made:
            remove(slice_id, root)
        raise
    return cgroup


def _enable_dmem(parent: Path) -> None:
    """Hand the dmem controller down to the slices' cgroups where the kernel offers it to ours
    (the admin enables it below the root: docs/hard-limits.md); the driver's fallback needs none."""
    try:
        offered = "dmem" in (parent / "cgroup.controllers").read_text().split()
        if offered and "dmem" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+dmem\n")
    except OSError:
        pass  # not offered here: the limit then goes through the driver's own backend


def move(cgroup: Path, pid: int) -> None:
    """Put process ``pid`` (and the children it starts from now on) into ``cgroup``."""
    try:
        (cgroup / "cgroup.procs").write_text(f"{int(pid)}\n")
    except OSError as error:
        raise PartitionError(f"Cannot move process {pid} into {cgroup}: {error.strerror or error}.") from None


def remove(slice_id: str, root: Path | None = None) -> bool:
    """Remove the slice's cgroup (its limits go with it). False while a process is still in it
    (it goes at the next sweep); True when it is gone."""
    try:
        os.rmdir(slice_cgroup(slice_id, root))
    except FileNotFoundError:
        return True
    except PartitionError:
        return True  # never a name we made
    except OSError:
        return False  # in use (EBUSY), not ours to remove, or the file system says no: the next sweep
    return True


def sweep(live: Iterable[str], root: Path | None = None) -> list[str]:
    """Remove the cgroups of slices that no longer exist (left by a crash, or busy when their
    slice ended); returns the ids removed."""
    parent = parent_cgroup(root)
    keep = set(live)
    try:
        names = [p.name for p in parent.iterdir() if p.is_dir()]
    except OSError:
        return []
    return [name for name in names if name not in keep and _SLICE_ID.fullmatch(name) and remove(name, root)]


__all__ = [
    "ENV_CGROUP_ROOT",
    "PARENT",
    "PartitionError",
    "cgroup_root",
    "create",
    "dmem_regions",
    "manage_problem",
    "move",
    "parent_cgroup",
    "remove",
    "set_limits",
    "slice_cgroup",
    "supported",
    "sweep",
]
