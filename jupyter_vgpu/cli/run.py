"""``jupyter vgpu run``: any command gets a slice for its lifetime (Bitfusion-style).

The command gets exactly the environment a kernel with that slice gets. Its exit code passes
through (a signal N becomes 128+N, as shells report it). The slice is freed when the command
exits; if ``run`` and the command are both killed, the next reservation or ``jupyter vgpu gc``
reclaims it, because the slice's holder is the command's process.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from types import FrameType
from typing import Any

from ..config import load_settings
from ..enforcement import Tier
from ..enforcement.mpspartition import ENV_JOIN
from ..errors import InvalidRequest, SliceNotFound
from ..slices import Holder, SliceRequest, open_ledger, summary
from ..slices.environment import DEVICE_NAMES, fit_installed_frameworks, with_slice
from ..slices.reports import remove_report
from ..slices.request import CLI_NAMES
from ..units import parse_seconds, shorten


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "run",
        help="run a command inside a GPU slice",
        description="Run COMMAND with a GPU slice reserved for as long as it runs.",
        usage="jupyter vgpu run [-n N] [-p FRACTION | -m MEMORY] [--gpu ID] [--wait SECONDS] -- COMMAND...",
    )
    parser.add_argument("-n", "--gpus", default="1", metavar="N", help="number of GPUs (default 1)")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("-p", "--fraction", metavar="FRACTION", help="share of each GPU: 0.25, 1/4 or 25%% (default 1)")
    amount.add_argument("-m", "--memory", metavar="MEMORY", help="memory per GPU, e.g. 6GiB or 512MiB")
    parser.add_argument("--gpu", metavar="ID", help="pin to one GPU by index or UUID")
    parser.add_argument("--wait", default="0", metavar="SECONDS", help="wait in line up to SECONDS for a slice (default 0)")
    parser.add_argument("--logical-devices", default="1", metavar="K", help="TensorFlow logical devices per GPU")
    parser.add_argument("--placement", default="binpack", choices=["binpack", "spread"], help="which GPU when several fit")
    parser.add_argument(
        "--device-names", default="uuid", choices=DEVICE_NAMES,
        help="how CUDA_VISIBLE_DEVICES names the GPUs: uuid (default) or index, for tools that need numbers",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print the slice to stderr")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command, after --")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InvalidRequest("No command given; write it after --, e.g. `jupyter vgpu run -p 0.25 -- python train.py`.")
    request = SliceRequest.parse(
        args.fraction,
        args.memory,
        gpus=args.gpus,
        gpu=args.gpu,
        logical_devices=args.logical_devices,
        placement=args.placement,
        names=CLI_NAMES,
    )
    wait = parse_seconds(args.wait, what="--wait")
    settings = load_settings()
    ledger = open_ledger(settings)
    slice_ = ledger.reserve(request, Holder.command(shlex.join(command)), wait=wait)
    try:
        env = with_slice(
            os.environ, slice_, ledger_path=str(ledger.path), simulate=settings.resolved_simulate,
            device_names=args.device_names,
        )  # fmt: skip
        fit_installed_frameworks(env)  # for the frameworks of this Python
        if env.get(ENV_JOIN):  # a memory partition: the command joins it before it is itself (cli/enter.py)
            command = [sys.executable, "-m", "jupyter_vgpu.cli.enter", *(["-q"] if args.quiet else []), "--", *command]
        if not args.quiet:
            simulated = " [SIMULATED GPUs, not real hardware]" if settings.resolved_simulate else ""
            tier = "" if slice_.tier is Tier.COOPERATIVE else f", {slice_.tier.describe(slice_.mig_profiles)}"
            print(f"jupyter vgpu: {summary(slice_)}{tier}{simulated}", file=sys.stderr)
        return _run_child(command, env, lambda pid: ledger.attach(slice_.id, pid))
    finally:
        try:
            ledger.release(slice_.id)
        except SliceNotFound:
            pass
        remove_report(ledger.path, slice_.id)  # its processes' reports, notices, HAMi-core budget file


#: As shells report a command they cannot start.
COMMAND_NOT_FOUND = 127
COMMAND_NOT_EXECUTABLE = 126


def cannot_start(program: str, error: OSError) -> int:
    """Say why ``program`` did not start, as shells do, and return their exit code for it."""
    if isinstance(error, FileNotFoundError):
        print(f"jupyter vgpu: command not found: {shorten(program)}.", file=sys.stderr)
        return COMMAND_NOT_FOUND
    if isinstance(error, PermissionError):
        print(f"jupyter vgpu: command {shorten(program)} is not executable.", file=sys.stderr)
    else:
        print(f"jupyter vgpu: command {shorten(program)} cannot be started: {error.strerror or error}.", file=sys.stderr)
    return COMMAND_NOT_EXECUTABLE


def _run_child(command: list[str], env: dict[str, str], on_start: Any) -> int:
    # Ctrl-C and Ctrl-\ reach the child from the terminal (same process group): the parent
    # ignores them and waits; SIGTERM and SIGHUP sent to `run` are passed on to the child.
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGQUIT)}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:  # not found, not executable, not a program (ENOEXEC)
            return cannot_start(command[0], error)

        def forward(signum: int, frame: FrameType | None) -> None:
            child.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, forward)
        on_start(child.pid)
        code = child.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code
