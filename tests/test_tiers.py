"""Enforcement tiers on the simulated NVML: MIG devices as slices, MPS limits, the tier shown
everywhere, the ledger's upgrade to record it, and the MPS server never counted as foreign."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_vgpu.errors import InvalidConfig, InvalidRequest, SliceUnavailable
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.gpus.mps import detect
from jupyter_vgpu.ledger import Ledger, SQLiteLedger
from jupyter_vgpu.ledger.schema import SCHEMA_VERSION
from jupyter_vgpu.server.monitor import UsageMonitor
from jupyter_vgpu.server.views import devices_view, slice_view
from jupyter_vgpu.server.watchdog import Watchdog
from jupyter_vgpu.slices import Holder, Slice, SliceRequest, slice_environment
from jupyter_vgpu.slices.holders import start_stamp
from jupyter_vgpu.units import GiB, MiB

CONTEXT = 300 * MiB
JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")

A100 = {
    "name": "NVIDIA A100-SXM4-40GB",
    "memory": "40GiB",
    "mig": [
        {"profile": "2g.20gb", "memory": "19.5GiB"},
        {"profile": "1g.10gb", "memory": "9.75GiB"},
        {"profile": "1g.10gb", "memory": "9.75GiB"},
    ],
}


@pytest.fixture(autouse=True)
def mps_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine running these tests may have a daemon; tests switch MPS on themselves."""
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "off")


@pytest.fixture
def gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gpus(devices, processes)`` writes a simulation and returns its path (also in the environment)."""
    path = tmp_path / "gpus.json"

    def write(devices: list[dict[str, Any]], processes: list[dict[str, Any]] | None = None) -> str:
        path.write_text(json.dumps({"devices": devices, "processes": processes or []}))
        monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", str(path))
        monkeypatch.setenv("JUPYTER_VGPU_LEDGER", str(tmp_path / "ledger.sqlite"))
        return str(path)

    return write


@pytest.fixture
def ledgers(tmp_path: Path) -> Iterator[Any]:
    opened: list[Ledger] = []

    def open_(spec: str) -> Ledger:
        ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(spec), context_allowance=CONTEXT, poll_interval=0.05)
        opened.append(ledger)
        return ledger

    yield open_
    for ledger in opened:
        ledger.close()


def take(ledger: Ledger, fraction: Any = None, memory: Any = None, wait: float = 0.0, **kwargs: Any) -> Slice:
    request = SliceRequest.parse(fraction, memory, **kwargs)
    return ledger.reserve(request, Holder("command", f"test {fraction or memory}"), wait=wait)


# -- MIG ---------------------------------------------------------------------------------
def test_the_inventory_lists_mig_devices_with_profile_uuid_and_memory(gpus: Any) -> None:
    gpu = Inventory(gpus([A100])).snapshot().gpus[0]
    assert gpu.mig_mode is True
    assert [(d.profile, d.memory_total) for d in gpu.mig_devices] == [
        ("2g.20gb", int(19.5 * GiB)),
        ("1g.10gb", int(9.75 * GiB)),
        ("1g.10gb", int(9.75 * GiB)),
    ]
    assert all(d.uuid.startswith("MIG-") for d in gpu.mig_devices)
    assert len({d.uuid for d in gpu.mig_devices}) == 3


def test_a_request_takes_the_smallest_free_mig_device_that_fits(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100]))
    small = take(ledger, memory="8GiB")
    assert small.tier == "mig" and small.mig_profiles == ("1g.10gb",)
    assert small.memory == (int(9.75 * GiB),)  # the whole MIG device is the slice
    big = take(ledger, memory="12GiB")
    assert big.mig_profiles == ("2g.20gb",)


def test_a_quarter_of_the_card_fits_the_mig_device_named_for_a_quarter(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100]))
    quarter = take(ledger, "1/4")  # 10 GiB asked; a 1g.10gb holds 9.75 GiB
    assert quarter.mig_profiles == ("1g.10gb",)
    assert quarter.tier_text == "hard (MIG 1g.10gb)"


def test_each_mig_device_holds_one_slice(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100]))
    held = [take(ledger, memory="8GiB") for _ in range(3)]
    assert [s.mig_profiles[0] for s in held] == ["1g.10gb", "1g.10gb", "2g.20gb"]
    assert len({s.mig_devices[0] for s in held}) == 3
    with pytest.raises(SliceUnavailable, match="(?s)No free MIG device for 1.0 GiB now: every MIG device is taken.*free MIG devices: none"):
        take(ledger, memory="1GiB")
    ledger.release(held[0].id)
    assert take(ledger, memory="1GiB").mig_devices == held[0].mig_devices


def test_a_mig_device_used_without_a_slice_is_not_handed_out(gpus: Any, ledgers: Any) -> None:
    first = Inventory(gpus([A100])).snapshot().gpus[0].mig_devices[1]
    ledger = ledgers(gpus([A100], [{"gpu": 0, "mig": 1, "pid": 4242, "memory": "2GiB"}]))
    slice_ = take(ledger, memory="8GiB")
    assert slice_.mig_devices != (first.uuid,)
    assert slice_.mig_profiles == ("1g.10gb",)


def test_the_environment_names_the_mig_device_and_sizes_limits_to_it(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100]))
    slice_ = take(ledger, "1/4")
    env = slice_environment(slice_, ledger_path=str(ledger.path))
    assert env["CUDA_VISIBLE_DEVICES"] == slice_.mig_devices[0]
    assert env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert env["JUPYTER_VGPU_GPUS"] == slice_.gpus[0]  # the parent GPU, for NVML
    assert env["JUPYTER_VGPU_TIER"] == "mig" and env["JUPYTER_VGPU_MIG_PROFILES"] == "1g.10gb"
    assert int(env["JUPYTER_VGPU_MEMORY_LIMIT"]) == int(9.75 * GiB) - CONTEXT
    # JAX's fraction is of the device it sees: the MIG device, not the whole card.
    assert float(env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == pytest.approx((9.75 * GiB - CONTEXT) / (9.75 * GiB), abs=0.001)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env


def test_a_mig_gpu_refuses_more_than_its_largest_mig_device(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100]))
    with pytest.raises(SliceUnavailable) as refused:
        take(ledger, "3/4", wait=5)  # permanent: waiting cannot help, so it fails at once
    message = str(refused.value)
    assert "GPU 0 is in MIG mode and its largest MIG device is 2g.20gb (19.5 GiB)" in message
    assert "never as a plain fraction" in message


def test_a_mig_gpu_without_mig_devices_says_how_to_create_them(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([{"memory": "40GiB", "mig": []}]))
    with pytest.raises(SliceUnavailable, match="MIG mode with no MIG devices.*nvidia-smi mig -cgi"):
        take(ledger, "1/4")


def test_multi_gpu_slices_use_only_gpus_outside_mig_mode(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100, {"memory": "16GiB"}, {"memory": "16GiB"}]))
    both = take(ledger, "1/2", gpus=2)
    assert both.gpu_indices == (1, 2) and both.tier == "cooperative"
    ledger.release(both.id)
    ledger_one_plain = ledgers(gpus([A100, {"memory": "16GiB"}]))
    with pytest.raises(SliceUnavailable, match="CUDA shows a process one MIG device only"):
        take(ledger_one_plain, "1/2", gpus=2)


def test_a_mig_slice_cannot_be_resized(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100]))
    slice_ = take(ledger, "1/4")
    with pytest.raises(InvalidRequest, match="whole MIG device"):
        ledger.resize(slice_.id, SliceRequest.parse("1/2"))


def test_a_machine_with_mig_and_plain_gpus_places_on_either(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100, {"memory": "40GiB"}]))
    mig = take(ledger, memory="9GiB")  # a 1g.10gb leaves less unused than 40 GiB of GPU 1
    assert mig.gpu_indices == (0,) and mig.tier == "mig"
    plain = take(ledger, "3/4")  # 30 GiB: no MIG device of GPU 0 is that big
    assert plain.gpu_indices == (1,) and plain.tier == "cooperative"


# -- MPS ---------------------------------------------------------------------------------
def test_with_mps_slices_get_a_pinned_memory_limit_and_their_share_of_the_sms(
    ledgers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    ledger = ledgers("2x16GiB")
    slice_ = take(ledger, "1/4", gpus=2)
    assert slice_.tier == "mps" and slice_.tier_text == "hard (MPS)"
    env = slice_environment(slice_, ledger_path=str(ledger.path))
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M,1=4096M"  # the whole slice on each GPU
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["JUPYTER_VGPU_TIER"] == "mps"
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(slice_.gpus)


def test_without_mps_no_mps_variables_are_set(ledgers: Any) -> None:
    ledger = ledgers("1x16GiB")
    slice_ = take(ledger, "1/3")
    assert slice_.tier == "cooperative"
    env = slice_environment(slice_, ledger_path=str(ledger.path))
    assert not [k for k in env if k.startswith("CUDA_MPS_")]


def test_thread_percentage_rounds_up_and_stays_in_range(ledgers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    ledger = ledgers("1x16GiB")
    env = slice_environment(take(ledger, "1/3"), ledger_path=str(ledger.path))
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "34"


def test_mps_on_a_mig_gpu_yields_to_mig(gpus: Any, ledgers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    ledger = ledgers(gpus([A100]))
    assert take(ledger, "1/4").tier == "mig"


def test_a_bad_mps_setting_names_the_allowed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "maybe")
    with pytest.raises(InvalidConfig, match="JUPYTER_VGPU_MPS='maybe' is not allowed; use one of: auto, on, off"):
        Inventory("1x16GiB").snapshot()


def test_auto_detects_a_control_daemon_in_the_pipe_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "auto")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert not detect().active and "no MPS control pipe" in detect().reason
    (tmp_path / "control").touch()
    assert not detect().active and "no nvidia-cuda-mps-control runs" in detect().reason
    # A stand-in daemon: a sleeping process whose executable is named like the real one.
    daemon = tmp_path / "nvidia-cuda-mps-control"
    daemon.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(daemon), "30"])
    try:
        # /proc shows the new program's name a moment after exec on a busy machine
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).name() != "nvidia-cuda-mps-control" and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "nvidia-cuda-mps-control.pid").write_text(str(proc.pid))
        status = detect()
        assert status.active and status.pipe_directory == str(tmp_path)
    finally:
        proc.kill()
        proc.wait()


# -- the monitor and MPS attribution -------------------------------------------------------
def test_the_mps_server_is_not_foreign_and_clients_count_for_their_slice(
    gpus: Any, ledgers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    me = os.getpid()
    spec = gpus(
        [{"name": "Simulated H100", "memory": "16GiB"}],
        [
            {"gpu": 0, "pid": 999_001, "name": "nvidia-cuda-mps-server", "memory": "512MiB"},
            {"gpu": 0, "pid": me, "mps": True, "memory": "3GiB"},
        ],
    )
    ledger = ledgers(spec)
    slice_ = take(ledger, "1/4")  # held by this test process, which NVML lists as an MPS client
    snapshot = ledger.inventory.snapshot()
    assert [p.mps_server for p in snapshot.gpus[0].processes] == [True, False]
    assert "processes without a slice" not in ledger.occupancy().explain()
    monitor = UsageMonitor(ledger, interval=1.0)
    try:
        sample = monitor.collect()
        usage = sample.find(slice_.id)
        assert usage is not None and usage.memory_used == 3 * GiB and usage.source == "measured"
        assert sample.occupancy.gpus[0].foreign == 0
        assert sample.occupancy.gpus[0].free == 12 * GiB
    finally:
        monitor.executor.shutdown()


# -- where the tier is shown -----------------------------------------------------------------
def test_rest_views_show_the_tier_per_slice_and_per_gpu(gpus: Any, ledgers: Any) -> None:
    ledger = ledgers(gpus([A100, {"memory": "16GiB"}]))
    mig = take(ledger, "1/4")
    plain = take(ledger, "1/2", gpu="1")
    monitor = UsageMonitor(ledger, interval=1.0)
    watchdog = Watchdog(None, action="warn")
    try:
        sample = monitor.collect()
        views = {u.slice.id: slice_view(u, monitor, watchdog, {}) for u in sample.slices}
        assert (views[mig.id]["tier"], views[mig.id]["watched"]) == ("hard (MIG 1g.10gb)", True)
        assert views[mig.id]["share_note"] == "a MIG device: its own memory and compute"
        assert views[mig.id]["tier_kind"] == "mig"
        assert views[mig.id]["visible_devices"] == list(mig.mig_devices)
        assert (views[plain.id]["tier"], views[plain.id]["watched"]) == ("cooperative", True)
        devices = devices_view(sample, monitor, watchdog)["devices"]
        assert [(d["tier"], d["watched"]) for d in devices] == [("hard (MIG)", True), ("cooperative", True)]
        held = {d["profile"] + str(i): d["slice"] for i, d in enumerate(devices[0]["mig_devices"])}
        assert held == {"2g.20gb0": None, "1g.10gb1": mig.id, "1g.10gb2": None}
        assert devices[0]["memory_free"] == int(19.5 * GiB)  # the largest free MIG device
    finally:
        monitor.executor.shutdown()


def test_status_shows_the_tier_and_each_mig_device(gpus: Any, ledgers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = ledgers(gpus([A100]))
    slice_ = take(ledger, "1/4")
    monkeypatch.setenv("COLUMNS", "160")
    text = subprocess.run([JUPYTER_VGPU, "status"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "MIG mode: slices are whole MIG devices" in text
    mig_line = next(line for line in text.splitlines() if slice_.mig_devices[0] in line)
    assert "MIG 1g.10gb" in mig_line and "9.8 GiB" in mig_line and f"slice {slice_.id}" in mig_line
    row = next(line for line in text.splitlines() if line.strip().startswith(slice_.id))
    assert "hard (MIG 1g.10gb)" in row
    data = json.loads(subprocess.run([JUPYTER_VGPU, "status", "--json"], capture_output=True, text=True, timeout=60).stdout)
    (shown,) = data["slices"]
    assert shown["tier"] == "hard (MIG 1g.10gb)" and shown["tier_kind"] == "mig"
    assert shown["visible_devices"] == list(slice_.mig_devices)
    assert data["gpus"][0]["tier"] == "hard (MIG)"


# -- the ledger's upgrade ------------------------------------------------------------------
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE gpus (uuid TEXT PRIMARY KEY, idx INTEGER NOT NULL, name TEXT NOT NULL,
    memory_total INTEGER NOT NULL, seen REAL NOT NULL);
CREATE TABLE slices (id TEXT PRIMARY KEY, owner TEXT NOT NULL, uid INTEGER NOT NULL,
    holder_kind TEXT NOT NULL, holder TEXT NOT NULL, pid INTEGER, pid_start REAL,
    context_allowance INTEGER NOT NULL, logical_devices INTEGER NOT NULL,
    request TEXT NOT NULL, labels TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE slice_gpus (slice_id TEXT NOT NULL REFERENCES slices(id) ON DELETE CASCADE,
    gpu_uuid TEXT NOT NULL, gpu_index INTEGER NOT NULL, memory INTEGER NOT NULL, memory_total INTEGER NOT NULL,
    PRIMARY KEY (slice_id, gpu_uuid));
CREATE TABLE queue (ticket INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, uid INTEGER NOT NULL,
    holder_kind TEXT NOT NULL, holder TEXT NOT NULL, pid INTEGER, pid_start REAL,
    request TEXT NOT NULL, labels TEXT NOT NULL, created REAL NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def test_a_schema_1_ledger_is_upgraded_in_place_and_keeps_its_slices(tmp_path: Path, ledgers: Any) -> None:
    path = tmp_path / "ledger.sqlite"
    uuid = Inventory("1x16GiB").snapshot().gpus[0].uuid
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_1)
        db.execute(
            "INSERT INTO slices VALUES ('0123456789ab', 'alice', ?, 'command', 'python old.py', ?, NULL, ?, 1, ?, '{}', 1.0)",
            (os.getuid(), os.getpid(), CONTEXT, json.dumps(SliceRequest.parse("1/4").to_dict())),
        )
        db.execute("INSERT INTO slice_gpus VALUES ('0123456789ab', ?, 0, ?, ?)", (uuid, 4 * GiB, 16 * GiB))
    db.close()
    ledger = ledgers("1x16GiB")
    (old,) = ledger.slices()
    assert old.id == "0123456789ab" and old.memory == (4 * GiB,)
    assert old.tier == "cooperative" and old.mig_devices == ()
    assert old.pid_stamp == start_stamp(os.getpid())  # a holder alive at the upgrade is stamped (schema 4)
    assert take(ledger, "1/2").tier == "cooperative"  # and the upgraded file takes new slices
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        columns = {row[1] for row in check.execute("PRAGMA table_info(slice_gpus)")}
    check.close()
    assert {"mig_device", "mig_profile"} <= columns


def test_vgpu_magic_names_the_hard_tier_and_the_mig_device(gpus: Any, ledgers: Any) -> None:
    from jupyter_vgpu.kernel.state import KernelState, SliceFacts
    from jupyter_vgpu.kernel.status import status_sheet
    from jupyter_vgpu.kernel.usage import Usage

    ledger = ledgers(gpus([A100]))
    slice_ = take(ledger, "1/4")
    facts = SliceFacts.from_env(slice_environment(slice_, ledger_path=str(ledger.path)))
    assert facts.gpus == slice_.gpus and facts.devices == slice_.mig_devices
    text = status_sheet(KernelState(facts), Usage()).text()
    assert "\n  tier               hard (MIG 1g.10gb)\n" in text
    assert f"this kernel sees only its MIG device {slice_.mig_devices[0]}; the GPU itself keeps it inside" in text
    assert "none yet: set when TensorFlow, PyTorch, JAX or CuPy is imported" in text
    assert "a MIG device: its own memory and compute" in text


def test_vgpu_magic_names_the_mps_limits(ledgers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_vgpu.kernel.state import KernelState, SliceFacts
    from jupyter_vgpu.kernel.status import status_sheet
    from jupyter_vgpu.kernel.usage import Usage

    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")
    ledger = ledgers("1x16GiB")
    env = slice_environment(take(ledger, "1/4"), ledger_path=str(ledger.path))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    text = status_sheet(KernelState(SliceFacts.from_env()), Usage()).text()
    assert "\n  tier               hard (MPS)\n" in text
    assert "the MPS server refuses allocations past 4.0 GiB per GPU" in text
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M" in text and "25% of the SMs" in text
