"""Issue 24 on a real GPU: the allocator matrix under each enforcement tier, whether a hard tier
counts the CUDA context against its limit, and what HAMi-core costs a short training loop.

Every cell is a real ``jupyter vgpu run -p 0.25 --gpu 0 -- python PROBE.py`` (the product's own
path: the slice's environment, the allocator guard, the start-up hook) with the admin's tier
choice (``JUPYTER_VGPU_TIERS``) naming one tier. The probe stops twice (its CUDA context up, then
its largest allocation held) so that this process reads NVML's per-process memory for its pid.

Tiers: cooperative always; mps where an MPS control daemon can be started (root and
``nvidia-cuda-mps-control``, as test_mps_gpu.py does); hami-core where
``JUPYTER_VGPU_TEST_HAMI_CORE`` names a built ``libvgpu.so``; mps-partition only where the
product reports that tier (``jupyter_vgpu.enforcement.TIERS``). Every cell, skipped ones with the
reason, goes into the figures (``tier_matrix``, ``tier_context_counted``, ``hami_core_overhead``).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.enforcement import TIERS
from jupyter_vgpu.enforcement.hamicore import library_problem
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.units import MiB

from .harness import installed, mps_control_daemon

#: The slice every cell runs in, and the GPU it is pinned to.
FRACTION = "0.25"
GPU = "0"
#: Seconds one probe process may run (a TensorFlow import on a GPU takes most of it).
PROBE_TIMEOUT = 240.0
#: Allocation steps: this size first, halved after each out-of-memory error down to the last.
CHUNK, MIN_CHUNK = 256 * MiB, 16 * MiB
#: Cooperative cells: NVML may exceed what the framework holds by allocator rounding and library
#: workspaces (as in test_sharing_gpu.py); XLA rounds its memory fraction (test_frameworks_gpu.py).
TOLERANCE = 64 * MiB
JAX_ROUNDING = 0.02

ENV_HAMI = "JUPYTER_VGPU_TEST_HAMI_CORE"
MARK = "VGPU-PROBE "
TIER_NAMES = ("cooperative", "mps", "hami-core", "mps-partition")
HARD_NAMES = ("mps", "hami-core", "mps-partition")
#: What the probe reports of its environment, before and after its framework's import.
WATCHED = (
    "JUPYTER_VGPU_TIER", "JUPYTER_VGPU_MEMORY_RESERVED", "JUPYTER_VGPU_MEMORY_LIMIT", "JUPYTER_VGPU_CONTEXT_ALLOWANCE",
    "JUPYTER_VGPU_GUARDED", "TF_GPU_ALLOCATOR", "XLA_PYTHON_CLIENT_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "CUPY_GPU_MEMORY_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0", "LD_PRELOAD",
)  # fmt: skip
#: The limits the slice's environment gives the frameworks and the tier, recorded with each cell.
LIMIT_VARIABLES = (
    "PYTORCH_CUDA_ALLOC_CONF", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "CUPY_GPU_MEMORY_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0",
)  # fmt: skip
#: Never inherited by a cell: each tier sets what it needs.
DROPPED = (
    "JUPYTER_VGPU_TIERS", "JUPYTER_VGPU_HAMI_CORE", "JUPYTER_VGPU_MPS", "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_LOG_DIRECTORY", "TF_GPU_ALLOCATOR", "XLA_PYTHON_CLIENT_ALLOCATOR", "JUPYTER_VGPU_SIMULATE",
    "JUPYTER_VGPU_BROKER",
)  # fmt: skip

# The probe's common part: its messages to this process, and CUDA's own view of free and total
# memory, read through the primary context the framework already made (never a new context).
COMMON = r"""
import ctypes, json, os, sys, time
spec = json.loads(sys.argv[1])

def say(kind, **data):
    sys.stdout.write("VGPU-PROBE " + json.dumps(dict(kind=kind, pid=os.getpid(), **data), default=str) + "\n")
    sys.stdout.flush()

def pause(kind, **data):
    say(kind, pause=True, **data)
    sys.stdin.readline()

def first_line(error):
    text = str(error).strip()
    return (type(error).__name__ + (": " + text.splitlines()[0] if text else ""))[:300]

def cuda_info():
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        if cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(device), 0):
            return None
        if cu.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) or not active.value:
            return None
        context = ctypes.c_void_p()
        if cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device):
            return None
        try:
            if cu.cuCtxPushCurrent_v2(context):
                return None
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            rc = cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
            return [free.value, total.value] if rc == 0 else None
        finally:
            cu.cuDevicePrimaryCtxRelease_v2(device)
    except Exception:
        return None

WATCHED = spec["watched"]
def seen():
    return {name: os.environ.get(name) for name in WATCHED}

# What jupyter_vgpu_startup.pth does in an installed wheel (scripts/gpu-tests runs the checkout
# from PYTHONPATH, where no .pth is read).
if "jupyter_vgpu.kernel.startup" in sys.modules:
    hook = "jupyter_vgpu_startup.pth"
else:
    from jupyter_vgpu.kernel import startup
    startup.activate()
    hook = "activated by the probe (no jupyter_vgpu_startup.pth in this environment)"
before = seen()
hami = None
if os.environ.get("JUPYTER_VGPU_TIER") == "hami-core":
    from jupyter_vgpu.enforcement.hamicore import self_check
    hami = self_check() or "ok"
# A hard tier's own word on whether it holds this process (Enforcement.not_held, where the product has it).
tier_check = None
try:
    from jupyter_vgpu.enforcement import TIERS
    for candidate in TIERS:
        if candidate.tier.value == os.environ.get("JUPYTER_VGPU_TIER") and candidate.hard and hasattr(candidate, "not_held"):
            tier_check = candidate.not_held(os.environ) or "held"
except Exception as error:
    tier_check = first_line(error)
"""

# Each framework: set up its CUDA context, allocate n bytes, tell its out-of-memory error, and
# say what it holds (its pool) and what it may hold (its cap).
FRAMEWORK_CODE = {
    "torch": r"""
import torch
if not torch.cuda.is_available():
    say("skip", reason="this PyTorch build sees no CUDA GPU"); sys.exit(0)
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
if spec["lift"]:
    torch.cuda.set_per_process_memory_fraction(1.0)
def alloc(n):
    block = torch.empty(n, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); return block
def is_oom(error):
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()
def pool():
    return int(torch.cuda.memory_reserved())
def cap():
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    return int(get() * torch.cuda.get_device_properties(0).total_memory) if get else None
POOL = "torch.cuda.memory_reserved()"
""",
    "tensorflow": r"""
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
if not gpus:
    say("skip", reason="this TensorFlow build sees no GPU"); sys.exit(0)
with tf.device("/GPU:0"):
    tf.zeros([1]).numpy()
def alloc(n):
    with tf.device("/GPU:0"):
        return tf.zeros([n // 4], tf.float32)
def is_oom(error):
    return isinstance(error, tf.errors.ResourceExhaustedError) or "out of memory" in str(error).lower()
def cap():
    config = tf.config.get_logical_device_configuration(gpus[0]) or []
    limit = getattr(config[0], "memory_limit", None) if config else None
    return int(limit) * 2**20 if limit else None
GROWTH = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true"
def pool():
    if not GROWTH and cap():
        return cap()  # the BFC allocator takes its whole memory_limit at the first op
    return int(tf.config.experimental.get_memory_info("GPU:0")["current"])
POOL = "the logical device's memory_limit (BFC takes it whole)" if not GROWTH else "get_memory_info current"
""",
    "jax": r"""
import jax, jax.numpy as jnp
if jax.default_backend() != "gpu":
    say("skip", reason=f"this jaxlib has no GPU backend ({jax.default_backend()})"); sys.exit(0)
jnp.zeros(1).block_until_ready()
def alloc(n):
    return jnp.zeros((n,), dtype=jnp.uint8).block_until_ready()
def is_oom(error):
    return "RESOURCE_EXHAUSTED" in str(error) or "out of memory" in str(error).lower()
def stats():
    return jax.devices()[0].memory_stats() or {}
def pool():
    found = stats()
    for key in ("pool_bytes", "bytes_reserved", "bytes_in_use"):
        if found.get(key):
            return int(found[key])
    return None
def cap():
    return int(stats().get("bytes_limit") or 0) or None
POOL = "memory_stats() pool_bytes"
""",
    "cupy": r"""
import cupy
try:
    cupy.cuda.runtime.getDeviceCount()
except Exception as error:
    say("skip", reason=f"CuPy sees no CUDA device ({first_line(error)})"); sys.exit(0)
cupy.zeros(1); cupy.cuda.Device().synchronize()
mempool = cupy.get_default_memory_pool()
def alloc(n):
    return cupy.empty(n, dtype=cupy.uint8)
def is_oom(error):
    text = str(error)
    return isinstance(error, cupy.cuda.memory.OutOfMemoryError) or "out of memory" in text.lower() or "cudaErrorMemoryAllocation" in text
def pool():
    return int(mempool.total_bytes())
def cap():
    return int(mempool.get_limit()) or None
POOL = "the default memory pool's total_bytes()"
""",
}

# Allocate in steps until refused (each refusal halves the step) or the card's size is reached.
FILL = r"""
after = seen()
record = None
try:
    from jupyter_vgpu.kernel.state import current
    state = current()
    found = state.records.get(spec["framework"]) if state is not None else None
    record = found.to_dict() if found is not None else None
except Exception as error:
    record = first_line(error)
pause("ready", hook=hook, before=before, after=after, hami=hami, tier_check=tier_check, record=record, pool=pool(), cap=cap(), cuda=cuda_info(), pool_is=POOL)
held, total, chunk, stop, error_text, oom = [], 0, spec["chunk"], "card", "", None
while chunk >= spec["min_chunk"] and total + chunk <= spec["card"]:
    try:
        held.append(alloc(chunk))
        total += chunk
    except Exception as error:
        if not is_oom(error):
            stop, error_text = "error", first_line(error)
            break
        stop = "oom"
        oom = {"attempted": chunk, "message": first_line(error), "pool": pool(), "cap": cap(), "cuda": cuda_info()}
        chunk //= 2
pause("peak", held=total, stop=stop, error=error_text, oom=oom, pool=pool(), cap=cap(), cuda=cuda_info())
say("done")
"""

# The context probe: the driver API only (no framework, no framework limit), one primary context.
CONTEXT_PROBE = (
    COMMON
    + r"""
cu = ctypes.CDLL("libcuda.so.1")
def call(name, *args):
    rc = getattr(cu, name)(*args)
    if rc:
        say("error", call=name, rc=rc); sys.exit(3)
call("cuInit", 0)
device, context = ctypes.c_int(), ctypes.c_void_p()
call("cuDeviceGet", ctypes.byref(device), 0)
call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
call("cuCtxSetCurrent", context)
def info():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    return [free.value, total.value] if cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0 else None
blocks = []
def alloc(n):
    pointer = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(n))
    if rc == 0:
        blocks.append(pointer)
    return rc
pause("ready", hook=hook, hami=hami, tier_check=tier_check, before=before, cuda=info())
limit = int(os.environ["JUPYTER_VGPU_MEMORY_LIMIT"])
allowance = int(os.environ["JUPYTER_VGPU_CONTEXT_ALLOWANCE"])
reserved = int(os.environ["JUPYTER_VGPU_MEMORY_RESERVED"])
first = alloc(limit)
second = alloc(allowance)
allocated = (limit if first == 0 else 0) + (allowance if second == 0 else 0)
last = 0
while allocated + spec["step"] <= reserved + spec["beyond"]:
    last = alloc(spec["step"])
    if last:
        break
    allocated += spec["step"]
pause("peak", first=first, second=second, allocated=allocated, last=last, cuda=info())
say("done")
"""
)

# A short training loop: a small MLP, fixed seed, synchronised every step.
TRAIN = (
    COMMON
    + r"""
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)
).cuda()
optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
loss_of = torch.nn.CrossEntropyLoss()
def step():
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    optimiser.zero_grad(set_to_none=True)
    loss = loss_of(model(x), y)
    loss.backward()
    optimiser.step()
    torch.cuda.synchronize()
    return loss
for _ in range(spec["warmup"]):
    step()
started = time.perf_counter()
for _ in range(spec["steps"]):
    loss = step()
seconds = time.perf_counter() - started
say("done", seconds=seconds, loss=float(loss), tier=os.environ.get("JUPYTER_VGPU_TIER"), hami=hami, hook=hook)
"""
)


# -- the tiers -----------------------------------------------------------------------------------


def product_tiers() -> dict[str, bool]:
    """The tiers the product reports, and whether each is hard."""
    return {t.tier.value: t.hard for t in TIERS}


def gpu0() -> Any:
    gpu = Inventory("").snapshot().find(GPU)
    if gpu is None:
        pytest.skip(f"NVML lists no GPU {GPU}")
    if gpu.mig_mode:
        pytest.skip(f"GPU {GPU} is in MIG mode: its slices are MIG devices (tier mig), outside this matrix")
    return gpu


def hami_library() -> str:
    path = os.environ.get(ENV_HAMI, "").strip()
    if not path:
        pytest.skip(
            f"{ENV_HAMI} is not set: name a libvgpu.so built with HAMi-core's build.sh to test the hami-core tier"
        )
    problem = library_problem(path)
    if problem:
        pytest.fail(f"{ENV_HAMI}={path}: {problem}")
    return path


@contextmanager
def tier_environment(tier: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of ``jupyter vgpu run`` for a slice of ``tier`` (skips where it cannot be had)."""
    gpu0()
    if tier not in product_tiers():
        pytest.skip(
            f"the product reports no {tier} tier (jupyter_vgpu.enforcement.TIERS: {', '.join(product_tiers())})"
        )
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(JUPYTER_VGPU_TIERS=tier, TF_CPP_MIN_LOG_LEVEL="3")
    if tier == "cooperative":
        env["JUPYTER_VGPU_MPS"] = "off"
        yield env
    elif tier == "hami-core":
        env.update(JUPYTER_VGPU_HAMI_CORE=hami_library(), JUPYTER_VGPU_MPS="off")
        yield env
    else:  # mps, and mps-partition (an MPS daemon; what else it needs, the product says by not giving it)
        with mps_control_daemon(tmp_path) as mps:
            env.update(mps)
            yield env


# -- running a probe under `jupyter vgpu run` ---------------------------------------------------


@dataclass
class Probe:
    """What one probe said (its messages, by kind), how it ended, and its stderr's tail."""

    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    returncode: int | None = None
    timed_out: bool = False
    stderr: str = ""
    seconds: float = 0.0

    def get(self, kind: str) -> dict[str, Any]:
        if kind not in self.messages:
            raise AssertionError(
                f"the probe never said {kind!r} (return code {self.returncode}, timed out {self.timed_out}, "
                f"said {sorted(self.messages)}); its stderr ends:\n{self.stderr}"
            )
        return self.messages[kind]


def run_probe(
    env: dict[str, str], code: str, spec: dict[str, Any], folder: Path,
    measure: Callable[[int], dict[str, Any]] | None = None, timeout: float = PROBE_TIMEOUT,
) -> Probe:  # fmt: skip
    """``jupyter vgpu run -p FRACTION --gpu GPU -- python PROBE.py SPEC``, the probe's ``code``
    written to a file in ``folder`` (a slice's holder names its command, in at most 4096
    characters); at each pause the probe makes, ``measure(pid)`` is merged into its message
    before it is let go on."""
    script = folder / f"vgpu-probe-{abs(hash(code)):x}.py"
    script.write_text(code)
    command = [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", FRACTION, "--gpu", GPU, "--",
               sys.executable, str(script), json.dumps(spec)]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # `run` and the probe in a group of their own, ended together on a timeout
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[str] = []

    def read_out() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    def read_err() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            errors.append(line)
            del errors[:-200]

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for reader in readers:
        reader.start()
    probe = Probe()
    deadline = started + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            probe.timed_out = True
            break
        if line is None:
            break
        if not line.startswith(MARK):
            continue
        message = json.loads(line[len(MARK) :])
        if message.get("pause"):
            if measure is not None:
                message.update(measure(int(message["pid"])))
            try:
                process.stdin.write("\n")
                process.stdin.flush()
            except OSError:
                pass
        probe.messages[message["kind"]] = message
    if probe.timed_out:
        os.killpg(process.pid, signal.SIGKILL)
    try:
        probe.returncode = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        probe.returncode = process.wait(timeout=30)
    for reader in readers:
        reader.join(timeout=5)
    probe.seconds = time.monotonic() - started
    probe.stderr = "".join(errors)[-3000:]
    return probe


def nvml_process(pid: int) -> int | None:
    """NVML's memory for ``pid`` on any GPU; None when NVML lists it nowhere or cannot tell."""
    found = [p.used for gpu in Inventory("").snapshot().gpus for p in gpu.processes if p.pid == pid]
    if not found or any(used is None for used in found):
        return None
    return sum(used or 0 for used in found)


def measure_nvml(pid: int, settle: float = 5.0) -> dict[str, Any]:
    """NVML's figure for ``pid`` once two readings agree (the driver updates it lazily), and
    whether an MPS server holds memory on GPU 0."""
    deadline = time.monotonic() + settle
    last = nvml_process(pid)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = nvml_process(pid)
        if now == last:
            break
        last = now
    gpu = Inventory("").snapshot().find(GPU)
    servers = [p for p in gpu.processes if p.mps_server] if gpu is not None else []
    return {"nvml": last, "mps_server": bool(servers), "mps_server_used": sum(p.used or 0 for p in servers)}


def context_of(nvml: int | None, pool: int | None) -> int | None:
    """The CUDA context, measured: NVML's memory for the process minus what its framework holds
    (None where NVML lists less than that: it does not see the whole process)."""
    if nvml is None or pool is None or nvml < pool:
        return None
    return nvml - pool


def mib_of(value: int | None) -> int | None:
    return None if value is None else round(value / MiB)


# -- 1. the allocator matrix -------------------------------------------------------------------


@dataclass(frozen=True)
class Allocator:
    """One column of the matrix: a framework, and what the user's environment sets for it."""

    name: str
    framework: str
    user_env: tuple[tuple[str, str], ...] = ()
    lift: bool = False  # the user lifts the framework's limit (torch.cuda.set_per_process_memory_fraction(1.0))


ALLOCATORS = (
    Allocator("tensorflow default", "tensorflow"),
    Allocator("tensorflow cuda_malloc_async", "tensorflow", (("TF_GPU_ALLOCATOR", "cuda_malloc_async"),)),
    Allocator("torch", "torch"),
    Allocator("jax default", "jax"),
    Allocator("jax cuda_async", "jax", (("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"),)),
    Allocator("cupy", "cupy"),
    Allocator("torch limit lifted", "torch", lift=True),
)


def stopped_by(peak: dict[str, Any], hard: bool) -> str:
    """What stopped the allocations: the framework's own limit, CUDA refusing (the tier's limit
    on a hard tier, the card otherwise), nothing (the card's size reached), or another error."""
    if peak["stop"] == "card":
        return "nothing (reached the card's size)"
    if peak["stop"] == "error":
        return f"error: {peak['error']}"
    oom = peak["oom"]
    cap, pool, cuda = oom.get("cap"), oom.get("pool"), oom.get("cuda")
    if cap and pool is not None:
        by_framework = pool + oom["attempted"] > cap - 8 * MiB
    elif cuda:
        by_framework = cuda[0] >= oom["attempted"]  # CUDA had room: the framework said no
    else:
        return f"out of memory (framework or CUDA: cannot tell): {oom['message']}"
    if by_framework:
        return "framework OOM"
    return "CUDA OOM (tier)" if hard else "CUDA OOM (card)"


def record_cell(figures: dict[str, Any], key: str, cell: dict[str, Any]) -> None:
    figures.setdefault("tier_matrix", {})[key] = cell


def cell_params() -> list[Any]:
    params = []
    for tier in TIER_NAMES:
        for allocator in ALLOCATORS:
            params.append(pytest.param(tier, allocator, id=f"{tier}-{allocator.name.replace(' ', '-')}"))
    return params


@pytest.mark.parametrize(("tier", "allocator"), cell_params())
def test_allocator_matrix_cell(
    tier: str, allocator: Allocator, real_gpu: Path, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """One cell: a process in a 1/4 slice of ``tier`` allocates with ``allocator`` until refused."""
    key = f"{tier} / {allocator.name}"
    if not installed(allocator.framework):
        record_cell(figures, key, {"skipped": f"{allocator.framework} is not installed"})
        pytest.skip(f"{allocator.framework} is not installed")
    with tier_environment(tier, tmp_path) as env:
        card = gpu0().memory_total
        hard = product_tiers()[tier]
        env.update(dict(allocator.user_env))
        spec = {"framework": allocator.framework, "lift": allocator.lift, "chunk": CHUNK, "min_chunk": MIN_CHUNK,
                "card": card, "watched": WATCHED}  # fmt: skip
        probe = run_probe(env, COMMON + FRAMEWORK_CODE[allocator.framework] + FILL, spec, tmp_path, measure_nvml)
    if "skip" in probe.messages:
        reason = probe.messages["skip"]["reason"]
        record_cell(figures, key, {"skipped": reason})
        pytest.skip(reason)
    ready, peak = probe.get("ready"), probe.get("peak")
    got = ready["after"]["JUPYTER_VGPU_TIER"]
    if tier == "mps-partition" and got != tier:
        reason = f"the product placed the slice as {got}, not mps-partition, with an MPS daemon running here"
        record_cell(figures, key, {"skipped": reason})
        pytest.skip(reason)
    reserved = int(ready["after"]["JUPYTER_VGPU_MEMORY_RESERVED"])
    limit = int(ready["after"]["JUPYTER_VGPU_MEMORY_LIMIT"])
    allowance = int(ready["after"]["JUPYTER_VGPU_CONTEXT_ALLOWANCE"])
    held, nvml, pool = peak["held"], peak["nvml"], peak["pool"]
    context = context_of(nvml, pool)
    # NVML judges; the framework's own count is a lower bound that must hold too (NVML may list the
    # pid with less than it holds, e.g. where an MPS server is charged for its clients).
    nvml_sees_all = nvml is not None and nvml >= held
    inside = held <= reserved and (nvml is None or nvml <= reserved)
    cell = {
        "tier": got,
        "reserved_mib": mib_of(reserved),
        "framework_limit_mib": mib_of(limit),
        "allowance_mib": mib_of(allowance),
        "held_mib": mib_of(held),
        "held_of_limit": round(held / limit, 3),
        "nvml_mib": mib_of(nvml),
        "context_mib": mib_of(context),
        "context_at_start_mib": mib_of(context_of(ready["nvml"], ready["pool"])),
        "framework_pool_mib": mib_of(pool),
        "framework_pool_is": ready["pool_is"],
        "framework_cap_mib": mib_of(peak["cap"]),
        "cuda_total_mib": mib_of(ready["cuda"][1]) if ready["cuda"] else None,
        "inside": inside,
        "judge": "NVML per-process memory"
        if nvml_sees_all
        else "framework's count (NVML lists less than the framework holds, or nothing, for the pid)",
        "stopped_by": stopped_by(peak, hard),
        "oom_message": (peak["oom"] or {}).get("message"),
        "user_set": dict(allocator.user_env) or None,
        "allocator_in_process": {name: ready["after"].get(name) for name, _ in allocator.user_env} or None,
        "guarded": ready["after"].get("JUPYTER_VGPU_GUARDED"),
        "limits_in_env": {name: value for name, value in ready["after"].items() if value and name in LIMIT_VARIABLES},
        "framework_record": ready["record"],
        "mps_server_on_gpu": peak["mps_server"],
        "mps_server_mib": mib_of(peak["mps_server_used"]) if peak["mps_server"] else None,
        "startup_hook": ready["hook"],
        "hami_core_check": ready["hami"],
        "tier_check": ready["tier_check"],
        "seconds": round(probe.seconds, 1),
    }
    record_cell(figures, key, cell)
    print(json.dumps({key: cell}, indent=1), file=sys.stderr)

    assert got == tier, f"asked for {tier} (JUPYTER_VGPU_TIERS), the slice got {got}: {cell}"
    assert probe.returncode == 0, f"the probe ended with {probe.returncode}: {probe.stderr}"
    assert peak["stop"] != "error", f"{key}: {peak['error']}"
    if tier == "hami-core":
        assert ready["hami"] == "ok", f"HAMi-core's limit did not take in the probe: {ready['hami']}"
    for name, value in allocator.user_env:  # the allocator guard: the user's choice is neutralised
        assert ready["after"].get(name) is None, f"{name} is still set in the slice's process: {cell}"
        assert f"{name}={value}" in (ready["after"].get("JUPYTER_VGPU_GUARDED") or ""), cell
    if hard:
        assert inside, (
            f"{key}: the process holds {mib_of(max(nvml or 0, held))} MiB in a {mib_of(reserved)} MiB slice: {cell}"
        )
    elif not allocator.lift:
        assert (
            pool is None or pool <= limit * (1 + (JAX_ROUNDING if allocator.framework == "jax" else 0)) + TOLERANCE
        ), cell
        slack = TOLERANCE + (int(limit * JAX_ROUNDING) if allocator.framework == "jax" else 0)
        assert nvml is None or nvml <= reserved + slack, (
            f"{key}: NVML {mib_of(nvml)} MiB > slice {mib_of(reserved)} MiB; the context ({mib_of(context)} MiB) is larger "
            f"than the allowance ({mib_of(allowance)} MiB)? {cell}"
        )


# -- 2. the context counted or not -------------------------------------------------------------

#: The context probe's steps past the two big allocations, and how far past the slice it tries.
STEP, BEYOND = 8 * MiB, 1024 * MiB
#: How close "allocated" must come to a boundary to be read as that boundary.
CLOSE = 16 * MiB


def context_verdict(allocated: int, context: int | None, reserved: int) -> str:
    """Whether the tier counted the CUDA context against its limit, read off how much the driver
    API could allocate after the context was made."""
    if allocated + STEP > reserved + BEYOND:
        return f"no limit seen: {mib_of(allocated)} MiB allocated in a {mib_of(reserved)} MiB slice"
    if context is not None and allocated + context <= reserved + CLOSE:
        return "counted: allocations stop at the slice minus the context"
    if allocated >= reserved - CLOSE:
        return "not counted: allocations alone reach the slice, the context is on top"
    return "unclear" + (" (NVML lists no memory for the pid)" if context is None else "")


@pytest.mark.parametrize("tier", HARD_NAMES)
def test_context_counted_against_a_hard_tier(
    tier: str, real_gpu: Path, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """With the driver API only (no framework, so no framework limit), allocate the framework
    limit (the slice minus the context allowance), then the allowance, then small steps until
    refused: where the driver stops tells whether the tier counts the CUDA context. A figure;
    asserted is only that the probe ran in that tier."""
    figures.setdefault("tier_context_counted", {})
    with tier_environment(tier, tmp_path) as env:
        spec = {"step": STEP, "beyond": BEYOND, "watched": WATCHED}
        probe = run_probe(env, CONTEXT_PROBE, spec, tmp_path, measure_nvml)
    ready, peak = probe.get("ready"), probe.get("peak")
    got = ready["before"]["JUPYTER_VGPU_TIER"]
    if tier == "mps-partition" and got != tier:
        reason = f"the product placed the slice as {got}, not mps-partition, with an MPS daemon running here"
        figures["tier_context_counted"][tier] = {"skipped": reason}
        pytest.skip(reason)
    reserved = int(ready["before"]["JUPYTER_VGPU_MEMORY_RESERVED"])
    allowance = int(ready["before"]["JUPYTER_VGPU_CONTEXT_ALLOWANCE"])
    context = ready["nvml"]
    allocated = peak["allocated"]
    figures["tier_context_counted"][tier] = {
        "verdict": context_verdict(allocated, context, reserved),
        "reserved_mib": mib_of(reserved),
        "allowance_mib": mib_of(allowance),
        "context_nvml_mib": mib_of(context),
        "framework_limit_then_allowance": f"cuMemAlloc(limit) -> {peak['first']}, cuMemAlloc(allowance) -> {peak['second']} (0: allocated)",
        "allocated_mib": mib_of(allocated),
        "nvml_at_peak_mib": mib_of(peak["nvml"]),
        "mps_server_mib": mib_of(peak["mps_server_used"]) if peak["mps_server"] else None,
        "cuda_free_total_at_start_mib": [mib_of(v) for v in ready["cuda"]] if ready["cuda"] else None,
        "last_refusal": peak["last"],
        "hami_core_check": ready["hami"],
        "tier_check": ready["tier_check"],
    }
    print(json.dumps({tier: figures["tier_context_counted"][tier]}, indent=1), file=sys.stderr)
    assert got == tier, f"asked for {tier} (JUPYTER_VGPU_TIERS), the slice got {got}"
    assert probe.returncode == 0, f"the probe ended with {probe.returncode}: {probe.stderr}"


# -- 3. HAMi-core's overhead on a short training loop ----------------------------------------------

#: Runs of each tier, alternated (cooperative, HAMi-core, cooperative, ...); steps timed in each.
PAIRS, STEPS, WARMUP = 3, 200, 20


def test_hami_core_overhead_on_a_training_loop(real_gpu: Path, tmp_path: Path, figures: dict[str, Any]) -> None:
    """A small MLP, fixed seed, 200 synchronised steps, in a cooperative slice and in a HAMi-core
    slice, alternated ABAB: the ratio of the medians is a figure (no timing is asserted: machines
    are noisy); asserted is that both ran, each in its tier."""
    if not installed("torch"):
        pytest.skip("the training loop uses torch")
    hami_library()
    times: dict[str, list[float]] = {"cooperative": [], "hami-core": []}
    walls: dict[str, list[float]] = {"cooperative": [], "hami-core": []}
    spec = {"steps": STEPS, "warmup": WARMUP, "watched": WATCHED}
    for _ in range(PAIRS):
        for tier in ("cooperative", "hami-core"):
            with tier_environment(tier, tmp_path) as env:
                probe = run_probe(env, TRAIN, spec, tmp_path, timeout=120)
            done = probe.get("done")
            assert probe.returncode == 0, f"{tier}: the loop ended with {probe.returncode}: {probe.stderr}"
            assert done["tier"] == tier, f"asked for {tier}, the slice got {done['tier']}"
            if tier == "hami-core":
                assert done["hami"] == "ok", f"HAMi-core's limit did not take: {done['hami']}"
            times[tier].append(done["seconds"])
            walls[tier].append(probe.seconds)
    loop = statistics.median(times["hami-core"]) / statistics.median(times["cooperative"])
    wall = statistics.median(walls["hami-core"]) / statistics.median(walls["cooperative"])
    figures["hami_core_overhead"] = {
        "loop ratio (median HAMi-core / median cooperative)": round(loop, 3),
        "process ratio (whole `jupyter vgpu run`, start-up included)": round(wall, 3),
        "loop seconds, cooperative": [round(t, 4) for t in times["cooperative"]],
        "loop seconds, hami-core": [round(t, 4) for t in times["hami-core"]],
        "loop": f"MLP 1024-2048-2048-10, batch 256, SGD, seed 0, {WARMUP} warm-up + {STEPS} timed steps, synchronised each step; runs alternated {PAIRS}x",
    }
    assert len(times["cooperative"]) == len(times["hami-core"]) == PAIRS
