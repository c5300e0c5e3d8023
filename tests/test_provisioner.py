"""The vgpu-provisioner with real kernels (jupyter_client + ipykernel) on simulated GPUs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.factory import KernelProvisionerFactory
from jupyter_process import free_port

from jupyter_vgpu.errors import SliceUnavailable, VGPUError
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.provisioner import VGPUProvisioner

pytestmark = pytest.mark.slow


@pytest.fixture
def kernels_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vgpu_env: dict[str, str]) -> Path:
    root = tmp_path / "jupyter-path"
    (root / "kernels").mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return root / "kernels"


def make_spec(kernels_dir: Path, name: str, config: dict[str, Any], display: str = "Python 3 (test GPU)") -> str:
    folder = kernels_dir / name
    folder.mkdir()
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display,
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": config}},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return name


async def run_code(km: AsyncKernelManager, code: str) -> str:
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        chunks: list[str] = []

        def collect(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                chunks.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                chunks.append("\n".join(msg["content"]["traceback"]))

        await client.execute_interactive(code, output_hook=collect, timeout=60)
        return "".join(chunks)
    finally:
        client.stop_channels()


@pytest.fixture
async def started() -> AsyncIterator[list[AsyncKernelManager]]:
    managers: list[AsyncKernelManager] = []
    yield managers
    for km in managers:
        if await km.is_alive():
            await km.shutdown_kernel(now=True)


async def start(kernel_name: str, managers: list[AsyncKernelManager], **kwargs: Any) -> AsyncKernelManager:
    # The kernel's five ports from this worker's own range below the ephemeral one (32768+): a
    # restart keeps them, and while the kernel was down another process's outgoing connection took
    # one (run 19: "Address already in use" at the restarted kernel's start).
    km = AsyncKernelManager(kernel_name=kernel_name, cache_ports=False)
    km.shell_port, km.iopub_port, km.stdin_port, km.control_port, km.hb_port = (free_port() for _ in range(5))
    managers.append(km)
    await km.start_kernel(**kwargs)
    return km


async def test_a_sliced_kernel_gets_its_slice_in_its_environment(kernels_dir: Path, started: list[AsyncKernelManager]) -> None:
    km = await start(make_spec(kernels_dir, "quarter", {"gpu_fraction": "1/4"}, "Python 3 (1/4 GPU)"), started)
    (slice_,) = open_ledger().slices()
    assert slice_.holder_kind == "kernel" and slice_.holder == km.kernel_id
    assert slice_.labels["kernel_display_name"] == "Python 3 (1/4 GPU)"
    assert slice_.pid == km.provisioner.pid  # the kernel process holds it  # type: ignore[union-attr]
    out = await run_code(
        km,
        "import os, sys, json; print(json.dumps({k: os.environ.get(k) for k in "
        "['CUDA_VISIBLE_DEVICES', 'JUPYTER_VGPU_SLICE_ID', 'JUPYTER_VGPU_FRACTION', 'JUPYTER_VGPU_MEMORY_LIMIT']}))",
    )
    env = json.loads(out)
    assert env["JUPYTER_VGPU_SLICE_ID"] == slice_.id
    assert env["CUDA_VISIBLE_DEVICES"] == slice_.gpus[0]
    assert env["JUPYTER_VGPU_FRACTION"] == "0.25"
    assert int(env["JUPYTER_VGPU_MEMORY_LIMIT"]) == (4 << 30) - (512 << 20)
    assert "--ext=jupyter_vgpu" in psutil.Process(slice_.pid).cmdline()
    await km.shutdown_kernel()
    assert open_ledger().slices() == []


async def test_eight_kernels_asking_for_a_quarter_of_one_gpu_exactly_four_start(
    kernels_dir: Path, started: list[AsyncKernelManager]
) -> None:
    name = make_spec(kernels_dir, "quarter", {"gpu_fraction": 0.25})
    results = await asyncio.gather(*(start(name, started) for _ in range(8)), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 4
    for failure in failures:
        assert isinstance(failure, SliceUnavailable)
        assert str(failure).startswith("No room for 1/4 GPU (4.0 GiB) now: every GPU is full.")
    slices = open_ledger().slices()
    assert len(slices) == 4
    assert sum(s.memory[0] for s in slices) == 16 << 30
    assert all([await km.is_alive() for km in started if km.has_kernel])


async def test_kernels_that_wait_in_line_start_as_others_shut_down(
    kernels_dir: Path, started: list[AsyncKernelManager], caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO)
    half = make_spec(kernels_dir, "half", {"gpu_fraction": 0.5, "wait_timeout": 60})
    first = await asyncio.gather(start(half, started), start(half, started))
    waiting = asyncio.ensure_future(start(half, started))
    deadline = time.monotonic() + 20
    while not open_ledger().waiting() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert [w.holder_kind for w in open_ledger().waiting()] == ["kernel"]
    await asyncio.sleep(2)  # several attempts in line (the ledger polls about four times a second)
    assert not waiting.done()
    await first[0].shutdown_kernel()
    third = await asyncio.wait_for(waiting, 60)
    assert await third.is_alive()
    assert len(open_ledger().slices()) == 2
    # Issue 25: one line as it joins the line, one as it leaves (it logged every attempt, 4 lines each).
    lines = [r.getMessage() for r in caplog.records if third.kernel_id in r.getMessage() and "line" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "waits in line for 1/2 GPU" in lines[0] and "\n" not in lines[0]
    assert "left the line after" in lines[1] and "with slice" in lines[1]


async def test_a_kernel_killed_with_sigkill_frees_its_slice(kernels_dir: Path, started: list[AsyncKernelManager]) -> None:
    name = make_spec(kernels_dir, "full", {"gpu_fraction": 1})
    km = await start(name, started)
    (held,) = open_ledger().slices()
    os.kill(held.pid, signal.SIGKILL)  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while await km.is_alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    # The next kernel's reservation reaps the dead one and gets the whole GPU.
    other = await start(name, started)
    (now_held,) = open_ledger().slices()
    assert now_held.holder == other.kernel_id


async def test_a_restarted_kernel_keeps_its_slice_id(kernels_dir: Path, started: list[AsyncKernelManager]) -> None:
    km = await start(make_spec(kernels_dir, "quarter", {"gpu_fraction": 0.25}), started)
    (before,) = open_ledger().slices()
    old_pid = before.pid
    await km.restart_kernel()
    (after,) = open_ledger().slices()
    assert after.id == before.id
    assert after.pid != old_pid and after.pid == km.provisioner.pid  # type: ignore[union-attr]
    await km.restart_kernel(now=True)
    (again,) = open_ledger().slices()
    assert again.id == before.id
    out = await run_code(km, "import os; print(os.environ['JUPYTER_VGPU_SLICE_ID'])")
    assert out.strip() == before.id


async def test_a_server_restart_with_running_kernels_keeps_their_slices(
    kernels_dir: Path, started: list[AsyncKernelManager]
) -> None:
    name = make_spec(kernels_dir, "quarter", {"gpu_fraction": 0.25})
    km = await start(name, started)
    (held,) = open_ledger().slices()
    info = await km.provisioner.get_provisioner_info()  # type: ignore[union-attr]
    connection = km.get_connection_info()
    assert info["vgpu_slice_id"] == held.id
    # The "server" goes away without shutting the kernel down; a new one reconnects to it.
    reborn = AsyncKernelManager(kernel_name=name, kernel_id=km.kernel_id)
    reborn.load_connection_info(connection)
    factory = KernelProvisionerFactory.instance(parent=reborn.parent)
    reborn.provisioner = factory.create_provisioner_instance(km.kernel_id, reborn.kernel_spec, parent=reborn)
    await reborn.provisioner.load_provisioner_info(info)  # type: ignore[union-attr]
    km.provisioner = None  # the old manager is gone; it must not release anything
    started.remove(km)
    started.append(reborn)
    assert open_ledger().reap() == []
    (still,) = open_ledger().slices()
    assert still.id == held.id
    assert reborn.provisioner.slice_id == held.id  # type: ignore[union-attr]
    await reborn.shutdown_kernel(now=True)
    assert open_ledger().slices() == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"gpu_fraction": 0}, "gpu_fraction 0 is outside (0, 1]"),
        ({"gpu_fraction": -1}, "gpu_fraction -1 is outside (0, 1]"),
        ({"gpu_fraction": 1.5}, "gpu_fraction 1.5 is outside (0, 1]"),
        ({"gpu_fraction": "abc"}, "gpu_fraction 'abc' is not a share of a GPU"),
        ({"gpu_memory": "12XB"}, "gpu_memory '12XB' is not a size"),
        ({"gpu_fraction": 0.5, "gpu_memory": "4GiB"}, "are both set; set only one"),
        ({"gpus": 0}, "gpus 0 is not allowed"),
        ({"placement": "random"}, "placement 'random' is not allowed"),
        ({"wait_timeout": -3}, "wait_timeout -3 is not allowed"),
        ({"launcher": "slurmx"}, "launcher 'slurmx' is not a launcher here; use one of: local, slurm."),
        # the settings are typed traits: what the type refuses is said in the same one sentence
        ({"gpus": "2"}, "gpus '2' is not allowed; use a whole number of GPUs, 1 or more"),
        ({"gpus": True}, "gpus True is not allowed"),
        ({"logical_devices": 0}, "logical_devices 0 is not allowed; use a whole number, 1 or more"),
        ({"gpu_fraction": [0.5]}, "gpu_fraction [0.5] is not a share of a GPU"),
        ({"gpu": -1}, "gpu -1 is not allowed; use a GPU index (0, 1, ...) or UUID."),
        ({"no_gpu": "maybe"}, "no_gpu 'maybe' is not allowed; use one of: cpu, fail."),
        ({"device_names": "name"}, "device_names 'name' is not allowed; use one of: uuid, index."),
        ({"launcher": "slurm", "slurm": {"restarts": -1}}, "slurm_restarts -1 is not allowed; use a whole number, 0 or more."),
        ({"launcher": "slurm", "slurm_restarts": "2"}, "slurm_restarts '2' is not allowed; use a whole number, 0 or more."),  # as written before issue 47
        ({"launcher": "slurm", "slurm": {"gpu_memory": "lots"}}, "slurm_gpu_memory 'lots' is not a size"),
        ({"launcher": "slurm", "slurm": {"restart": 1}}, "launcher slurm has no setting 'restart'; use args, restarts, gpu_memory."),
        ({"slurm_args": ["--time=1"]}, "config key 'slurm_args' is not allowed; use gpu_fraction, "),  # not this kernel's launcher's
    ],
)
async def test_bad_kernelspec_config_fails_with_one_clear_message_and_no_slice(
    kernels_dir: Path, started: list[AsyncKernelManager], config: dict[str, Any], message: str
) -> None:
    name = make_spec(kernels_dir, "bad", config)
    with pytest.raises(VGPUError) as caught:
        await start(name, started)
    assert message in str(caught.value)
    assert open_ledger().slices() == []
    assert open_ledger().waiting() == []


def test_server_wide_settings_are_typed_traits_read_from_a_command_line() -> None:
    """``c.VGPUProvisioner.*`` from a command line or config file: each setting's type reads the
    text (``--VGPUProvisioner.gpus=2`` is the number 2), and ``--help-all`` says what is allowed."""
    from traitlets.config import Application

    class Server(Application):  # type: ignore[misc]
        classes = [VGPUProvisioner]

    server = Server()
    server.parse_command_line(["--VGPUProvisioner.gpus=2", "--VGPUProvisioner.wait_timeout=30", "--VGPUProvisioner.placement=spread", "--VGPUProvisioner.gpu_fraction=1/4"])
    provisioner = VGPUProvisioner(config=server.config)
    assert (provisioner.gpus, provisioner.wait_timeout, provisioner.placement, provisioner.gpu_fraction) == (2, 30.0, "spread", 0.25)
    shown = " ".join(VGPUProvisioner.class_get_help().split())
    assert "Allowed: a whole number of GPUs, 1 or more" in shown
    assert "Allowed: one of: binpack, spread." in shown
    with pytest.raises(VGPUError, match=r"^gpus 0 is not allowed; use a whole number of GPUs, 1 or more \(at most \d+\)\.$"):
        VGPUProvisioner(config=Server().config, gpus=0)


async def test_no_gpu_starts_on_the_cpu_and_says_so(
    kernels_dir: Path, started: list[AsyncKernelManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "")  # real NVML: this machine has no GPU
    km = await start(make_spec(kernels_dir, "cpu", {"gpu_fraction": 0.25, "logical_devices": 2}), started)
    out = await run_code(km, "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']), os.environ['JUPYTER_VGPU_LOGICAL_DEVICES']); print(os.environ['JUPYTER_VGPU_NO_GPU'])")
    first, reason = out.strip().splitlines()
    assert first == "'' 2"
    assert "runs on the CPU" in reason
    assert open_ledger().slices() == []


async def test_no_gpu_can_be_configured_to_refuse(kernels_dir: Path, started: list[AsyncKernelManager], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "")
    with pytest.raises(SliceUnavailable, match="needs a GPU"):
        await start(make_spec(kernels_dir, "strict", {"gpu_fraction": 0.25, "no_gpu": "fail"}), started)


async def test_a_kernel_that_fails_to_launch_leaves_no_slice_behind(kernels_dir: Path, started: list[AsyncKernelManager]) -> None:
    name = make_spec(kernels_dir, "broken-argv", {"gpu_fraction": 0.5})
    spec_file = kernels_dir / name / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"][0] = "/nonexistent/python"
    spec_file.write_text(json.dumps(spec))
    with pytest.raises(FileNotFoundError):
        await start(name, started)
    assert open_ledger().slices() == []


async def test_a_launchers_refusal_at_launch_is_said_with_its_status_and_frees_the_slice(
    kernels_dir: Path, started: list[AsyncKernelManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hardening round five, M3: a Slurm node without a safe folder refused the kernel at launch
    (after its slice was reserved), and the start answered 500 "Unhandled error"."""
    from jupyter_vgpu.errors import InvalidConfig
    from jupyter_vgpu.launch import launchers
    from jupyter_vgpu.launch.errors import KernelSetupBroken

    said = "/tmp/jupyter-vgpu-1000 belongs to uid 1001, not to you (uid 1000), so this job has no safe folder."

    class Refusing(launchers.LocalLauncher):
        name = "refusing"

        async def launch(self, provisioner: Any, cmd: list[str], **kwargs: Any) -> Any:
            raise InvalidConfig(said)

    class Entry:
        name = "refusing"

        def load(self) -> type:
            return Refusing

    monkeypatch.setattr(launchers, "_plug_ins", lambda: {"refusing": Entry()})
    monkeypatch.setattr(launchers, "_made", {})
    with pytest.raises(KernelSetupBroken) as refused:
        await start(make_spec(kernels_dir, "refused", {"gpu_fraction": "1/4", "launcher": "refusing"}), started)
    assert refused.value.status_code == 503 and refused.value.message == said
    assert open_ledger().slices() == []


async def test_a_plug_in_launchers_kernel_starts_with_its_count_read_through_the_contract(
    kernels_dir: Path, started: list[AsyncKernelManager], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 47: a plug-in's settings live under its own key (``"faraway": {"retries": 2}``, which
    `jupyter vgpu kernelspec install --faraway --faraway-retries 2` writes), are checked by it at
    the start, and are read by it through the contract (``Launcher.settings``); its kernel learns
    where it runs (a ``Whereabouts``)."""
    from jupyter_vgpu.launch import launchers
    from jupyter_vgpu.launch.errors import InvalidKernelConfig

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures" / "faraway"))  # registered by its dist-info
    monkeypatch.setattr(launchers, "_made", {})
    monkeypatch.setenv("FARAWAY_STATE", str(tmp_path / "faraway.json"))
    km = await start(make_spec(kernels_dir, "far", {"gpu_fraction": "1/4", "launcher": "faraway", "faraway": {"args": ["--far-zone=b"], "retries": 2}}), started)
    said = await run_code(km, "import os; from jupyter_vgpu.launch.elsewhere import Whereabouts; print(Whereabouts.from_env(os.environ))")
    assert said.strip() == "Whereabouts(label='far', where='Faraway host far1 · a start tried again up to 2 times', ended=None, unfenced=None, share=None)"
    assert list(json.loads((tmp_path / "faraway.json").read_text())["kernels"]) == [km.kernel_id]
    with pytest.raises(InvalidKernelConfig, match=r"Kernel 'Python 3 \(test GPU\)': faraway_retries 'two' is not allowed; use a whole number, 0 or more\.$"):
        await start(make_spec(kernels_dir, "miscounted", {"gpu_fraction": "1/4", "launcher": "faraway", "faraway": {"retries": "two"}}), started)
    assert open_ledger().slices() == []  # its engine keeps the book


async def test_a_launcher_plug_in_starts_signals_and_watches_the_kernel(
    kernels_dir: Path, started: list[AsyncKernelManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a kernel runs is a launcher, found by name in the entry point group
    jupyter_vgpu.launchers: the provisioner starts, interrupts, polls and ends the kernel through
    it, and the slice carries its name, so the server asks it whether the kernel lives."""
    from jupyter_vgpu.launch import launchers

    calls: list[str] = []

    class Recording(launchers.LocalLauncher):
        name = "recording"

        async def launch(self, provisioner: Any, cmd: list[str], **kwargs: Any) -> Any:
            calls.append("launch")
            return await super().launch(provisioner, cmd, **kwargs)

        async def send_signal(self, provisioner: Any, signum: int) -> None:
            calls.append(f"signal {signum}")
            await super().send_signal(provisioner, signum)

        async def poll(self, provisioner: Any) -> int | None:
            calls.append("poll")
            return await super().poll(provisioner)

        async def kill(self, provisioner: Any, restart: bool = False) -> None:
            calls.append("kill")
            await super().kill(provisioner, restart=restart)

        def alive(self, pid: int | None, start: float | None = None, stamp: str | None = None) -> bool:
            calls.append("alive")
            return super().alive(pid, start, stamp)

        def report_folder(self, ledger_path: Any, labels: Any) -> Path:
            return elsewhere  # its kernels report where this host reads them, not the ledger's folder

    elsewhere = kernels_dir.parent / "elsewhere" / "reports"

    class Entry:
        name = "recording"

        def load(self) -> type:
            return Recording

    monkeypatch.setattr(launchers, "_plug_ins", lambda: {"recording": Entry()})
    monkeypatch.setattr(launchers, "_made", {})
    km = await start(make_spec(kernels_dir, "plugged", {"gpu_fraction": "1/4", "launcher": "recording"}), started)
    (slice_,) = open_ledger().slices()
    assert slice_.labels["launcher"] == "recording" and launchers.launcher_of(slice_.labels).alive(slice_.pid)
    assert await km.is_alive()
    # the views read the kernel's own report where its launcher says it lies
    from jupyter_vgpu.cli.status import collect
    from jupyter_vgpu.slices.reports import write_report

    write_report(elsewhere.parent / "ledger.db", slice_.id, {"memory_used": 3 * 2**20})  # writes elsewhere/<id>.json
    (row,) = collect(open_ledger())["slices"]
    assert row["id"] == slice_.id and row["memory_used"] == 3 * 2**20 and row["usage_source"] == "reported"
    await km.interrupt_kernel()
    assert calls[0] == "launch" and "poll" in calls and f"signal {signal.SIGINT}" in calls and "alive" in calls
    await km.shutdown_kernel(now=True)
    assert "kill" in calls and open_ledger().slices() == []
    with pytest.raises(VGPUError, match=r"launcher 'nowhere' is not a launcher here; use one of: local, slurm, recording\.$"):
        await start(make_spec(kernels_dir, "nowhere", {"gpu_fraction": "1/4", "launcher": "nowhere"}), started)
