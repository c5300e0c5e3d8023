"""The MPS memory-partitioning tier (issue 24): where an MPS daemon serves the GPU and the driver
offers memory partitioning (r615, ``nvmlDeviceSetMemoryLimits_v1``) to a process that may manage
cgroups, each slice gets a cgroup of its own whose limit on each GPU is the slice's memory; the
slice's processes join it as they start (the start-up hook of a kernel, ``jupyter vgpu run``
before its command) and it goes with the slice.

The driver is simulated (the simulated NVML keeps the limits it is given, as r615 does per
cgroup; NVIDIA's mock, an r550 driver, has no such call, so it is detected as absent); the
cgroups are real where this machine has a writable cgroup v2 hierarchy (each test makes its own
subtree and removes it), else those tests are skipped with the reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyter_vgpu.enforcement import Tier, by_tier, tier_of
from jupyter_vgpu.enforcement.mpspartition import in_partition
from jupyter_vgpu.gpus import Inventory, memory_cgroups
from jupyter_vgpu.gpus.memory_cgroups import PartitionError
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.slices import Holder, SliceRequest, slice_environment
from jupyter_vgpu.units import GiB

UUID = "GPU-5e1a0000-0000-4000-8000-00000000a100"


@dataclass(frozen=True)
class GPU:
    mps: bool = True
    mig_mode: bool | None = False
    memory_partitioning: str | None = "dmem"


def test_partitioning_is_the_strongest_tier_after_mig_and_needs_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTER_VGPU_HAMI_CORE", raising=False)
    monkeypatch.delenv("JUPYTER_VGPU_TIERS", raising=False)
    assert tier_of([GPU()], 0) is Tier.MPS_PARTITION
    assert tier_of([GPU(), GPU(memory_partitioning=None)], 0) is Tier.MPS  # on every GPU of the slice, or none
    assert tier_of([GPU(mps=False)], 0) is Tier.COOPERATIVE  # otherwise the existing tiers
    assert tier_of([GPU(mig_mode=True)], 1) is Tier.MIG
    monkeypatch.setenv("JUPYTER_VGPU_TIERS", "mps,cooperative")  # the admin's choice
    assert tier_of([GPU()], 0) is Tier.MPS
    tier = by_tier(Tier.MPS_PARTITION)
    assert tier.describe() == "enforced (MPS memory partitioning)" and tier.hard
    assert tier.share_note(0.25) == "memory, enforced by the driver for all device memory (MPS memory partitioning), and 25% of the SMs (MPS)"
    env = tier.environment((4 * GiB,), 0.25, slice_id="abc123")
    assert env == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",  # a second line: the MPS tier's own limit
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "JUPYTER_VGPU_PARTITION": "abc123",
    }


# -- detection -------------------------------------------------------------------------------


def simulation(tmp_path: Path, *, partitioning: bool = True, gpus: int = 1, processes: list[dict] | None = None) -> Path:
    spec = tmp_path / "gpus.json"
    devices = [
        {"name": "Simulated H100", "memory": "16GiB", "uuid": UUID if i == 0 else f"{UUID[:-1]}{i}", "memory_partitioning": partitioning}
        for i in range(gpus)
    ]
    spec.write_text(json.dumps({"devices": devices, "processes": processes or []}))
    time.sleep(0.02)  # a new mtime: the simulated NVML reads it again
    return spec


def fake_root(tmp_path: Path) -> Path:
    """A folder that looks like a cgroup v2 root to detection (a cgroup.controllers file)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory dmem\n")
    return root


def test_detection_needs_the_driver_and_a_cgroup_this_process_may_manage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    root = fake_root(tmp_path)
    monkeypatch.setenv("JUPYTER_VGPU_CGROUP_ROOT", str(root))
    assert Inventory(str(simulation(tmp_path))).snapshot().gpus[0].memory_partitioning == "driver"  # the driver's own backend
    (root / "dmem.capacity").write_text("drm/0000:03:00.0/vram0 12550144\nnvidia/0000:01:00.0/vidmem 17179869184\n")
    gpu = Inventory(str(simulation(tmp_path))).snapshot().gpus[0]  # NVML's bus id 00000000:01:00.0
    assert gpu.memory_partitioning == "dmem"  # the kernel's dmem controller knows the GPU
    assert Inventory(str(simulation(tmp_path, partitioning=False))).snapshot().gpus[0].memory_partitioning is None  # a driver before r615
    (root / "cgroup.controllers").unlink()  # not a cgroup v2 hierarchy
    assert Inventory(str(simulation(tmp_path))).snapshot().gpus[0].memory_partitioning is None
    assert "is not a cgroup v2 hierarchy" in (memory_cgroups.manage_problem(root) or "")


# -- real cgroups ----------------------------------------------------------------------------


def writable_cgroup2() -> Path | None:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2" and os.access(fields[1], os.W_OK):
            return Path(fields[1])
    return None


@pytest.fixture
def cgroup_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cgroup v2 subtree of this test's own, as the cgroup root."""
    mount = writable_cgroup2()
    if mount is None:
        pytest.skip("no writable cgroup v2 hierarchy here (needs root, or a delegated subtree)")
    root = mount / f"vgpu-test-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a cgroup in {mount}: {error}")
    monkeypatch.setenv("JUPYTER_VGPU_CGROUP_ROOT", str(root))
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    yield root
    remove_subtree(root, mount)


def remove_subtree(root: Path, mount: Path) -> None:
    """Remove a test's cgroups, moving any process left in them back to the top first."""
    for child in sorted(root.glob("**/"), key=lambda p: len(p.parts), reverse=True):
        for pid in (child / "cgroup.procs").read_text().split() if (child / "cgroup.procs").exists() else []:
            try:
                (mount / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        try:
            child.rmdir()
        except OSError:
            pass


def test_a_slice_gets_a_cgroup_with_its_limit_and_loses_it_when_it_ends(cgroup_root: Path, tmp_path: Path) -> None:
    inventory = Inventory(str(simulation(tmp_path, gpus=2)))
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", inventory)
    held = ledger.reserve(SliceRequest.parse(0.25, gpu="0"), Holder("command", "test"))
    assert held.tier is Tier.MPS_PARTITION
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cgroup = Path(ledger.join_hold(held.id, sleeper.pid))
        assert cgroup == cgroup_root / "jupyter-vgpu" / held.id and in_partition(held.id, sleeper.pid)
        assert [int(p) for p in (cgroup / "cgroup.procs").read_text().split()] == [sleeper.pid]

        def hard_limit(index: int = 0) -> int:
            nvml = inventory._init()
            limits = nvml.c_nvmlGetMemoryLimits_v1_t(nameSpace=str(cgroup).encode())
            nvml.nvmlDeviceGetMemoryLimits_v1(nvml.nvmlDeviceGetHandleByIndex(index), limits)
            assert limits.softLimit == limits.hardLimit  # guaranteed and capped alike
            return int(limits.hardLimit)

        assert hard_limit() == 4 * GiB == held.memory[0]
        assert hard_limit(1) == 0  # not the slice's GPU: nothing there, whatever CUDA_VISIBLE_DEVICES says
        ledger.resize(held.id, SliceRequest.parse(0.5))
        assert hard_limit() == 8 * GiB  # the driver's limit follows a resize
        # a resize below what the slice's processes use now is refused, and changes nothing
        simulation(tmp_path, gpus=2, processes=[{"gpu": 0, "pid": sleeper.pid, "memory": "5GiB"}])
        with pytest.raises(PartitionError, match=r"use 5.0 GiB on a GPU where its limit would be 2.0 GiB; free memory first"):
            ledger.resize(held.id, SliceRequest.parse(0.125))
        assert hard_limit() == 8 * GiB and ledger.get(held.id).memory == (8 * GiB,)
        ledger.release(held.id)
        assert cgroup.is_dir()  # still in use by its process: it goes once empty
    finally:
        sleeper.kill()
        sleeper.wait()
    deadline = time.monotonic() + 10
    while (cgroup / "cgroup.procs").exists() and (cgroup / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    ledger.reap()  # the sweep of cgroups whose slice is gone
    assert not cgroup.exists()


def test_only_the_owner_joins_and_only_a_partitioned_slice(cgroup_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_vgpu.errors import InvalidRequest, NotPermitted
    from jupyter_vgpu.slices import Actor

    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(str(simulation(tmp_path))))
    held = ledger.reserve(SliceRequest.parse(0.25), Holder("command", "test"))
    stranger = ledger.acting_for(Actor(user="mallory", uid=4242))
    with pytest.raises(NotPermitted, match=f"Slice {held.id} belongs to .*; you can join the memory partition of only your own slices"):
        stranger.join_hold(held.id, os.getpid())
    assert not (cgroup_root / "jupyter-vgpu" / held.id).exists()
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "off")
    plain = ledger.reserve(SliceRequest.parse(0.25), Holder("command", "test"))
    assert plain.tier is Tier.COOPERATIVE
    with pytest.raises(InvalidRequest, match=f"Slice {plain.id} is cooperative, not a slice with a memory partition to join"):
        ledger.join_hold(plain.id, os.getpid())


def vgpu_env(tmp_path: Path, cgroup_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_VGPU_", "CUDA_"))}
    env.update(
        {
            "JUPYTER_VGPU_SIMULATE": str(simulation(tmp_path)),
            "JUPYTER_VGPU_LEDGER": str(tmp_path / "vgpu" / "ledger.sqlite"),
            "JUPYTER_VGPU_CGROUP_ROOT": str(cgroup_root),
            "JUPYTER_VGPU_MPS": "on",
            "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        }
    )
    return env


def test_a_command_and_its_children_run_inside_the_slices_cgroup(cgroup_root: Path, tmp_path: Path) -> None:
    env = vgpu_env(tmp_path, cgroup_root)
    # a program that is not Python (run joins before it starts it) and a Python grandchild
    script = "cat /proc/self/cgroup; python3 -c 'print(open(\"/proc/self/cgroup\").read())'; echo $JUPYTER_VGPU_SLICE_ID"
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "0.25", "--", "sh", "-c", script],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "enforced (MPS memory partitioning)" in out.stderr and "held by MPS's pinned limit" not in out.stderr
    lines = out.stdout.split()
    slice_id = lines[-1]
    inside = [line for line in lines if line.startswith("0::")]
    assert len(inside) == 2 and all(line.endswith(f"/jupyter-vgpu/{slice_id}") for line in inside), out.stdout
    assert not (cgroup_root / "jupyter-vgpu" / slice_id).exists()  # gone with the slice


@pytest.mark.slow
def test_a_kernel_joins_at_start_and_percent_vgpu_says_what_holds_it(cgroup_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel.harness import Workspace, start  # type: ignore[import-not-found]

    workspace = Workspace(tmp_path)
    workspace.simulation.write_text(simulation(tmp_path).read_text())
    held = workspace.reserve(0.25)
    assert held.tier is Tier.MPS_PARTITION
    env = {**workspace.slice_env(held), "JUPYTER_VGPU_CGROUP_ROOT": str(cgroup_root), "JUPYTER_VGPU_MPS": "on"}
    kernel = start(env)
    try:
        cgroup = kernel.run("print(open('/proc/self/cgroup').read().strip())").stdout
        assert cgroup.strip().endswith(f"/jupyter-vgpu/{held.id}"), cgroup
        text = kernel.run("%vgpu").displays[0]["text/plain"]
        assert "enforced (MPS memory partitioning)" in text
        assert "the driver refuses allocations past 4.0 GiB per GPU for every process of this kernel" in text
    finally:
        kernel.stop()
    # a kernel that cannot join (here: its cgroup root is no cgroup hierarchy) says so and what holds it instead
    elsewhere = tmp_path / "not-a-cgroup"
    elsewhere.mkdir()
    other = workspace.reserve(0.25)
    kernel = start({**workspace.slice_env(other), "JUPYTER_VGPU_CGROUP_ROOT": str(elsewhere), "JUPYTER_VGPU_MPS": "on"})
    try:
        text = kernel.run("%vgpu").displays[0]["text/plain"]
        assert "MPS's pinned limit here:" in text and "(the slice was placed as enforced (MPS memory partitioning))" in text
        assert "the MPS server only:" in text
    finally:
        kernel.stop()


@pytest.mark.slow
def test_a_jupyter_servers_kernel_runs_in_its_slices_cgroup_until_it_is_shut_down(cgroup_root: Path, tmp_path: Path) -> None:
    """The topology users have: a real server starts a sliced kernel through the provisioner; the
    kernel is in its slice's cgroup, a command run beside it is in its own, and each cgroup goes
    with its slice. The server's log says at start what new slices get."""
    from jupyter_process import KERNEL_NAME, isolated_env, start_jupyter, wait_for, write_sliced_kernelspec  # type: ignore[import-not-found]

    write_sliced_kernelspec(tmp_path / "data")
    env = isolated_env(
        tmp_path, JUPYTER_VGPU_SIMULATE=str(simulation(tmp_path)), JUPYTER_VGPU_CGROUP_ROOT=str(cgroup_root), JUPYTER_VGPU_MPS="on"
    )
    server = start_jupyter(tmp_path, env=env)
    try:
        assert "jupyter-vgpu: new slices on GPU 0 get enforced (MPS memory partitioning)." in server.log_text()
        _, devices = server.api("GET", "api/vgpu/devices")
        assert [(g["tier"], g["memory_partitioning"]) for g in devices["devices"]] == [("enforced (MPS memory partitioning)", "driver")]
        status, kernel = server.api("POST", "api/kernels", {"name": KERNEL_NAME}, timeout=60)
        assert status == 201, kernel

        def kernel_slice() -> dict | None:
            _, slices = server.api("GET", "api/vgpu/slices")
            return next((s for s in slices["slices"] if s.get("kernel_id") == kernel["id"] and s.get("pid")), None)

        held = wait_for(kernel_slice, "the kernel's slice with its process")
        assert held["tier"] == "enforced (MPS memory partitioning)"
        wait_for(lambda: in_partition(held["id"], held["pid"]), "the kernel in its slice's cgroup")
        cgroup = cgroup_root / "jupyter-vgpu" / held["id"]
        ran = subprocess.run(
            [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "0.25", "--", "cat", "/proc/self/cgroup"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert ran.returncode == 0 and "/jupyter-vgpu/" in ran.stdout and held["id"] not in ran.stdout, ran.stdout + ran.stderr
        assert [p.name for p in (cgroup_root / "jupyter-vgpu").iterdir() if p.is_dir()] == [held["id"]]  # the command's went with it
        status, _ = server.api("DELETE", f"api/kernels/{kernel['id']}", timeout=60)
        assert status == 204
        wait_for(lambda: not cgroup.exists(), "the kernel's cgroup removed with its slice")
    finally:
        server.stop(signal.SIGTERM, timeout=10)


def test_a_process_whose_parent_could_not_join_does_not_ask_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker that is down costs one wait per process tree, not one per Python start: the reason
    is inherited, and every child of the slice runs the start-up hook."""
    from jupyter_vgpu import ledger
    from jupyter_vgpu.ledger.join import enter_here

    monkeypatch.setattr(ledger, "open_ledger", lambda *a: pytest.fail("asked the ledger again"))
    env = {
        "JUPYTER_VGPU_ENTER": "mps-partition",
        "JUPYTER_VGPU_PARTITION": "abcdef012345",
        "JUPYTER_VGPU_PARTITION_PROBLEM": "Cannot reach the jupyter-vgpu broker",
    }
    assert enter_here(env) == "Cannot reach the jupyter-vgpu broker"
    script = "import os, sys; sys.exit(0 if 'jupyter_vgpu.ledger.join' not in sys.modules else 1)"
    child = subprocess.run([sys.executable, "-c", script], env={**os.environ, **env, "JUPYTER_VGPU_SLICE_ID": "abcdef012345"}, timeout=60)
    assert child.returncode == 0  # the start-up hook did not even import the joining code


def test_removing_a_cgroup_never_fails_the_end_of_a_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def refuse(path: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(memory_cgroups.os, "rmdir", refuse)
    assert memory_cgroups.remove("abcdef012345", tmp_path) is False  # left for the next sweep, no exception


def test_an_elastic_slices_cgroup_guarantees_its_request_and_caps_its_limit(cgroup_root: Path, tmp_path: Path) -> None:
    """Issue 42: the driver's soft limit (guaranteed) is the request, its hard limit the limit; the
    ledger books the request only, and the slice's processes may burst up to the limit."""
    inventory = Inventory(str(simulation(tmp_path)))
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", inventory)
    held = ledger.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder("command", "test"))
    assert held.tier is Tier.MPS_PARTITION and held.memory == (4 * GiB,)
    assert held.memory_burst_limit is not None and held.memory_allowed == (8 * GiB,)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cgroup = Path(ledger.join_hold(held.id, sleeper.pid))
        nvml = inventory._init()
        limits = nvml.c_nvmlGetMemoryLimits_v1_t(nameSpace=str(cgroup).encode())
        nvml.nvmlDeviceGetMemoryLimits_v1(nvml.nvmlDeviceGetHandleByIndex(0), limits)
        assert (limits.softLimit, limits.hardLimit) == (4 * GiB, 8 * GiB)
        env = slice_environment(held, ledger_path=str(tmp_path / "ledger.sqlite"))
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"  # MPS's own cap, the second line, at the limit too
    finally:
        sleeper.kill()
        sleeper.wait()
        ledger.release(held.id)
