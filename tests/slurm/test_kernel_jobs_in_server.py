"""Slurm kernels through a real Jupyter server on the login node (non-root base URL): the REST
slices show each kernel's job and node, and a server that crashed leaves no job once it starts
again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import TOKEN, JupyterProcess, isolated_env, start_jupyter, wait_for, write_sliced_kernelspec

from .cluster import SlurmCluster

pytestmark = pytest.mark.slow

NAME = "python3-vgpu-1-4-slurm"
DISPLAY = "Python 3 (1/4 GPU, Slurm)"


def server_env(slurm: SlurmCluster, tmp: Path) -> dict[str, str]:
    (tmp / "node-tmp").mkdir(exist_ok=True)
    return isolated_env(
        tmp,
        SLURM_CONF=slurm.env["SLURM_CONF"], PATH=slurm.env["PATH"], JUPYTER_VGPU_SIMULATE=slurm.env["JUPYTER_VGPU_SIMULATE"],
        TMPDIR=str(tmp / "node-tmp"), JUPYTER_VGPU_SLURM_TIMEOUT="5",
    )  # fmt: skip


def start_server(slurm: SlurmCluster, tmp: Path) -> JupyterProcess:
    write_sliced_kernelspec(tmp / "data", {"gpu_fraction": 0.25, "launcher": "slurm", "wait_timeout": 30}, name=NAME, display_name=DISPLAY)
    return start_jupyter(tmp, env=server_env(slurm, tmp), args=["--VGPUServer.monitor_interval=0.5"])


def open_notebook(server: JupyterProcess, path: str) -> str:
    status, session = server.api("POST", "api/sessions", {"path": path, "type": "notebook", "name": path, "kernel": {"name": NAME}}, timeout=60)
    assert status == 201, session
    return str(session["kernel"]["id"])


def job_row(server: JupyterProcess, kernel_id: str) -> dict[str, Any] | None:
    status, reply = server.api("GET", "api/vgpu/slices", timeout=10)
    assert status == 200, reply
    return next((row for row in reply["slices"] if row.get("kernel_id") == kernel_id and row.get("job_id")), None)


def squeue(slurm: SlurmCluster) -> list[str]:
    return slurm.run("squeue", "--noheader", "--format=%i|%j|%T|%N", timeout=10).stdout.split()


def test_a_session_shows_its_kernels_job_and_node_in_the_rest_slices(slurm: SlurmCluster, tmp_path: Path) -> None:
    server = start_server(slurm, tmp_path)
    try:
        kernel_id = open_notebook(server, "train.ipynb")
        row = wait_for(lambda: job_row(server, kernel_id), "the kernel's job in /api/vgpu/slices", timeout=30)
        (line,) = squeue(slurm)
        job, name, state, node = line.split("|")
        # The notebook's name where an admin looks: first in the job's name (squeue's 8 characters
        # show "train-ju"), in its comment (scontrol show job), and in the login node's status.
        assert (row["job_id"], row["node"], row["slurm_state"], name) == (job, node, state, f"train-jupyter-vgpu-kernel-{kernel_id}")
        shown = slurm.run("scontrol", "--oneliner", "show", "job", job, timeout=10).stdout
        assert " notebook=train.ipynb" in shown.split("Comment=", 1)[1].split(" Req", 1)[0], shown
        status = subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "status"], env=server.env, capture_output=True, text=True, timeout=60)
        assert f"8/32 shards (1/4 GPU) notebook train.ipynb kernel {kernel_id}" in " ".join(status.stdout.split()), status.stdout
        assert state == "RUNNING"
        assert row["shards"] == 8 and row["shards_per_gpu"] == 32 and row["fraction"] == 0.25
        assert row["path"] == "train.ipynb" and row["kernel_display_name"] == DISPLAY and row["running_here"]
        assert row["request_text"] == "1/4 GPU: 8 of 32 shards"
        assert row["share_text"] == "8/32 shards (1/4 GPU)" and row["partition"] == "gpu"
        # The kernel says its budget from its node: 8 of 32 shards of a 16 GiB GPU; no use yet.
        row = wait_for(lambda: (r := job_row(server, kernel_id)) and r["memory_reserved"] and r, "the job's budget", timeout=30)
        assert (row["memory_reserved"], row["memory_used"], row["state"]) == (4 * 2**30, None, "unknown")
        assert row["gpu_indices"] in ([0], [1])  # its GPU, from the same report (run 21 looked before it came)
        assert row["elsewhere"]["simulated"] is True  # the nodes' GPUs are simulated: the views can say so
        # Only a kernel of this server waiting in Slurm's queue leaves it through the line's DELETE.
        said = {ticket: server.api("DELETE", f"api/vgpu/waiting/{ticket}", timeout=10) for ticket in ("slurm-x", "slurm-99999", row["id"])}
        assert said["slurm-x"] == (400, {"message": "'slurm-x' is not a place in line; GET /api/vgpu/slices lists them.", "reason": None})
        for ticket, job_id in (("slurm-99999", "99999"), (row["id"], job)):
            message = f"No kernel of this server waits in Slurm's queue in job {job_id}, nor is its job ending; it may have started or left."
            assert said[ticket] == (404, {"message": message, "reason": None}), said
        assert [line.split("|")[2] for line in squeue(slurm)] == ["RUNNING"]
        # The kernel's own view (the status bar's) is its job, and no host use: here is only srun.
        status, kernel = server.api("GET", f"api/vgpu/kernels/{kernel_id}", timeout=10)
        assert status == 200 and kernel["host"] is None, kernel
        assert (kernel["slice"]["job_id"], kernel["slice"]["node"], kernel["slice"]["memory_reserved"]) == (job, node, 4 * 2**30)
        status, _ = server.api("DELETE", f"api/kernels/{kernel_id}", timeout=30)
        assert status == 204
        wait_for(lambda: squeue(slurm) == [], "no job after the kernel's shutdown", timeout=20)
    finally:
        server.stop()


def run_in_kernel(server: JupyterProcess, kernel_id: str, code: str) -> str:
    """Execute ``code`` in the server's kernel as a notebook would (its connection file); its stdout."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(Path(server.env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    # A client without a manager takes the kernel for dead after one heartbeat missed by 1 s,
    # which a loaded machine's kernel starting on its node once did: 10 s.
    client.hb_channel.time_to_dead = 10.0
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        said: list[str] = []
        reply = client.execute_interactive(code, timeout=120, output_hook=lambda m: said.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(said)
    finally:
        client.stop_channels()


def test_a_kernels_use_on_its_node_moves_in_its_rest_row_as_a_tensor_comes_and_goes(slurm: SlurmCluster, tmp_path: Path) -> None:
    server = start_server(slurm, tmp_path)
    try:
        kernel_id = open_notebook(server, "use.ipynb")
        wait_for(lambda: (r := job_row(server, kernel_id)) and r["memory_reserved"], "the job's budget", timeout=30)
        # 400 MiB in TensorFlow on the node's (simulated) GPU: no %vgpu, no report written by hand.
        run_in_kernel(server, kernel_id, "import tensorflow as tf\nx = tf.ones((100, 1024, 1024), dtype=tf.float32)\n")
        row = wait_for(lambda: (r := job_row(server, kernel_id)) and (r["memory_used"] or 0) >= 400 * 2**20 and r, "the tensor's use", timeout=30)
        assert row["memory_used"] <= 2**30 and row["usage_source"] == "reported", row  # TensorFlow holds it in 512 MiB
        run_in_kernel(server, kernel_id, "del x\n")
        row = wait_for(lambda: (r := job_row(server, kernel_id)) and r["memory_used"] is not None and r["memory_used"] < 100 * 2**20 and r, "the use after del", timeout=30)
        assert row["usage_source"] == "reported"
    finally:
        server.stop()


def test_a_kernel_whose_job_its_user_cancelled_dies_saying_why_and_no_new_job_is_asked(slurm: SlurmCluster, tmp_path: Path) -> None:
    import json

    import websocket

    server = start_server(slurm, tmp_path)
    try:
        kernel_id = open_notebook(server, "cancelled.ipynb")
        job = wait_for(lambda: job_row(server, kernel_id), "the kernel's job", timeout=30)["job_id"]
        # The notebook's connection, as JupyterLab's: it hears the kernel's status.
        url = server.url.replace("http://", "ws://") + f"api/kernels/{kernel_id}/channels"
        notebook = websocket.create_connection(url, header=[f"Authorization: token {server.env.get('JUPYTER_TOKEN') or TOKEN}"], timeout=60)
        try:
            slurm.run("scancel", job, timeout=10)  # its user, from a shell on the login node

            def dead() -> bool:
                msg = json.loads(notebook.recv())
                return msg.get("msg_type") == "status" and msg["content"].get("execution_state") == "dead"

            wait_for(dead, "the notebook told its kernel is dead", timeout=60)
        finally:
            notebook.close()
        status, _ = server.api("GET", f"api/kernels/{kernel_id}", timeout=10)
        assert status == 404  # the server let it go: a new kernel is the notebook's to start
        assert squeue(slurm) == []  # no new job was asked for
        sentence = (
            f"Slurm ended this kernel's job {job}: it was cancelled outside this server (scancel by you or an administrator) (CANCELLED); "
            "no new job is asked for this kernel (slurm_restarts 0), so its variables are lost: "
            "start a new kernel for this notebook (Kernel > Change Kernel..., or open the notebook again) to run in a new job."
        )
        said_in_log = [line for line in server.log_text().splitlines() if f"job {job}" in line]
        assert any(sentence in line for line in said_in_log), said_in_log
        status, said = server.api("GET", "api/vgpu/refusals", timeout=10)
        assert status == 200 and any(sentence in json.dumps(r) for r in said.get("refusals", said)), said
        assert not (tmp_path / "data" / "vgpu" / "slurm" / kernel_id).exists()  # its reports folder went with it
        assert "Traceback" not in server.log_text() and "restarting kernel" not in server.log_text()  # jupyter_client's restarter gave up at once
    finally:
        server.stop()


def test_a_crashed_server_leaves_no_job_once_it_starts_again(slurm: SlurmCluster, tmp_path: Path) -> None:
    server = start_server(slurm, tmp_path)
    try:
        kernel_id = open_notebook(server, "crash.ipynb")
        wait_for(lambda: job_row(server, kernel_id), "the kernel's job", timeout=30)
    finally:
        server.stop(signal.SIGKILL)
    (line,) = squeue(slurm)
    assert line.split("|")[2] == "RUNNING"  # SIGKILL: nothing could cancel it
    reports = tmp_path / "data" / "vgpu" / "slurm"
    assert (reports / kernel_id / "job.json").exists()
    stale = reports / "gone-kernel"  # what an earlier killed server left, its job long ended
    stale.mkdir()
    (stale / "job.json").write_text('{"job_id": "99999"}')
    other = start_other_user_of_slurm(slurm, tmp_path)  # another live starter's job of this user stays
    try:
        again = start_server(slurm, tmp_path)
        try:
            wait_for(lambda: [j.split("|")[1] for j in squeue(slurm)] == [f"jupyter-vgpu-kernel-{other[1]}"], "the orphan cancelled", timeout=30)
            wait_for(lambda: not (reports / kernel_id).exists() and not stale.exists(), "the killed server's reports folders removed", timeout=30)
        finally:
            again.stop()
    finally:
        other[0].kill()
        other[0].wait(10)
        slurm.run("scancel", "--name", f"jupyter-vgpu-kernel-{other[1]}", timeout=10)


def test_a_kernel_shut_down_while_slurmctld_is_down_stays_listed_as_ending_and_its_job_is_cancelled_once_slurm_returns(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    server = start_server(slurm, tmp_path)
    try:
        kernel_id = open_notebook(server, "down.ipynb")
        job = wait_for(lambda: job_row(server, kernel_id), "the kernel's job", timeout=30)["job_id"]
        slurm.stop_controller()
        status, _ = server.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)
        assert status == 204
        row = wait_for(lambda: (r := job_row(server, kernel_id)) and r.get("ending") and r, "the job listed as ending", timeout=30)
        assert row["job_id"] == job and row["id"] == f"slurm-{job}"
        assert f"Slurm has not confirmed the cancel of job {job} (Slurm does not answer (slurmctld at 127.0.0.1:" in row["ending"]
        assert row["ending"].endswith("it still holds its GPU share, and its cancel is tried again every 5 s.")
        assert row["share_note"] == f"Ending: {row['ending']}"
        # Its cancel, while Slurm does not answer, says so in one sentence and keeps the job listed.
        status, said = server.api("DELETE", f"api/vgpu/waiting/slurm-{job}", timeout=60)
        assert status == 503 and said["message"].startswith("Slurm does not answer (slurmctld at 127.0.0.1:"), said
        assert said["message"].endswith(f"job {job} is not cancelled yet; it stays listed as ending and its cancel is tried again every 5 s.")
        assert job_row(server, kernel_id) is not None
        # srun has ended and was reaped, though Slurm could not say how its job ended (round five, L-2)
        wait_for(lambda: not srun_children(server) and not zombies(server), "srun ended and reaped", timeout=60)
        slurm.start_controller()
        wait_for(lambda: squeue(slurm) == [], "the job cancelled once slurmctld answers again", timeout=60)
        wait_for(lambda: job_row(server, kernel_id) is None, "the ending row gone", timeout=30)
        assert server.process.poll() is None  # the same server: no restart needed
        wait_for(lambda: not zombies(server), "no child of the server left unreaped", timeout=30)
    finally:
        server.stop()


def srun_children(server: JupyterProcess) -> list[str]:
    """The server's srun children that still run (a zombie is not running)."""
    import psutil

    found = []
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if child.name() == "srun" and child.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{child.pid} {child.status()}")
        except psutil.Error:
            continue
    return found


def zombies(server: JupyterProcess) -> list[str]:
    """The server's children that ended and nobody reaped."""
    import psutil

    found = []
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append(f"{child.pid} {child.name()}")
        except psutil.Error:
            continue
    return found


def start_other_user_of_slurm(slurm: SlurmCluster, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A process of this host that holds a kernel-named job as a live server would."""
    kernel_id = "0000aaaa-other-server"
    code = (
        "import subprocess, sys, time\n"
        "from jupyter_vgpu.launch.slurm.client import starter_comment\n"
        f"subprocess.run(['salloc', '--no-shell', '--job-name=jupyter-vgpu-kernel-{kernel_id}', '--gres=shard:1', "
        "'--comment=' + starter_comment()], check=True, timeout=20)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], env={**slurm.env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
    return process, kernel_id


def test_a_start_slurm_would_keep_waiting_is_refused_with_what_to_do_and_nothing_for_the_reclaim(slurm: SlurmCluster, tmp_path: Path) -> None:
    import json

    server = start_server(slurm, tmp_path)
    write_sliced_kernelspec(tmp_path / "data", {"gpu_fraction": 0.25, "launcher": "slurm", "slurm_args": ["--partition=gpu"]}, name="now", display_name="Now (1/4 GPU, Slurm)")
    fillers = [slurm.run("salloc", "--no-shell", "--job-name=filler", "--gres=gpu:2", "--nodes=1", timeout=20) for _ in range(2)]
    try:
        assert all("Granted job allocation" in f.stderr for f in fillers), [f.stderr for f in fillers]
        status, said = server.api("POST", "api/sessions", {"path": "now.ipynb", "type": "notebook", "name": "now.ipynb", "kernel": {"name": "now"}}, timeout=60)
        assert status >= 400, said
        status, reply = server.api("GET", "api/vgpu/refusals", timeout=10)
        (refusal,) = [r for r in reply.get("refusals", reply) if r.get("path") == "now.ipynb"]
        summary, advice = refusal["message"].split("\n")
        assert summary.startswith("Slurm cannot start kernel 'Now (1/4 GPU, Slurm)' now: its job ") and summary.endswith(
            " would wait (Resources: no node has the GPU shards free now), and this kernel does not wait in Slurm's queue; the job is cancelled."
        ), summary
        assert refusal["advice"] == [
            "Wait in Slurm's queue: a kernel installed with `jupyter vgpu kernelspec install --slurm --wait SECONDS` (and this kernel's "
            "share and --slurm-arg options) waits for its job in Slurm's order, its place shown in the GPUs panel.",
            "See what holds the GPUs: `squeue -p gpu -t RUNNING`.",
            "Or shut down the kernels you no longer use: their jobs free their shards.",
        ]
        assert advice == "What you can do: " + " ".join(refusal["advice"])
        assert (refusal["reason"], refusal["asked"], refusal["status"]) == ("full", "1/4 GPU: 8 of 32 shards", 503)
        assert refusal["request"] is None and refusal["allowed_gpus"] == []  # the local idle reclaim has nothing to make room for
        assert "Traceback" not in server.log_text() and json.dumps(refusal).count("wait_timeout 0") == 0
        assert [line.split("|")[1] for line in squeue(slurm)] == ["filler", "filler"]  # its job cancelled
    finally:
        server.stop()
        slurm.run("scancel", "--name=filler", timeout=10)
