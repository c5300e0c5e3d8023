"""``python -m jupyter_vgpu.launch.node -- KERNEL COMMAND...``: a Slurm kernel's start on its node.

The ``slurm`` launcher (:mod:`.slurm`) runs this in the kernel's job step (``srun --jobid``); it
becomes the kernel (``exec``, keeping the pid), so nothing of ours but the kernel runs on the
node. Before that it gives the kernel jupyter-vgpu's normal start inside the job:

* the connection file, where the node does not share the login node's folder
  (``JUPYTER_VGPU_CONNECTION``: its content, written where the command says, readable by the
  user only), with ports free on this node: the login node chose them on its own host, and a
  port taken here (another user's server, another kernel) is replaced by one free here, which
  ``job.json`` hands back to the login node;
* the job's own ledger on the node's disk (never the login node's, which srun's environment
  names: homes are shared over network file systems, where SQLite's locks are not safe);
* a slice of the whole of the job's share (the environment Slurm gives the job,
  ``CUDA_VISIBLE_DEVICES`` and ``SLURM_SHARDS_ON_NODE``, is the budget), so the frameworks are
  fitted to it and a hard tier applies where the node has one;
* its reports in the folder the login node reads (``JUPYTER_VGPU_REPORTS``), with ``job.json``
  saying where it runs.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from ..ownfiles import write_json

ENV_CONNECTION = "JUPYTER_VGPU_CONNECTION"
ENV_CONNECTION_FILE = "JUPYTER_VGPU_CONNECTION_FILE"
ENV_KERNEL = "JUPYTER_VGPU_KERNEL_ID"
#: What the kernel asked Slurm for, in words ("1/4 GPU: 8 of 32 shards"), for %vgpu.
ENV_ASKED = "JUPYTER_VGPU_SLURM_ASKED"
#: Why Slurm ended the job of the kernel this one replaces, in one sentence (%vgpu and the first
#: cell say it).
ENV_ENDED = "JUPYTER_VGPU_SLURM_ENDED"
#: A token per launch: ``job.json`` carries it back, so the login node knows the file is this
#: launch's (a restart's step writes the same file).
ENV_LAUNCH = "JUPYTER_VGPU_SLURM_LAUNCH"
JOB_FILE = "job.json"
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")


def _can_listen(ip: str, port: int) -> bool | None:
    """Whether a kernel could listen on ``ip:port`` here (as ZeroMQ binds: address reuse on);
    None where ``ip`` is not this host's to check."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
        except OSError as error:
            return None if error.errno == errno.EADDRNOTAVAIL else False
        return True


def _free_port(ip: str, taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as probe:
            probe.bind((ip, 0))
            port = int(probe.getsockname()[1])
        if port not in taken:
            return port


def ports_free_here(info: dict[str, Any]) -> dict[str, int]:
    """The connection's ports, each one that something on this node already listens on replaced
    by one free here (``info`` is changed in place)."""
    ip = str(info.get("ip") or "127.0.0.1")
    taken = {int(info[name]) for name in PORT_NAMES if isinstance(info.get(name), int)}
    for name in PORT_NAMES:
        port = info.get(name)
        if isinstance(port, int) and port > 0 and _can_listen(ip, port) is False:
            info[name] = _free_port(ip, taken)
            taken.add(info[name])
    return {name: int(info[name]) for name in PORT_NAMES if isinstance(info.get(name), int)}


def write_connection_file(env: dict[str, str]) -> dict[str, int] | None:
    """Write the kernel's connection file on this node, its ports free here; the ports (None
    without a connection from the login node)."""
    path, content = env.pop(ENV_CONNECTION_FILE, ""), env.pop(ENV_CONNECTION, "")
    if not path or not content:
        return None
    try:
        info = json.loads(content)
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    ports = ports_free_here(info)
    try:
        if json.loads(Path(path).read_text()) == info:
            return ports  # the login node's folder is shared, and its ports are free here
    except (OSError, ValueError):
        pass  # not there, or not readable as JSON: written below
    write_json(Path(path), info, prefix="kernel-connection")  # the kernel never reads half a file
    return ports


def take_share(env: dict[str, str]) -> tuple[str | None, str | None, int | None]:
    """Reserve the job's whole share for this kernel in the job's ledger and put the slice's
    environment in ``env``: (why it could not, in one sentence, where the kernel then starts on
    what Slurm gave it, unfenced; the slice's id; its memory on each GPU)."""
    from ..config import load_settings
    from ..errors import NoGPU, VGPUError
    from ..ledger import open_ledger
    from ..slices import Holder, SliceRequest, cpu_environment, slice_environment
    from ..slices.environment import without_slice

    gpus = [g for g in (env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or "").split(",") if g.strip()]
    try:
        settings = load_settings()
        ledger = open_ledger(settings)
        holder = Holder.kernel(env.get(ENV_KERNEL, "") or "kernel", pid=os.getpid(), labels={"launcher": "slurm"})
        slice_ = ledger.reserve(SliceRequest(fraction=1.0, gpus=max(1, len(gpus))), holder, wait=0)
    except NoGPU as error:
        env.update(cpu_environment(reason=f"{error} This kernel runs on the CPU."))
        return None, None, None
    except VGPUError as error:
        return str(error), None, None
    kept = without_slice(env)
    env.clear()
    env.update(kept)
    env.update(slice_environment(slice_, ledger_path=str(ledger.path), simulate=settings.resolved_simulate))
    return None, slice_.id, (slice_.memory[0] if slice_.memory else None)


def write_job_file(
    env: dict[str, str], slice_id: str | None, *, folder: str | None, launch: str | None, ports: dict[str, int] | None, memory: int | None = None
) -> None:
    """Where this kernel runs and listens, for the login node (``job.json`` in its reports
    folder); ``memory``: the job's budget on each of its GPUs (bytes), which the login node cannot
    know."""
    if not folder:
        return
    facts = {
        "launch": launch,
        "ports": ports,
        "job_id": env.get("SLURM_JOB_ID"),
        "node": env.get("SLURMD_NODENAME"),
        "gpus": env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or "",
        "shards": env.get("SLURM_SHARDS_ON_NODE"),
        "slice_id": slice_id,
        "memory": memory,
        "pid": os.getpid(),
        "updated": time.time(),
    }
    write_json(Path(folder) / JOB_FILE, facts, prefix="job")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("jupyter vgpu: no kernel command to start.", file=sys.stderr)
        return 2
    env = dict(os.environ)
    ports = write_connection_file(env)
    folder, launch = env.get("JUPYTER_VGPU_REPORTS"), env.pop(ENV_LAUNCH, None)
    from ..config import ENV_LEDGER, job_ledger_path

    ledger = job_ledger_path(env)
    if ledger is not None:
        env[ENV_LEDGER] = str(ledger)  # never the login node's, which srun passed on
    os.environ.clear()
    os.environ.update(env)  # the settings below read the job's ledger from here
    problem, slice_id, memory = take_share(env)
    if problem:
        print(f"jupyter vgpu: {problem} The kernel starts with the job's GPUs, unfenced.", file=sys.stderr)
    write_job_file(env, slice_id, folder=folder, launch=launch, ports=ports, memory=memory)
    from ..enforcement.base import ENV_ENTER

    if env.get(ENV_ENTER):
        args = [sys.executable, "-m", "jupyter_vgpu.cli.enter", "--", *args]
    try:
        os.execvpe(args[0], args, env)
    except OSError as error:
        print(f"jupyter vgpu: cannot start the kernel {args[0]}: {error.strerror}.", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
