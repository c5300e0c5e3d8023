"""HAMi-core: a limit a notebook cannot lift, on any NVIDIA GPU, without Kubernetes.

HAMi-core (``libvgpu.so``, Project-HAMi/HAMi-core, the interposer HAMi and KAI use inside pods) is
preloaded into the slice's processes and refuses CUDA allocations beyond the limit it reads from
``CUDA_DEVICE_MEMORY_LIMIT_<ordinal>`` (whole MiB with an ``m``: it reads ``4GiB`` as 4 bytes and
``1.5g`` as 1 GiB). Processes sharing one ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` file share one budget
and the first fixes the limit in it, so each slice gets its own cache file, private to its user
(0600 in the 0700 reports folder), named by its size (a resize starts a new one) and removed with
the slice. The admin builds the library (upstream's ``build.sh``; no registry ships it) and names
it: ``c.VGPU.hami_core_library`` or ``JUPYTER_VGPU_HAMI_CORE``. It must be a shared library of this
machine that exports ``cuMemAlloc_v2`` (read from its ELF dynamic symbols, never loaded to find out):
anything else is one sentence and slices stay cooperative.

The library is the placing process's (a node broker's, which the user's own settings may lack): it
travels with the slice (``Slice.tier_setup``) to whoever builds the slice's environment, and a
process that cannot preload it there (unreadable, missing) is told so, as cooperative.

What it does not cover is said wherever the tier is shown: allocations from CUDA's stream-ordered
pools (``cuMemAllocFromPoolAsync``: TensorFlow's and JAX's async allocators, which the allocator
guard turns off) and its SM limiter (only device 0, so not set here).
"""

from __future__ import annotations

import os
import re
import stat
import struct
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import BinaryIO

from ..units import MiB, format_bytes
from .base import Enforcement, HeldSlice, PlacedGPU, Tier, Where

ENV_LIBRARY = "JUPYTER_VGPU_HAMI_CORE"
#: Set with the variables below: they are this tier's, not a pod's (HAMi's) or the user's. Its
#: value is the library the slice was given, so a process can tell whether it loaded.
MARK = "JUPYTER_VGPU_HAMI_PRELOADED"
#: Set instead of ``LD_PRELOAD`` where the slice's library cannot be preloaded: why.
ENV_PROBLEM = "JUPYTER_VGPU_HAMI_PROBLEM"
#: What HAMi-core interposes first: a library that does not export it is not HAMi-core.
SYMBOL = b"cuMemAlloc_v2"


def library() -> str:
    """The configured HAMi-core library ('' when none)."""
    return os.environ.get(ENV_LIBRARY, "").strip()


def library_problem(path: str) -> str | None:
    """Why ``path`` cannot be preloaded, in one sentence naming the setting; None when it can."""
    what = unusable(path)
    if what is None:
        return None
    where = f"{ENV_LIBRARY} / c.VGPU.hami_core_library {path}"  # the admin's own setting: shown whole
    if what == MISSING:
        return f"{where} {what}; build HAMi-core (its build.sh) and name libvgpu.so, or unset it."
    return f"{where} {what}; name the libvgpu.so HAMi-core's build.sh made (a shared library of this machine exporting cuMemAlloc_v2)."


MISSING = "does not exist"


def unusable(path: str) -> str | None:
    """What is wrong with ``path`` as HAMi-core's library (words after its name; None: nothing).
    Read again only when the file changes (placement and every view ask, the sidebar every few
    seconds)."""
    if not path:
        return None
    try:
        st = os.stat(path)
        stamp: tuple[int, ...] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
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
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "is not a regular file"
        with open(path, "rb") as handle:
            return _not_hami_core(handle)
    except FileNotFoundError:
        return MISSING
    except OSError as error:
        return f"cannot be read ({error.strerror})"


# ELF: e_type of a shared object (a PIE program is one too: hence the symbol); section type of the
# dynamic symbol table; a symbol's binding (GLOBAL, WEAK) and "undefined" section index.
ET_DYN, SHT_DYNSYM, EXPORTED, SHN_UNDEF = 3, 11, (1, 2), 0


def _this_machine() -> tuple[int, int, int] | None:
    """ELF class, byte order and machine of this process's program (None: cannot be told)."""
    try:
        with open("/proc/self/exe", "rb") as handle:
            header = handle.read(20)
    except OSError:
        return None
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    return header[4], header[5], struct.unpack_from("<H" if header[5] == 1 else ">H", header, 18)[0]


def _not_hami_core(handle: BinaryIO) -> str | None:
    """What the file open in ``handle`` is where it is not a shared library of this machine
    exporting :data:`SYMBOL` (words after its name); None: it is."""
    header = handle.read(64)
    if header[:4] != b"\x7fELF":
        return "is not a shared library (no ELF header)"
    klass, order = header[4], header[5]
    if klass not in (1, 2) or order not in (1, 2) or len(header) < (64 if klass == 2 else 52):
        return "is a damaged ELF file"
    end, wide = ("<" if order == 1 else ">"), klass == 2
    e_type, machine = struct.unpack_from(end + "HH", header, 16)
    here = _this_machine()
    if here is not None and here != (klass, order, machine):
        return f"is built for another machine (ELF machine {machine}, class {klass}; this one runs {here[2]}, class {here[0]})"
    if e_type != ET_DYN:
        return "is an ELF program, not a shared library" if e_type == 2 else f"is not a shared library (ELF type {e_type})"
    try:
        if wide:
            (offset,) = struct.unpack_from(end + "Q", header, 0x28)
            entry, count = struct.unpack_from(end + "HH", header, 0x3A)
            layout, symbol = end + "IIQQQQIIQQ", end + "IBBHQQ"
        else:
            (offset,) = struct.unpack_from(end + "I", header, 0x20)
            entry, count = struct.unpack_from(end + "HH", header, 0x2E)
            layout, symbol = end + "IIIIIIIIII", end + "IIIBBH"
        handle.seek(offset)
        table = handle.read(entry * count)
        sections = [struct.unpack_from(layout, table, i * entry) for i in range(count)]
        for _, kind, _, _, start, size, link, _, _, _ in sections:
            if kind != SHT_DYNSYM or link >= count:
                continue
            handle.seek(start)
            symbols = handle.read(size)
            handle.seek(sections[link][4])
            names = handle.read(sections[link][5])
            step = struct.calcsize(symbol)
            for values in struct.iter_unpack(symbol, symbols[: len(symbols) // step * step]):
                name, info, index = (values[0], values[1], values[3]) if wide else (values[0], values[3], values[5])
                if index != SHN_UNDEF and info >> 4 in EXPORTED and names[name : name + len(SYMBOL) + 1] == SYMBOL + b"\0":
                    return None
    except struct.error:
        return "is a damaged ELF file"
    return "is a shared library (or a position-independent program) that does not export cuMemAlloc_v2, so it is not HAMi-core"


def cache_path(folder: str | Path, slice_id: str, memory: tuple[int, ...]) -> Path:
    """The slice's own budget file in ``folder`` (the slice's private reports folder), by size: a
    resized slice starts a new one."""
    return Path(folder) / f"{slice_id}.{max(memory) // MiB}m.hami.cache"


#: A budget file's name: the slice id, its size in MiB (see :func:`cache_path`).
CACHE_NAME = re.compile(r"([0-9a-f]{12})\.[0-9]+m\.hami\.cache")


def loaded_in_this_process(path: str) -> bool:
    """Whether ``path`` is mapped into this process (the preload took)."""
    if not path:
        return False
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

    if why := env.get(ENV_PROBLEM):
        return why  # said where the environment was made: the library cannot be preloaded here
    path = env.get(MARK) or library()
    if not path or not loaded_in_this_process(path):
        return f"HAMi-core ({path or 'no library named'}) did not load in this kernel"
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
    bursts = True  # CUDA_DEVICE_MEMORY_LIMIT_<n> is the limit
    variables = ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "LIBCUDA_LOG_LEVEL", MARK, ENV_PROBLEM)

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

    def setting_problem(self) -> str | None:
        return library_problem(library())

    def setup(self) -> dict[str, str]:
        return {"library": library()}

    def environment(
        self, memory: tuple[int, ...], fraction: float, *, slice_id: str = "", folder: str = "", setup: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        path = str((setup or self.setup()).get("library") or "")  # the placing process's library
        env = {
            MARK: path,
            "LIBCUDA_LOG_LEVEL": "0",  # HAMi-core's own messages stay out of the notebook
            # whole MiB, rounded down, per device ordinal the process sees
            **{f"CUDA_DEVICE_MEMORY_LIMIT_{ordinal}": f"{max(1, amount // MiB)}m" for ordinal, amount in enumerate(memory)},
        }
        if not path:
            env[ENV_PROBLEM] = f"HAMi-core's library is not named here ({ENV_LIBRARY} is unset)"
        elif what := unusable(path):  # this process's user may not read the placing side's file
            env[ENV_PROBLEM] = f"HAMi-core's library {path} {what} here"
        else:
            env["LD_PRELOAD"] = path
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

    def not_given(self, env: Mapping[str, str]) -> str | None:
        if why := env.get(ENV_PROBLEM):
            return why
        return None if env.get("LD_PRELOAD") else "HAMi-core is not in the command's LD_PRELOAD"

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

    # -- the slice's life: its budget files, in the owner's private folder -------------------------
    def ended(self, slice_: HeldSlice, where: Where) -> None:
        self.sweep_files(where.folder, keep=lambda slice_id: slice_id != slice_.id)

    def sweep(self, live: Collection[str], where: Where) -> None:
        alive = set(live)
        # a file younger than a minute may be a slice's granted after ``live`` was read
        self.sweep_files(where.folder, keep=alive.__contains__, older_than=60.0)

    @staticmethod
    def sweep_files(folder: str, keep: Callable[[str], bool], older_than: float = 0.0) -> None:
        """Remove the budget files in ``folder`` of the slices ``keep`` does not keep, at least
        ``older_than`` seconds old (never raises)."""
        if not folder:
            return
        now = time.time()
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            match = CACHE_NAME.fullmatch(name)
            if match and not keep(match.group(1)):
                try:
                    path = os.path.join(folder, name)
                    if older_than and now - os.lstat(path).st_mtime < older_than:
                        continue
                    os.unlink(path)
                except OSError:
                    pass  # gone meanwhile, or not ours to remove
