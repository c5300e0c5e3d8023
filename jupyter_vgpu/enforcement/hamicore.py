"""HAMi-core: a limit a notebook cannot lift, on any NVIDIA GPU, without Kubernetes.

HAMi-core (``libvgpu.so``, Project-HAMi/HAMi-core, the interposer HAMi and KAI use inside pods) is
preloaded into the slice's processes and refuses CUDA allocations beyond the limit it reads from
``CUDA_DEVICE_MEMORY_LIMIT_<ordinal>`` (whole MiB with an ``m``: it reads ``4GiB`` as 4 bytes and
``1.5g`` as 1 GiB). Processes sharing one ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` file share one budget
and the first fixes the limit in it, so each slice gets its own cache file, private to its user
(0600 in the 0700 reports folder), named by its size (a resize starts a new one) and removed with
the slice. The admin builds the library (upstream's ``build.sh``; no registry ships it) and names
it: ``c.VGPU.hami_core_library`` or ``JUPYTER_VGPU_HAMI_CORE``.

What it does not cover is said wherever the tier is shown: allocations from CUDA's stream-ordered
pools (``cuMemAllocFromPoolAsync``: TensorFlow's and JAX's async allocators, which the allocator
guard turns off) and its SM limiter (only device 0, so not set here).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..units import MiB, format_bytes
from .base import Enforcement, PlacedGPU, Tier

ENV_LIBRARY = "JUPYTER_VGPU_HAMI_CORE"
#: Set with the variables below: they are this tier's, not a pod's (HAMi's) or the user's.
MARK = "JUPYTER_VGPU_HAMI_PRELOADED"


def library() -> str:
    """The configured HAMi-core library ('' when none)."""
    return os.environ.get(ENV_LIBRARY, "").strip()


def library_problem(path: str) -> str | None:
    """Why ``path`` cannot be preloaded, in one sentence; None when it can be tried. Read again
    only when the file changes (placement and every view ask, the sidebar every few seconds)."""
    if not path:
        return None
    try:
        st = os.stat(path)
        stamp: tuple[int, ...] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = ()
    known = _problems.get(path)
    if known is not None and known[0] == stamp and stamp:
        return known[1]
    problem = _read_problem(path)
    _problems[path] = (stamp, problem)
    return problem


_problems: dict[str, tuple[tuple[int, ...], str | None]] = {}  # path -> (file's stamp, problem)


def _read_problem(path: str) -> str | None:
    where = f"{ENV_LIBRARY} / c.VGPU.hami_core_library {path}"  # the admin's own setting: shown whole
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except FileNotFoundError:
        return f"{where} does not exist; build HAMi-core (its build.sh) and name libvgpu.so, or unset it."
    except OSError as error:
        return f"{where} cannot be read ({error.strerror}); slices stay cooperative."
    if magic != b"\x7fELF":
        return f"{where} is not a shared library (no ELF header); name the libvgpu.so HAMi-core's build.sh made."
    return None


def cache_path(folder: str | Path, slice_id: str, memory: tuple[int, ...]) -> Path:
    """The slice's own budget file in ``folder`` (the slice's private reports folder), by size: a
    resized slice starts a new one."""
    return Path(folder) / f"{slice_id}.{max(memory) // MiB}m.hami.cache"


def loaded_in_this_process(path: str) -> bool:
    """Whether ``path`` is mapped into this process (the preload took)."""
    try:
        with open("/proc/self/maps") as maps:
            real = os.path.realpath(path)
            return any(line.rstrip().endswith((path, real)) for line in maps)
    except OSError:
        return False


_checked: list[str | None] = []  # this process's self-check, once


def self_check(env: Mapping[str, str] | None = None) -> str | None:
    """Why HAMi-core's limit did not take in this process (None: it did, or it cannot be told
    here because no CUDA driver is installed). Asks the driver as a process of the slice sees it:
    ``cuDeviceTotalMem`` of its first GPU (no CUDA context is created) must be the limit, which
    HAMi-core reports in place of the card's memory. Done once per process."""
    if _checked:
        return _checked[0]
    env = os.environ if env is None else env
    result = _check(env)
    _checked.append(result)
    return result


def _check(env: Mapping[str, str]) -> str | None:
    import ctypes

    path = library() or env.get("LD_PRELOAD", "")
    if not loaded_in_this_process(path):
        return f"HAMi-core ({path}) did not load in this kernel"
    wanted = env.get("CUDA_DEVICE_MEMORY_LIMIT_0", "")
    if not (wanted.endswith("m") and wanted[:-1].isdigit()):
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None  # no driver here (simulated GPUs): nothing to ask
    device, total = ctypes.c_int(0), ctypes.c_size_t(0)
    mask = os.umask(0o077)
    os.umask(mask)
    try:
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        if cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) != 0:
            return None
    finally:
        # HAMi-core sets the process's umask to 000 as CUDA starts (it creates its budget file so)
        # and leaves it: every file the kernel wrote from then on would be world-writable.
        os.umask(mask)
    limit = int(wanted[:-1]) * MiB
    if abs(total.value - limit) > MiB:
        return (
            f"HAMi-core's limit did not take: CUDA reports {format_bytes(total.value)} on the slice's first GPU "
            f"where HAMi-core would report its limit, {format_bytes(limit)}"
        )
    return None


class HAMiCore(Enforcement):
    tier = Tier.HAMI_CORE
    hard = True
    variables = ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "LIBCUDA_LOG_LEVEL", MARK)

    def set_here(self, env: Mapping[str, str]) -> set[str]:
        if MARK not in env:
            return set()  # HAMi's own variables in a pod, or the user's LD_PRELOAD: not ours
        return {"LD_PRELOAD", *(name for name in env if re.fullmatch(r"CUDA_DEVICE_MEMORY_LIMIT_\d+", name))}

    def applies(self, gpus: list[PlacedGPU], mig_devices: int) -> bool:
        if mig_devices or not gpus or any(g.mig_mode for g in gpus):
            return False
        if any(getattr(g, "pod_share", None) or getattr(g, "sm_limit", None) for g in gpus):
            return False  # in a HAMi pod: HAMi already enforces the pod's share with the same library
        path = library()
        return bool(path) and library_problem(path) is None

    def environment(self, memory: tuple[int, ...], fraction: float, *, slice_id: str = "", folder: str = "") -> dict[str, str]:
        env = {
            MARK: "1",
            "LD_PRELOAD": library(),
            "LIBCUDA_LOG_LEVEL": "0",  # HAMi-core's own messages stay out of the notebook
            # whole MiB, rounded down, per device ordinal the process sees
            **{f"CUDA_DEVICE_MEMORY_LIMIT_{ordinal}": f"{max(1, amount // MiB)}m" for ordinal, amount in enumerate(memory)},
        }
        if slice_id and folder:
            cache = cache_path(folder, slice_id, memory)
            cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(cache.parent, 0o700)
            fd = os.open(cache, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o600)  # before HAMi-core makes it 0666
            os.close(fd)
            os.chmod(cache, 0o600)
            env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(cache)
        return env

    def describe(self, mig_profiles: tuple[str, ...] = ()) -> str:
        return "enforced (HAMi-core)"

    def not_held(self, env: Mapping[str, str]) -> str | None:
        return self_check(env)

    def cuda_total(self, reserved: int, total: int) -> int:
        return max(1, reserved // MiB) * MiB  # HAMi-core reports its limit as the device's memory

    def inside(self, devices: tuple[str, ...], memory_reserved: int | None, env: Mapping[str, str]) -> str | None:
        problem = self_check(env)
        if problem:
            return (
                f"nothing: {problem}, so the slice is cooperative here (framework limits only); "
                "restart the kernel, and ask the admin to check the library"
            )
        return (
            f"HAMi-core refuses CUDA allocations past {format_bytes(memory_reserved)} per GPU "
            f"(CUDA_DEVICE_MEMORY_LIMIT_0={env.get('CUDA_DEVICE_MEMORY_LIMIT_0', '?')}), except from CUDA's async pools"
        )

    def share_note(self, fraction: float | None = None, percentage: int | None = None) -> str:
        return (
            "memory, enforced by HAMi-core for every CUDA allocation except CUDA's async pools "
            "(TensorFlow's and JAX's async allocators, which the allocator guard turns off); compute is shared"
        )
