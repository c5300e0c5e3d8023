"""``python -m jupyter_vgpu.launch.slurm.node -- KERNEL COMMAND...``: a Slurm kernel's start on its node.

The ``slurm`` launcher (:mod:`.slurm`) runs this in the kernel's job step (``srun --jobid``). It
starts the kernel as its child and waits for it, so that the kernel's folder on the node is
removed when the kernel ends (on its own, or by Slurm's SIGTERM at a shutdown, a restart or the
job's cancel: the kernel is then ended first, with SIGKILL, so no kernel outlives its ledger; a
folder a SIGKILL left is swept at the next start on the node). Before that it gives the kernel
jupyter-vgpu's normal start inside the job:

* the connection file, where the node does not share the login node's folder
  (``JUPYTER_VGPU_CONNECTION``: its content, written where the command says, readable by the
  user only), with ports free on this node: the login node chose them on its own host, and a
  port taken here (another user's server, another kernel) is replaced by one free here, which
  ``job.json`` hands back to the login node;
* a ledger of this start's own on the node's disk (never the login node's, which srun's
  environment names: homes are shared over network file systems, where SQLite's locks are not
  safe), in a folder made exclusively in a private folder of the user's (:mod:`..jobfolder`);
  where none can be had the start is refused in one sentence, which ``job.json`` carries to the
  login node;
* a slice of the whole of the job's share (the environment Slurm gives the job,
  ``CUDA_VISIBLE_DEVICES`` and ``SLURM_SHARDS_ON_NODE``, is the budget), so the frameworks are
  fitted to it and a hard tier applies where the node has one (where that slice cannot be had,
  the kernel starts unfenced and says so: ``JUPYTER_VGPU_SLURM_UNFENCED`` for ``%vgpu``,
  ``unfenced`` in ``job.json`` for the views);
* its reports in the folder the login node reads (``JUPYTER_VGPU_REPORTS``), with ``job.json``
  saying where it runs.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...ownfiles import write_json
from .. import ENV_ELSEWHERE
from ..elsewhere import Whereabouts
from .names import (
    ENV_ASKED,
    ENV_CONNECTION,
    ENV_CONNECTION_FILE,
    ENV_ENDED,
    ENV_KERNEL,
    ENV_LAUNCH,
    ENV_UNFENCED,
    JOB_FILE,
    PORT_NAMES,
)


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
    from ...config import load_settings
    from ...errors import NoGPU, VGPUError
    from ...ledger import open_ledger
    from ...slices import Holder, SliceRequest, cpu_environment
    from ...slices.environment import with_slice
    from ...slices.records import ASKED_LABEL

    gpus = [g for g in (env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or "").split(",") if g.strip()]
    try:
        settings = load_settings()
        ledger = open_ledger(settings)
        labels = {"launcher": "slurm", **({ASKED_LABEL: env[ENV_ASKED]} if env.get(ENV_ASKED) else {})}  # its views say what it asked
        holder = Holder.kernel(env.get(ENV_KERNEL, "") or "kernel", pid=os.getpid(), labels=labels)
        slice_ = ledger.reserve(SliceRequest(fraction=1.0, gpus=max(1, len(gpus))), holder, wait=0)
    except NoGPU as error:
        env.update(cpu_environment(reason=f"{error} This kernel runs on the CPU."))
        return None, None, None
    except VGPUError as error:
        return str(error), None, None
    sliced = with_slice(env, slice_, ledger_path=str(ledger.path), simulate=ledger.inventory.simulate)  # of the job's shards
    env.clear()
    env.update(sliced)
    return None, slice_.id, (slice_.memory[0] if slice_.memory else None)


def write_job_file(
    env: dict[str, str],
    slice_id: str | None,
    *,
    folder: str | None,
    launch: str | None,
    ports: dict[str, int] | None,
    memory: int | None = None,
    refused: str | None = None,
) -> None:
    """Where this kernel runs and listens, for the login node (``job.json`` in its reports
    folder); ``memory``: the job's budget on each of its GPUs (bytes), which the login node cannot
    know; ``refused``: why the kernel is not started (one sentence, said by the kernel's start)."""
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
        "unfenced": env.get(ENV_UNFENCED),
        "refused": refused,
        "simulated": bool(env.get("JUPYTER_VGPU_SIMULATE")),  # the views say so on the login node
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
    from ...config import ENV_LEDGER
    from ...errors import InvalidConfig
    from ...gpus.slurmshare import in_job
    from ...jobfolder import LEDGER, kernel_folder, remove

    own: Path | None = None
    if in_job(env):
        try:
            own = kernel_folder(env)
        except InvalidConfig as error:
            write_job_file(env, None, folder=folder, launch=launch, ports=ports, refused=str(error))
            print(f"jupyter vgpu: {error}", file=sys.stderr)
            return 1
        env[ENV_LEDGER] = str(own / LEDGER)  # never the login node's, which srun passed on
    try:
        return _run_kernel(env, args, folder=folder, launch=launch, ports=ports)
    finally:
        if own is not None:
            remove(own)


def _run_kernel(env: dict[str, str], args: list[str], *, folder: str | None, launch: str | None, ports: dict[str, int] | None) -> int:
    """Give the kernel its share, start it as this process's child and wait for it; its status."""
    os.environ.clear()
    os.environ.update(env)  # the settings below read the job's ledger from here
    problem, slice_id, memory = take_share(env)
    if problem:
        env[ENV_UNFENCED] = f"{problem} The kernel runs with the job's GPUs, unfenced: its frameworks are not fitted to the share."
        print(f"jupyter vgpu: {env[ENV_UNFENCED]}", file=sys.stderr)
    write_job_file(env, slice_id, folder=folder, launch=launch, ports=ports, memory=memory)
    env[ENV_ELSEWHERE] = whereabouts(env).to_env()  # all the kernel learns of where it runs
    from ...enforcement.base import ENV_ENTER

    if env.get(ENV_ENTER):
        args = [sys.executable, "-m", "jupyter_vgpu.cli.enter", "--", *args]
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # the kernel
        try:
            os.execvpe(args[0], args, env)
        except OSError as error:
            print(f"jupyter vgpu: cannot start the kernel {args[0]}: {error.strerror}.", file=sys.stderr)
        os._exit(127)
    return _wait_for(child)


def whereabouts(env: Mapping[str, str]) -> Whereabouts:
    """``Slurm job 1234 on node1 · asked 1/4 GPU: 8 of 32 shards``, and why Slurm ended the job of
    the kernel it replaces or why it runs unfenced: what %vgpu and the first cell say."""
    job, node = env.get("SLURM_JOB_ID", "?"), env.get("SLURMD_NODENAME", "its node")
    asked = env.get(ENV_ASKED)
    where = f"Slurm job {job} on {node}" + (f" · asked {asked}" if asked else "")
    return Whereabouts("Slurm", where, ended=env.get(ENV_ENDED) or None, unfenced=env.get(ENV_UNFENCED) or None, share=asked or None)


def _wait_for(child: int) -> int:
    """Wait for the kernel; its exit status. Slurm signals every process of the step: an
    interrupt is the kernel's (ignored here); SIGTERM or SIGHUP (its step or job ends) ends the
    kernel with SIGKILL, so that its folder is removed only once nothing uses it."""

    def end_kernel(signum: int, frame: object) -> None:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, end_kernel)
    while True:
        try:
            _, status = os.waitpid(child, 0)
        except ChildProcessError:
            return 0
        except InterruptedError:  # pragma: no cover (PEP 475 retries)
            continue
        code = os.waitstatus_to_exitcode(status)
        return code if code >= 0 else 128 - code  # as a shell says a signal's end


if __name__ == "__main__":
    sys.exit(main())
