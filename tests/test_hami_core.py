"""The HAMi-core tier (issue 24): where the admin names HAMi-core's libvgpu.so, slices outside MIG
and outside a HAMi pod are "enforced (HAMi-core)": the library is preloaded with the slice's limit
per GPU in whole MiB and a budget file of the slice's own (0600 in a 0700 folder, new on resize,
removed with the slice). A missing or broken library is one sentence and slices stay cooperative;
a kernel where the preload did not take says so in %vgpu.

Most tests preload a small shared library compiled here in libvgpu.so's place (it exports
cuMemAlloc_v2, as HAMi-core does), which shows the environment, the preload and the fallback. Where JUPYTER_VGPU_TEST_HAMI_CORE names a built
libvgpu.so, the last two run small C programs under it, in slices' environments, against a fake
CUDA driver compiled here and NVIDIA's mock NVML (../shared/nvml-mock): an allocation past the
slice fails, and each slice has a budget of its own (tests/gpu reads the same variable on a real
GPU). To build a Debug libvgpu.so (CUDA's and NVML's headers from NVIDIA's wheels) and run them:

    scripts/build-hami-core path/to/HAMi-core /tmp/hami-core     # a checkout of Project-HAMi/HAMi-core
    JUPYTER_VGPU_TEST_HAMI_CORE=/tmp/hami-core/libvgpu.so pytest tests/test_hami_core.py -k under_hami_core
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyter_vgpu.enforcement import Tier, by_tier, tier_of
from jupyter_vgpu.enforcement.hamicore import cache_path, library_problem
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.reports import report_dir
from jupyter_vgpu.units import GiB, MiB

STAND_IN = "int cuMemAlloc_v2(unsigned long long *pointer, unsigned long bytes) { return 2; }\n"


def a_shared_library() -> str:
    """A shared library standing in for libvgpu.so (it exports cuMemAlloc_v2), preloadable by any
    process and readable by every user, compiled here once per test session."""
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build a shared library standing in for libvgpu.so")
    return _stand_in()


@functools.lru_cache(maxsize=1)
def _stand_in() -> str:
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="vgpu-hami-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    folder.chmod(0o755)
    (folder / "stand_in.c").write_text(STAND_IN)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", "libvgpu.so", "stand_in.c"], cwd=folder, check=True)
    (folder / "libvgpu.so").chmod(0o755)
    return str(folder / "libvgpu.so")


@dataclass(frozen=True)
class GPU:
    mps: bool = False
    mig_mode: bool | None = False


@dataclass(frozen=True)
class PodGPU(GPU):
    pod_share: str | None = None
    sm_limit: int | None = None


def test_the_tier_applies_where_the_library_is_named_and_usable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JUPYTER_VGPU_HAMI_CORE", raising=False)
    assert tier_of([GPU()], 0) is Tier.COOPERATIVE
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", a_shared_library())
    assert tier_of([GPU()], 0) is Tier.HAMI_CORE and tier_of([GPU(mps=True)], 0) is Tier.HAMI_CORE
    assert tier_of([GPU(mig_mode=True)], 1) is Tier.MIG  # MIG is stronger
    assert Tier.HAMI_CORE.describe() == "enforced (HAMi-core)"
    assert "except CUDA's async pools" in by_tier(Tier.HAMI_CORE).share_note(0.25)
    # in a HAMi pod (the inventory gives each GPU the pod's share): HAMi already enforces
    assert tier_of([PodGPU(pod_share="this pod's share: 4.0 GiB of 16.0 GiB (HAMi)")], 0) is Tier.COOPERATIVE
    assert tier_of([PodGPU(sm_limit=30)], 0) is Tier.COOPERATIVE


NEEDED = "; name the libvgpu.so HAMi-core's build.sh made (a shared library of this machine exporting cuMemAlloc_v2)."


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        (None, "does not exist; build HAMi-core (its build.sh) and name libvgpu.so, or unset it."),
        (b"not a library", "is not a shared library (no ELF header)" + NEEDED),
        ("/bin/ls", "is a shared library (or a position-independent program) that does not export cuMemAlloc_v2, so it is not HAMi-core" + NEEDED),
        ("libc", "is a shared library (or a position-independent program) that does not export cuMemAlloc_v2, so it is not HAMi-core" + NEEDED),
        ("folder", "is not a regular file" + NEEDED),
    ],
)
def test_a_missing_or_broken_library_is_one_sentence_and_slices_stay_cooperative(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes | str | None, sentence: str
) -> None:
    """Only a shared library exporting cuMemAlloc_v2 is taken for HAMi-core: /bin/ls is an ELF
    shared object too (a position-independent program), and the C library one without it."""
    path = tmp_path / "libvgpu.so"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "folder":
        path.mkdir()
    elif content == "libc":
        with open("/proc/self/maps") as maps:  # the C library this Python loaded
            path = Path(next(line.split()[-1] for line in maps if line.rstrip().endswith("/libc.so.6")))
    elif content is not None:
        path = Path(content)
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", str(path))
    problem = library_problem(str(path))
    assert problem is not None and problem.startswith(f"JUPYTER_VGPU_HAMI_CORE / c.VGPU.hami_core_library {path} "), problem
    assert problem.endswith(sentence) and problem.count(". ") == 0, problem  # one sentence
    assert tier_of([GPU()], 0) is Tier.COOPERATIVE
    assert library_problem(a_shared_library()) is None  # the stand-in, which exports it, is taken


def test_the_environment_limits_each_gpu_in_whole_mib_with_a_private_budget_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", a_shared_library())
    ledger = str(tmp_path / "vgpu" / "ledger.sqlite")
    memory = (5461 * MiB + 123_456, 4 * GiB)  # a third of 16 GiB is not whole MiB: rounded down
    folder = str(report_dir(ledger))
    env = by_tier(Tier.HAMI_CORE).environment(memory, 1 / 3, slice_id="abcdef012345", folder=folder)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "5461m" and env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "4096m"
    assert env["LD_PRELOAD"] == a_shared_library() and env["LIBCUDA_LOG_LEVEL"] == "0"
    cache = Path(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"])
    assert cache == cache_path(folder, "abcdef012345", memory) and cache.is_file()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    resized = by_tier(Tier.HAMI_CORE).environment((8 * GiB,), 0.5, slice_id="abcdef012345", folder=folder)
    assert resized["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != str(cache)  # a resized slice starts a new budget
    from jupyter_vgpu.slices.reports import remove_report

    remove_report(ledger, "abcdef012345")
    assert not list(cache.parent.glob("abcdef012345.*.hami.cache"))


def test_a_command_runs_preloaded_and_its_budget_file_goes_with_its_slice(tmp_path: Path) -> None:
    library = a_shared_library()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_VGPU_", "CUDA_DEVICE_", "GPU_PORTION"))}
    env.update(JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=str(tmp_path / "ledger.sqlite"), JUPYTER_VGPU_HAMI_CORE=library)
    show = (
        "import json, os; maps = open('/proc/self/maps').read(); "
        "print(json.dumps({'limit': os.environ.get('CUDA_DEVICE_MEMORY_LIMIT_0'), 'cache': os.environ.get('CUDA_DEVICE_MEMORY_SHARED_CACHE'), "
        f"'loaded': os.path.realpath({library!r}) in maps or {library!r} in maps}}))"
    )
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/4", "--", sys.executable, "-c", show],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["limit"] == "4096m" and seen["loaded"] is True
    assert not Path(seen["cache"]).exists()  # removed with the slice
    status = subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "status"], env=env, capture_output=True, text=True)
    assert "enforced (HAMi-core)" in status.stdout  # what the GPU offers new slices


@pytest.mark.slow
def test_a_kernel_where_the_preload_did_not_take_says_it_is_cooperative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel.harness import Workspace, start  # type: ignore[import-not-found]

    library = a_shared_library()
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", library)
    workspace = Workspace(tmp_path)
    held = workspace.reserve(0.25)
    assert held.tier is Tier.HAMI_CORE
    env = workspace.slice_env(held)
    del env["LD_PRELOAD"]  # as `env -u LD_PRELOAD jupyter kernel ...` starts it: nothing holds it but frameworks
    kernel = start(env)
    try:
        text = kernel.run("%vgpu").displays[0]["text/plain"]
        assert f"cooperative here: HAMi-core ({library}) did not load in this kernel" in text
        assert "did not load in this kernel, so the slice is cooperative here" in text
    finally:
        kernel.stop()


FAKE_DRIVER = r"""
/* The three driver calls the HAMi-core self-check makes, answering as a driver under HAMi-core
   would (FAKE_CUDA_TOTAL_MIB: what cuDeviceTotalMem reports; HAMi-core reports its limit). */
#include <stdlib.h>
#include <stddef.h>
int cuInit(unsigned int flags) { return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
int cuDeviceTotalMem_v2(size_t *bytes, int device) {
    const char *mib = getenv("FAKE_CUDA_TOTAL_MIB");
    *bytes = (size_t)(mib ? atol(mib) : 16384) * 1024 * 1024;
    return 0;
}
"""


@pytest.mark.slow
@pytest.mark.parametrize(("reported_mib", "took"), [(4096, True), (16384, False)])
def test_the_kernel_checks_at_start_that_the_limit_took(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reported_mib: int, took: bool) -> None:
    """A fake CUDA driver (compiled here) answers cuDeviceTotalMem: with HAMi-core's limit in
    force it is the slice's limit (4096 MiB of a 1/4 slice of 16 GiB); where it is the card's, the
    limit did not take and the kernel says it is cooperative."""
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the fake CUDA driver")
    from kernel.harness import Workspace, start  # type: ignore[import-not-found]

    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "fake_cuda.c").write_text(FAKE_DRIVER)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(driver / "libcuda.so.1"), str(driver / "fake_cuda.c")], check=True)
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", a_shared_library())
    workspace = Workspace(tmp_path)
    held = workspace.reserve(0.25)
    assert held.tier is Tier.HAMI_CORE
    env = {**workspace.slice_env(held), "LD_LIBRARY_PATH": str(driver), "FAKE_CUDA_TOTAL_MIB": str(reported_mib)}
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    kernel = start(env)
    try:
        text = kernel.run("%vgpu").displays[0]["text/plain"]
        if took:
            assert "enforced (HAMi-core)" in text and "HAMi-core refuses CUDA allocations past 4.0 GiB per GPU" in text
        else:
            assert "cooperative here: HAMi-core's limit did not take: CUDA reports 16.0 GiB on the slice's first GPU" in text
    finally:
        kernel.stop()


HAMI_CORE_UNDER_TEST = os.environ.get("JUPYTER_VGPU_TEST_HAMI_CORE", "")
NVML_MOCK = Path(os.environ.get("JUPYTER_VGPU_NVML_MOCK", Path(__file__).resolve().parents[2] / "shared" / "nvml-mock"))

GPU_DRIVER = r"""
/* A CUDA driver with one 16 GiB GPU: what HAMi-core calls on the way to an allocation. (It looks up
   some 200 driver functions when it loads and calls a missing one through a null pointer.) A
   context per process; an allocation is an address, counted against the card. */
#include <stddef.h>
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_CONTEXT = 201 };
static const size_t card = (size_t)16 << 30;
static size_t used;
static int context;
static CUdeviceptr next = 0x7f0000000000ULL;

CUresult cuInit(unsigned int flags) { return SUCCESS; }
CUresult cuDeviceGetCount(int *count) { *count = 1; return SUCCESS; }
CUresult cuDeviceGet(int *device, int ordinal) { *device = ordinal; return ordinal ? INVALID_VALUE : SUCCESS; }
CUresult cuDeviceGetAttribute(int *value, int attribute, int device) { *value = 128; return SUCCESS; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int device) { *bytes = card; return SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) { *ctx = &context; return SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(int device) { return SUCCESS; }
CUresult cuCtxCreate_v2(void **ctx, unsigned int flags, int device) { context = 1; *ctx = &context; return SUCCESS; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = context ? &context : NULL; return SUCCESS; }
CUresult cuCtxGetDevice(int *device) { *device = 0; return context ? SUCCESS : INVALID_CONTEXT; }
CUresult cuMemGetInfo_v2(size_t *free, size_t *total) { *free = card - used; *total = card; return SUCCESS; }
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    if (!context) return INVALID_CONTEXT;
    if (used + bytes > card) return OUT_OF_MEMORY;
    used += bytes;
    *ptr = next;
    next += bytes;
    return SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) { return SUCCESS; }
"""

ALLOCATE = r"""
/* allocate MIB COUNT [hold]: COUNT allocations of MIB MiB each, then what they returned and what the
   driver reports, as JSON; with "hold", keeps them until its standard input closes. */
#include <stdio.h>
#include <stdlib.h>
typedef int CUresult;
CUresult cuInit(unsigned int), cuDeviceGet(int *, int), cuCtxCreate_v2(void **, unsigned int, int);
CUresult cuMemAlloc_v2(unsigned long long *, size_t), cuMemGetInfo_v2(size_t *, size_t *), cuDeviceTotalMem_v2(size_t *, int);

int main(int argc, char **argv) {
    size_t mib = strtoul(argv[1], NULL, 10), free_mem, total, device_total;
    int count = atoi(argv[2]), device;
    void *context;
    unsigned long long ptr;
    if (cuInit(0) || cuDeviceGet(&device, 0) || cuCtxCreate_v2(&context, 0, device)) return 1;
    printf("{\"results\": [");
    for (int i = 0; i < count; i++) printf("%s%d", i ? ", " : "", cuMemAlloc_v2(&ptr, mib << 20));
    cuMemGetInfo_v2(&free_mem, &total);
    cuDeviceTotalMem_v2(&device_total, device);
    printf("], \"free_mib\": %zu, \"total_mib\": %zu, \"device_mib\": %zu}\n", free_mem >> 20, total >> 20, device_total >> 20);
    fflush(stdout);
    if (argc > 3) getchar();
    return 0;
}
"""


@pytest.fixture(scope="module")
def fake_gpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the fake driver (``libcuda.so.1``), NVIDIA's mock NVML (``libnvidia-ml.so.1``,
    which HAMi-core needs too) and ``allocate``, linked against the driver."""
    import shutil

    if not (HAMI_CORE_UNDER_TEST and Path(HAMI_CORE_UNDER_TEST).is_file()):
        where = f"names {HAMI_CORE_UNDER_TEST}, which does not exist" if HAMI_CORE_UNDER_TEST else "is not set"
        pytest.skip(f"JUPYTER_VGPU_TEST_HAMI_CORE {where}: build libvgpu.so with scripts/build-hami-core and name it")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the fake CUDA driver")
    mock = NVML_MOCK / "libnvidia-ml.so.550.163.01"
    if not mock.is_file():
        pytest.skip(f"NVIDIA's mock NVML, which HAMi-core needs, is not at {NVML_MOCK} (../shared/nvml-mock)")
    folder = tmp_path_factory.mktemp("fake-gpu")
    (folder / "driver.c").write_text(GPU_DRIVER)
    (folder / "allocate.c").write_text(ALLOCATE)
    build = [
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so.1", "driver.c"],
        ["cc", "-o", "allocate", "allocate.c", "-L.", "-l:libcuda.so.1"],
    ]
    for command in build:
        subprocess.run(command, cwd=folder, check=True)
    (folder / "libnvidia-ml.so.1").symlink_to(mock)  # the shared folder keeps the library's links as plain files
    return folder


def quarter_slices(count: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: Path) -> list[dict[str, str]]:
    """The environments of ``count`` quarter slices of a 16 GiB GPU as the provisioner gives them with
    HAMi-core named, on the fake GPU."""
    from kernel.harness import Workspace  # type: ignore[import-not-found]

    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", HAMI_CORE_UNDER_TEST)
    workspace = Workspace(tmp_path)
    held = [workspace.reserve(0.25) for _ in range(count)]
    assert all(slice_.tier is Tier.HAMI_CORE for slice_ in held)
    # NVML's view of the machine: one 16 GiB T4
    on_gpu = {"LD_LIBRARY_PATH": str(gpu), "MOCK_NVML_CONFIG": str(NVML_MOCK / "configs" / "t4.yaml")}
    return [{**workspace.slice_env(slice_), **on_gpu} for slice_ in held]


def allocate(env: dict[str, str], gpu: Path, mib: int, count: int) -> tuple[list[int], int, int, int]:
    """What each of ``count`` allocations of ``mib`` MiB returned, then the free and total memory
    (cuMemGetInfo) and the GPU's memory (cuDeviceTotalMem) in MiB, as a process sees them."""
    done = subprocess.run([gpu / "allocate", str(mib), str(count)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    return seen["results"], seen["free_mib"], seen["total_mib"], seen["device_mib"]


@pytest.mark.slow
def test_under_hami_core_an_allocation_past_the_slice_fails_with_out_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gpu: Path
) -> None:
    (env,) = quarter_slices(1, tmp_path, monkeypatch, fake_gpu)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m" and env["LD_PRELOAD"] == HAMI_CORE_UNDER_TEST
    without = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    assert allocate(without, fake_gpu, 1024, 5) == ([0, 0, 0, 0, 0], 11264, 16384, 16384)  # the card has room
    # the slice's 4 GiB in four allocations; the fifth: CUDA_ERROR_OUT_OF_MEMORY (2); CUDA reports the slice
    assert allocate(env, fake_gpu, 1024, 5) == ([0, 0, 0, 0, 2], 0, 4096, 4096)
    check = (
        "import os; os.umask(0o077)\n"
        "from jupyter_vgpu.enforcement.hamicore import self_check\n"
        "print(self_check(), oct(os.umask(0o022)))\n"
    )
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60)
    # the kernel's check at start: the limit took; and the umask HAMi-core sets to 000 when CUDA
    # starts (so every later file of the kernel would be world-writable) is the kernel's again
    assert done.stdout.split() == ["None", "0o77"], done.stdout + done.stderr


@pytest.mark.slow
def test_under_hami_core_each_slice_has_its_own_budget_which_its_processes_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_gpu: Path
) -> None:
    first, second = quarter_slices(2, tmp_path, monkeypatch, fake_gpu)
    assert first["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != second["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    holding = [fake_gpu / "allocate", "1024", "3", "hold"]
    holder = subprocess.Popen(holding, env=first, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and json.loads(holder.stdout.readline())["results"] == [0, 0, 0]
        # another process of the same slice has the 1 GiB left of the slice's 4 GiB
        assert allocate(first, fake_gpu, 1024, 2) == ([0, 2], 0, 4096, 4096)
        # a process of the other slice has that slice's whole 4 GiB, and no more
        assert allocate(second, fake_gpu, 1024, 5) == ([0, 0, 0, 0, 2], 0, 4096, 4096)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    # what a process held leaves the slice's budget with it
    assert allocate(first, fake_gpu, 1024, 4) == ([0, 0, 0, 0], 0, 4096, 4096)


def test_an_elastic_slice_under_hami_core_is_capped_at_its_limit_and_books_its_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: HAMi-core's cap is the slice's limit, what it may burst to; the ledger books the
    request, and the frameworks grow on demand up to the limit (less the context allowance)."""
    from kernel.harness import Workspace  # type: ignore[import-not-found]

    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", a_shared_library())
    workspace = Workspace(tmp_path)
    ledger = workspace.ledger()
    try:
        held = ledger.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder("kernel", "tests/kernel"))
    finally:
        ledger.close()
    assert held.tier is Tier.HAMI_CORE and held.memory == (4 * GiB,)
    env = workspace.slice_env(held)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"  # the limit, enforced
    assert env["JUPYTER_VGPU_MEMORY_RESERVED"] == str(4 * GiB)  # the request, booked
    assert int(env["JUPYTER_VGPU_BURST_LIMIT"]) == 8 * GiB - held.context_allowance
