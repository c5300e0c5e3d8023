"""The HAMi-core tier (issue 24): where the admin names HAMi-core's libvgpu.so, slices outside MIG
and outside a HAMi pod are "enforced (HAMi-core)": the library is preloaded with the slice's limit
per GPU in whole MiB and a budget file of the slice's own (0600 in a 0700 folder, new on resize,
removed with the slice). A missing or broken library is one sentence and slices stay cooperative;
a kernel where the preload did not take says so in %vgpu.

No libvgpu.so can be built here (it needs CUDA's headers): these tests preload a real shared
library of the system in its place, which shows the environment, the preload and the fallback.
Where JUPYTER_VGPU_TEST_HAMI_CORE names a built libvgpu.so, its enforcement is tested on a GPU
(tests/gpu)."""

from __future__ import annotations

import ctypes.util
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
from jupyter_vgpu.slices.reports import report_dir
from jupyter_vgpu.units import GiB, MiB


def a_shared_library() -> str:
    """A real ELF shared library of this system, preloadable by any process."""
    name = ctypes.util.find_library("m")
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib/aarch64-linux-gnu"):
        if name and Path(folder, name).is_file():
            return str(Path(folder, name))
    pytest.skip("no libm shared library found to stand in for libvgpu.so")


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


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        (None, "does not exist; build HAMi-core (its build.sh) and name libvgpu.so, or unset it."),
        (b"not a library", "is not a shared library (no ELF header); name the libvgpu.so HAMi-core's build.sh made."),
    ],
)
def test_a_missing_or_broken_library_is_one_sentence_and_slices_stay_cooperative(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes | None, sentence: str
) -> None:
    path = tmp_path / "libvgpu.so"
    if content is not None:
        path.write_bytes(content)
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", str(path))
    problem = library_problem(str(path))
    assert problem is not None and problem.startswith("JUPYTER_VGPU_HAMI_CORE / c.VGPU.hami_core_library") and problem.endswith(sentence)
    assert tier_of([GPU()], 0) is Tier.COOPERATIVE


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

    broken = tmp_path / "libvgpu.so"
    broken.write_bytes(b"\x7fELF" + b"\0" * 60)  # looks like a library, does not load: ld.so says so and goes on
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", str(broken))
    workspace = Workspace(tmp_path)
    held = workspace.reserve(0.25)
    assert held.tier is Tier.HAMI_CORE
    kernel = start(workspace.slice_env(held))
    try:
        text = kernel.run("%vgpu").displays[0]["text/plain"]
        assert f"cooperative here: HAMi-core ({broken}) did not load in this kernel" in text
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
