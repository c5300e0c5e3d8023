"""`jupyter vgpu ...` as a user types it: real processes, real signals, one ledger."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_process import abort_for_stacks

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Ticket

JUPYTER_VGPU = [str(Path(sys.executable).parent / "jupyter-vgpu")]


def vgpu(*args: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*JUPYTER_VGPU, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def wait_until(predicate, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_jupyter_vgpu_is_a_jupyter_subcommand(vgpu_env: dict[str, str]) -> None:
    jupyter = Path(sys.executable).parent / "jupyter"
    result = subprocess.run([str(jupyter), "vgpu", "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("jupyter-vgpu ")


def test_status_says_the_gpus_are_simulated_and_lists_slices(vgpu_env: dict[str, str]) -> None:
    empty = vgpu("status", check=True).stdout
    assert "SIMULATED GPUs" in empty
    assert "No slices" in empty
    sleeper = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1/4", "--", "sleep", "30"])
    try:
        wait_until(lambda: "sleep 30" in vgpu("status").stdout)
        text = vgpu("status", check=True).stdout
        assert "GPU 0  Simulated GPU 16GiB" in text
        assert "reserved 4.0 GiB / 16.0 GiB" in text
        (slice_id,) = [s.id for s in open_ledger().slices()]
        row = text[text.index(f"  {slice_id} "):]  # folded to the terminal's width: the holder may be on a line of its own
        assert "4.0 GiB" in row.splitlines()[0] and "512 MiB" in row.splitlines()[0], text
        assert "sleep 30 [1/4 GPU]" in row, text
        data = json.loads(vgpu("status", "--json", check=True).stdout)
        assert data["simulated"] is True
        (entry,) = data["slices"]
        assert entry["holder"] == "sleep 30" and entry["memory_reserved"] == 4 << 30
        assert data["gpus"][0]["memory_free"] == 12 << 30
    finally:
        sleeper.terminate()
        sleeper.wait(20)
    assert sleeper.returncode == 128 + signal.SIGTERM  # SIGTERM was passed on to the command
    assert open_ledger().slices() == []


def test_status_keeps_its_box_on_long_lines_and_shows_slices_a_second_shell_cannot_place(
    vgpu_env: dict[str, str], simulation_file: Any
) -> None:
    name = "NVIDIA H100 80GB HBM3 with a name far longer than any terminal column could hold"
    simulation_file(devices=[{"name": name, "memory": "16GiB"}])
    sleeper = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1/4", "--", "sleep", "30"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        (held,) = open_ledger().slices()
        narrow = {**os.environ, "COLUMNS": "60"}
        text = subprocess.run([*JUPYTER_VGPU, "status"], env=narrow, capture_output=True, text=True, check=True).stdout
        boxed = [line for line in text.splitlines() if line.startswith(("|", "+"))]
        assert len(boxed) > 6 and all(len(line) == 60 and line[-1] in "|+" for line in boxed), text
        assert "far longer" in text and "free 12.0 GiB" in text
        assert "Slices here reserve memory only; compute is shared" in text  # what a slice shares

        elsewhere = {k: v for k, v in os.environ.items() if k != "JUPYTER_VGPU_SIMULATE"}
        other = subprocess.run([*JUPYTER_VGPU, "status"], env=elsewhere, capture_output=True, text=True, timeout=60)
        assert other.returncode == 0, other.stderr
        assert "1 slice in this ledger on GPUs this shell does not see: the GPU source differs" in other.stdout
        row = " ".join(other.stdout[other.stdout.index(held.id):].split())  # the row, as folded to the width
        assert row.startswith(f"{held.id} root 4.0 GiB") and "sleep 30 [1/4 GPU on GPU 0]" in row
    finally:
        sleeper.terminate()
        sleeper.wait(20)


def test_run_with_no_gpu_at_all_exits_69_not_75(vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here, simulated or real: trying later cannot help (EX_UNAVAILABLE), issue 33."""
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "")  # real NVML, and this machine has no GPU
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    result = vgpu("run", "-p", "0.25", "--", "true")
    assert result.returncode == 69, result.stderr
    assert result.stderr.startswith("jupyter vgpu: No NVIDIA GPU is available here") and "Traceback" not in result.stderr


def test_the_ledgers_shared_settings_give_every_command_the_same_simulated_gpus(
    vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ./scripts/lab writes beside the ledger: a shell without JUPYTER_VGPU_SIMULATE sees
    the demo's GPUs; the variable still wins; sharing "" takes the simulation out again."""
    from jupyter_vgpu.config import share_simulation

    monkeypatch.delenv("JUPYTER_VGPU_SIMULATE")
    shared = share_simulation("2x16GiB")
    assert shared == Path(vgpu_env["JUPYTER_VGPU_LEDGER"]).parent / "jupyter_vgpu_config.json"
    data = json.loads(vgpu("status", "--json", check=True).stdout)
    assert data["simulated"] is True and len(data["gpus"]) == 2 and data["simulation_set_in"] == str(shared)
    assert vgpu("run", "-q", "-n", "2", "-p", "1/4", "--", "true").returncode == 0
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "1x16GiB")
    data = json.loads(vgpu("status", "--json", check=True).stdout)
    assert len(data["gpus"]) == 1 and data["simulation_set_in"] is None
    monkeypatch.delenv("JUPYTER_VGPU_SIMULATE")
    assert share_simulation("") == shared and not shared.exists()
    assert json.loads(vgpu("status", "--json", check=True).stdout)["simulated"] is False


def test_the_ledgers_shared_settings_give_the_gpus_only_and_only_from_the_owners_own_file(
    vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger's folder may be one others can write into: a setting that runs code (the
    HAMi-core library, preloaded into every kernel) is never read from it, nor a file others may write."""
    from jupyter_vgpu.config import load_settings

    monkeypatch.delenv("JUPYTER_VGPU_SIMULATE")
    monkeypatch.delenv("JUPYTER_VGPU_HAMI_CORE", raising=False)
    shared = Path(vgpu_env["JUPYTER_VGPU_LEDGER"]).parent / "jupyter_vgpu_config.json"
    shared.parent.mkdir(parents=True, exist_ok=True)
    shared.write_text(json.dumps({"VGPU": {"simulate": "3x8GiB", "hami_core_library": "/tmp/planted.so"}}))
    shared.chmod(0o644)
    settings = load_settings()
    assert settings.resolved_simulate == "3x8GiB" and settings.hami_core_library == ""
    shared.chmod(0o666)
    assert load_settings().resolved_simulate == ""


def test_a_broken_shared_settings_file_is_named(vgpu_env: dict[str, str]) -> None:
    shared = Path(vgpu_env["JUPYTER_VGPU_LEDGER"]).parent / "jupyter_vgpu_config.json"
    shared.parent.mkdir(parents=True, exist_ok=True)
    shared.write_text("{not json")
    result = vgpu("status")
    assert result.returncode == 1 and result.stderr.startswith(f"jupyter vgpu: {shared} cannot be read:"), result.stderr
    assert "Traceback" not in result.stderr


def test_run_gives_the_command_the_kernel_environment(vgpu_env: dict[str, str]) -> None:
    script = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if 'VGPU' in k or k.startswith(('CUDA', 'XLA', 'CUPY'))}))"
    result = vgpu("run", "-q", "-m", "4GiB", "--", sys.executable, "-c", script, check=True)
    env = json.loads(result.stdout)
    assert env["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["JUPYTER_VGPU_FRACTION"] == "0.25"
    assert int(env["JUPYTER_VGPU_MEMORY_LIMIT"]) == (4 << 30) - (512 << 20)
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["CUPY_GPU_MEMORY_LIMIT"] == env["JUPYTER_VGPU_MEMORY_LIMIT"]
    assert env["JUPYTER_VGPU_LEDGER"] == vgpu_env["JUPYTER_VGPU_LEDGER"]
    assert result.stderr == ""  # -q


def test_run_passes_the_exit_code_through_and_frees_the_slice(vgpu_env: dict[str, str]) -> None:
    result = vgpu("run", "-p", "0.5", "--", sys.executable, "-c", "raise SystemExit(7)")
    assert result.returncode == 7
    assert "slice" in result.stderr and "2.0 GiB" not in result.stderr
    assert open_ledger().slices() == []


def test_sigkill_of_run_and_its_child_frees_the_slice(vgpu_env: dict[str, str]) -> None:
    runner = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1", "--", "sleep", "60"])
    wait_until(lambda: any(s.pid != runner.pid for s in open_ledger().slices()))
    (held,) = open_ledger().slices()
    child = psutil.Process(held.pid)  # the holder is the command itself
    assert child.ppid() == runner.pid
    os.kill(runner.pid, signal.SIGKILL)
    child.kill()
    runner.wait(10)
    child.wait(10)
    # The next reservation reaps the dead holder and gets the whole GPU.
    result = vgpu("run", "-p", "1", "--", "true")
    assert result.returncode == 0, result.stderr


def test_gc_frees_slices_of_dead_processes(vgpu_env: dict[str, str]) -> None:
    runner = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1/2", "--", "sleep", "60"])
    wait_until(lambda: any(s.pid != runner.pid for s in open_ledger().slices()))
    (held,) = open_ledger().slices()
    os.kill(runner.pid, signal.SIGKILL)
    os.kill(held.pid, signal.SIGKILL)
    runner.wait(10)
    wait_until(lambda: not psutil.pid_exists(held.pid) or psutil.Process(held.pid).status() == psutil.STATUS_ZOMBIE)
    result = vgpu("gc", check=True)
    assert f"Freed slice {held.id}" in result.stdout
    assert "1 slice freed; 0 in use." in result.stdout


def test_release_frees_a_slice_and_unknown_ids_are_one_sentence(vgpu_env: dict[str, str]) -> None:
    sleeper = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1/4", "--", "sleep", "30"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        (held,) = open_ledger().slices()
        result = vgpu("release", held.id, check=True)
        assert f"Released slice {held.id}" in result.stdout
        assert open_ledger().slices() == []
    finally:
        sleeper.kill()
        sleeper.wait(10)
    missing = vgpu("release", "doesnotexist")
    assert missing.returncode != 0
    assert missing.stderr.strip() == (
        f"jupyter vgpu: No slice 'doesnotexist' in the ledger {vgpu_env['JUPYTER_VGPU_LEDGER']}; `jupyter vgpu status` lists them."
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "-p", "1.5", "--", "true"], "-p/--fraction '1.5' is outside (0, 1]"),
        (["run", "-p", "abc", "--", "true"], "-p/--fraction 'abc' is not a share of a GPU"),
        (["run", "-m", "12XB", "--", "true"], "-m/--memory '12XB' is not a size"),
        (["run", "-n", "0", "--", "true"], "-n/--gpus '0' is not allowed"),
        (["run", "--wait", "soon", "--", "true"], "--wait 'soon' is not allowed"),
        (["run", "--wait", "٣", "--", "true"], "--wait '٣' is not allowed"),
        (["run", "-n", "٣", "--", "true"], "-n/--gpus '٣' is not allowed"),
        (["run", "-p", "0.5"], "No command given"),
        (["run", "--", "no-such-command-xyz"], "command not found: 'no-such-command-xyz'"),
        (["run", "-p", "0.5", "-m", "1GiB", "--", "true"], "not allowed with argument"),
        (["run", "-m", "40GiB", "--", "true"], "more than the largest GPU here (16.0 GiB)"),
        (["run", "-n", "2", "--wait", "30", "--", "true"], "needs 2 GPUs but this machine has 1"),
    ],
)
def test_bad_arguments_get_one_clear_sentence_and_leave_nothing_behind(
    vgpu_env: dict[str, str], args: list[str], message: str
) -> None:
    result = vgpu(*args)
    # A request that can never fit exits 69 (EX_UNAVAILABLE), not 75 ("trying later can work"),
    # so a retry loop does not spin for ever (issue 25), and says waiting cannot help.
    never = "largest GPU" in message or "this machine has" in message
    assert result.returncode == (127 if "not found" in message else 69 if never else 2)
    assert not never or ("Waiting cannot help: ask for less." in result.stderr and "Waited" not in result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert open_ledger().slices() == []


@pytest.mark.parametrize("columns", [50, 80, 100])
def test_status_keeps_every_line_inside_the_width_of_its_boxes(vgpu_env: dict[str, str], columns: int) -> None:
    """A long holder ran past the GPU's box (issue 33): every line folds to the terminal's width."""
    long_path = "/home/someone/projects/" + "a-rather-long-folder-name/" * 3 + "analysis.ipynb"
    held = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "0.33", "--", "sh", "-c", "sleep 30", long_path])
    try:
        wait_until(lambda: "sleep 30" in vgpu("status").stdout)
        shown = subprocess.run(
            [*JUPYTER_VGPU, "status"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": str(columns)}
        ).stdout
        lines = shown.splitlines()
        box = next(line for line in lines if line.startswith("+-"))
        assert len(box) == columns
        assert [line for line in lines if len(line) > columns] == []
        assert "[0.33 GPU]" in shown  # the request stays whole
        assert "/home/someone/projects/a-rather" in shown and "SIMULATED GPUs" in shown  # folded, not dropped
    finally:
        held.kill()
        held.wait(10)


@pytest.mark.parametrize(("typed", "said"), [("0.33", "0.33 GPU"), ("33%", "33% of a GPU"), ("1/4", "1/4 GPU")])
def test_a_share_is_said_back_as_it_was_typed(vgpu_env: dict[str, str], typed: str, said: str) -> None:
    """`-p 0.33` came back as "33/100 GPU" (issue 33): in run's line and in status."""
    held = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", typed, "--", "sleep", "30"], stderr=subprocess.PIPE, text=True)
    try:
        assert f"({said})" in _stderr_line(held)
        wait_until(lambda: "sleep 30" in vgpu("status").stdout)
        line = next(line for line in vgpu("status").stdout.splitlines() if "sleep 30" in line)
        assert f"[{said}]" in line, line
        (listed,) = json.loads(vgpu("status", "--json", check=True).stdout)["slices"]
        assert listed["request_text"] == said
    finally:
        held.kill()
        held.wait(10)


def test_full_gpu_refusal_says_who_holds_it(vgpu_env: dict[str, str]) -> None:
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "3/4", "--", "sleep", "30"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        result = vgpu("run", "-p", "1/2", "--", "true")
        assert result.returncode == 75  # EX_TEMPFAIL: no room now
        assert "No room for 1/2 GPU (8.0 GiB) now: at most 4.0 GiB (about 1/4 GPU) on GPU 0 is free." in result.stderr
        assert "sleep 30" in result.stderr
    finally:
        holder.kill()
        holder.wait(10)


def test_a_multi_gpu_refusal_says_how_many_gpus_have_room_and_offers_fewer(
    vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 0 full, GPU 1 empty, `-n 2 -p 0.5`: the count is short, not the memory (issue 33)."""
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "2x16GiB")
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "--gpu", "0", "--", "sleep", "60"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        now = vgpu("run", "-n", "2", "-p", "0.5", "--", "true")
        assert now.returncode == 75, now.stderr
        first, *_, advice = now.stderr.strip().splitlines()
        assert first == (
            "jupyter vgpu: No room for 2 x 1/2 GPU (8.0 GiB per GPU) now: only 1 GPU has room for 1/2 GPU (GPU 1), "
            "where 2 are needed."
        )
        assert "too little for any slice" not in now.stderr
        assert advice.startswith("What you can do: Ask for 1 GPU (`-n 1`, or `gpus: 1` in a kernelspec): 1/2 GPU on each fits now.")
        waited = vgpu("run", "-q", "-n", "2", "-p", "0.5", "--wait", "0.5", "--", "true")
        assert waited.returncode == 75, waited.stderr
        assert waited.stderr.startswith("jupyter vgpu: Waited 0.5 s in line. No room for 2 x 1/2 GPU")
        assert "Wait in line" not in waited.stderr  # it just did
        assert "Wait longer than 0.5 s: a larger wait_timeout, or a larger `--wait`." in waited.stderr
    finally:
        holder.kill()
        holder.wait(10)


def test_waiting_in_line_shows_in_status_then_runs(vgpu_env: dict[str, str]) -> None:
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1", "--", "sleep", "60"])
    wait_until(lambda: len(open_ledger().slices()) == 1)
    waiter = subprocess.Popen(
        [*JUPYTER_VGPU, "run", "-q", "-p", "1/2", "--wait", "60", "--", "echo", "got it"], stdout=subprocess.PIPE, text=True
    )
    seen: list[str] = []

    def waiting_shown() -> bool:
        seen.append(vgpu("status").stdout)
        return "Waiting in line:" in seen[-1]

    wait_until(waiting_shown)
    line = next(text for text in seen[-1].splitlines() if "echo 'got it'" in text)
    assert "#1" in line and "1/2 GPU" in line
    holder.terminate()  # the GPU frees up: the waiter gets its slice and runs
    out, _ = waiter.communicate(timeout=60)
    holder.wait(10)
    assert waiter.returncode == 0 and out.strip() == "got it"


def _stderr_line(process: subprocess.Popen[str], timeout: float = 30) -> str:
    """The next line ``process`` writes on stderr, or what it wrote before ``timeout``."""
    import select

    assert process.stderr is not None
    ready, _, _ = select.select([process.stderr], [], [], timeout)
    return process.stderr.readline() if ready else "(nothing)"


def test_run_wait_says_it_waits_in_line_and_when_its_place_changes(vgpu_env: dict[str, str]) -> None:
    """A blank terminal while waiting looks like a hang (issue 33): one line as it joins the line,
    one when its place changes; nothing per attempt. (-q says nothing: the test above.)"""
    # Ctrl+C did nothing where the suite had inherited SIGINT ignored (tests/conftest.py restores it);
    # should it hang again, the failure shows where the command was.
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1", "--", "sleep", "60"])
    waiters: list[subprocess.Popen[str]] = []
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        for command in ("true", "echo second"):
            waiters.append(subprocess.Popen(
                [*JUPYTER_VGPU, "run", "-p", "1/2", "--wait", "300", "--", *command.split()],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))  # fmt: skip
            wait_until(lambda: len(open_ledger().waiting()) == len(waiters))
        first, second = waiters
        assert _stderr_line(first) == "jupyter vgpu: no room now: waiting in line (#1) up to 300 s for 1/2 GPU; Ctrl+C gives up.\n"
        assert _stderr_line(second) == "jupyter vgpu: no room now: waiting in line (#2) up to 300 s for 1/2 GPU; Ctrl+C gives up.\n"
        first.send_signal(signal.SIGINT)  # Ctrl+C gives up: the second moves up
        try:
            assert first.wait(30) == 130
        except subprocess.TimeoutExpired:
            abort_for_stacks(first)
            assert first.stderr is not None
            raise AssertionError(f"Ctrl+C did not end the waiting command in 30 s; it was at:\n{first.stderr.read()}") from None
        assert _stderr_line(second) == "jupyter vgpu: now #1 in line for 1/2 GPU.\n"
        holder.terminate()
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0 and out == "second\n", err
        assert "in line" not in err  # said once per place, not once per attempt
    finally:
        for process in (holder, *waiters):
            process.kill()
            process.wait(10)


def test_a_cancelled_place_in_line_ends_the_wait_with_exit_75(vgpu_env: dict[str, str]) -> None:
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-q", "-p", "1", "--", "sleep", "60"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        waiter = subprocess.Popen(
            [*JUPYTER_VGPU, "run", "-q", "-p", "1/2", "--wait", "60", "--", "true"], stderr=subprocess.PIPE, text=True
        )
        wait_until(lambda: len(open_ledger().waiting()) == 1)
        (place,) = open_ledger().waiting()
        open_ledger().leave_queue(Ticket(place.ticket, place.request))  # what Cancel in JupyterLab does
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 75, err
        assert err.startswith("jupyter vgpu: Stopped waiting in line for 1/2 GPU after ")
        assert err.rstrip().endswith(" s: the place in line was cancelled.")
    finally:
        holder.terminate()
        holder.wait(10)


def test_corrupt_ledger_message_and_documented_way_back(vgpu_env: dict[str, str]) -> None:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"garbage" * 1000)
    broken = vgpu("status")
    assert broken.returncode != 0
    assert "is corrupt" in broken.stderr and "jupyter vgpu gc --reset-ledger" in broken.stderr
    assert "Traceback" not in broken.stderr
    reset = vgpu("gc", "--reset-ledger", check=True)
    assert "Moved the ledger to" in reset.stdout
    kept = list(path.parent.glob("ledger.sqlite.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"garbage")
    assert vgpu("status").returncode == 0


def test_bad_simulation_variable_is_one_sentence(vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "lots")
    result = vgpu("status")
    assert result.returncode != 0
    assert "JUPYTER_VGPU_SIMULATE='lots' is not a device spec" in result.stderr
    assert "Traceback" not in result.stderr


WITHOUT_JUPYTERHUB = "import sys; sys.modules['jupyterhub'] = None; from jupyter_vgpu.cli import main; sys.exit(main(sys.argv[1:]))"


def test_without_the_hub_extra_every_command_is_listed_and_the_broker_names_the_extra(vgpu_env: dict[str, str]) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", WITHOUT_JUPYTERHUB, *args], capture_output=True, text=True, timeout=60)

    listed = cli("--help")
    assert listed.returncode == 0, listed.stderr
    for command in ("status", "run", "release", "gc", "kernelspec", "broker"):
        assert command in listed.stdout
    assert cli("status").returncode == 0
    broker = cli("broker", "--socket", str(Path(vgpu_env["JUPYTER_VGPU_LEDGER"]).parent / "b.sock"))
    assert broker.returncode != 0
    # The extra's own packages, which pip finds whether jupyter-vgpu came from a checkout, a wheel
    # or the index ('jupyter-vgpu[hub]' needs it on the index).
    assert broker.stderr.strip() == (
        "jupyter vgpu: jupyter-vgpu's JupyterHub integration (broker, quotas, admin page) needs jupyterhub, "
        "which is not installed: pip install 'jupyterhub-kubespawner>=7' 'jupyterhub>=5' (jupyter-vgpu's [hub] extra)."
    )
    imported = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['jupyterhub'] = None; import jupyter_vgpu.hub"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert imported.returncode != 0
    assert imported.stderr.strip().splitlines()[-1].endswith("pip install 'jupyterhub-kubespawner>=7' 'jupyterhub>=5' (jupyter-vgpu's [hub] extra).")


def test_run_inside_a_slice_replaces_the_slice_variables_it_inherits(vgpu_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=99999M")  # from an outer MPS slice
    monkeypatch.setenv("JUPYTER_VGPU_SLICE_ID", "0123456789ab")
    shown = vgpu("run", "-p", "1/4", "--", sys.executable, "-c",
                 "import os; print(os.environ['JUPYTER_VGPU_SLICE_ID'], os.environ.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'))")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    slice_id, mps = shown.stdout.split()
    assert slice_id != "0123456789ab" and mps == "None"


def test_run_exit_codes_tell_a_refusal_from_the_commands_own_code(vgpu_env: dict[str, str]) -> None:
    assert vgpu("run", "-p", "1/4", "--", "sh", "-c", "exit 3").returncode == 3  # the command's own
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1", "--", "sleep", "30"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        refused = vgpu("run", "-p", "1/4", "--", "sh", "-c", "exit 3")
        assert refused.returncode == 75 and "No room for 1/4 GPU" in refused.stderr
    finally:
        holder.terminate()
        holder.wait(10)


def run_on_terminal(command: list[str], columns: int) -> str:
    """What ``command`` writes to stderr when stderr is a terminal ``columns`` wide (a real pty)."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=side, env=env)
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(60)
    os.close(main)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_refusal_is_folded_to_the_terminal_width(vgpu_env: dict[str, str]) -> None:
    holder = subprocess.Popen([*JUPYTER_VGPU, "run", "-p", "1", "--", "sleep", "30"])
    try:
        wait_until(lambda: len(open_ledger().slices()) == 1)
        stderr = run_on_terminal([*JUPYTER_VGPU, "run", "-p", "1/4", "--", "true"], columns=60)
        lines = stderr.splitlines()
        assert len(lines) > 3 and max(len(line) for line in lines) <= 60, stderr
        assert lines[0].startswith("jupyter vgpu: No room for 1/4 GPU")
        assert any(line.startswith("  GPU 0 (Simulated GPU 16GiB)") for line in lines)
    finally:
        holder.terminate()
        holder.wait(10)


def test_small_edges_of_the_command_line(vgpu_env: dict[str, str]) -> None:
    # Issue 25: `release 36a8` said only "No slice"; a bad id is a usage mistake (exit 2).
    short = vgpu("release", "36a8")
    assert short.returncode == 2 and "give at least 6 of them ('36a8' has 4)" in short.stderr, short.stderr
    unknown = vgpu("release", "0123456789ab")
    assert unknown.returncode == 2 and "No slice '0123456789ab'" in unknown.stderr
    # `status --json | head`: the reader goes away; no BrokenPipeError traceback. (A pipe whose
    # reading end is closed before the command writes: what head does, without the race.)
    read, write = os.pipe()
    os.close(read)
    try:
        piped = subprocess.run([*JUPYTER_VGPU, "status", "--json"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr
    assert piped.returncode == 141
    # The `run` line says the GPUs are simulated.
    ran = vgpu("run", "-p", "1/4", "--", "true")
    assert ran.returncode == 0 and "[SIMULATED GPUs, not real hardware]" in ran.stderr, ran.stderr
