"""``jupyter vgpu run``: any command gets a slice for its lifetime (Bitfusion-style).

The command gets exactly the environment a kernel with that slice gets. Its exit code passes
through (a signal N becomes 128+N, as shells report it).

The slice is kept while the command or any process it started runs: ``run`` is their child
subreaper (``PR_SET_CHILD_SUBREAPER``), so a process left in the background (``sleep 100 &``) or a
daemon that forked twice and left the session is its child once its parent ends, and ``run`` waits
for them all, saying once which still hold the slice. They have the slice's environment and limits
(under MPS partitioning, its cgroup): freeing the slice under them would let the next request get
their memory. Ctrl+C, SIGTERM and SIGHUP end them all. A process another service starts (outside
``run``'s tree) is not waited for. The slice's keeper is ``run`` itself, so if the command is
killed the slice stays while ``run`` waits; if both are killed, the next reservation or ``jupyter
vgpu gc`` reclaims it. If an admin resets the ledger meanwhile, ``run`` books the slice again
(:mod:`jupyter_vgpu.ledger.keep`) and says so, or says why it could not.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import psutil

from ..config import load_settings
from ..enforcement import Tier, by_tier, setting_problems
from ..enforcement.base import ENV_ENTER
from ..errors import InvalidRequest, SliceNotFound, VGPUError
from ..ledger import Ledger, open_ledger
from ..ledger.contract import BURST_WAIT_SECONDS
from ..ledger.keep import KeepBooked
from ..slices import Holder, SliceRequest, Ticket, summary
from ..slices.environment import DEVICE_NAMES, fit_installed_frameworks, with_slice
from ..slices.reports import remove_report, write_report
from ..slices.request import CLI_NAMES
from ..units import parse_seconds, shorten


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "run",
        help="run a command inside a GPU slice",
        description=(
            "Run COMMAND with a GPU slice reserved for as long as it runs, and as long as any process it "
            "started runs (in the background, or as a daemon): they hold the slice's memory. Ctrl+C, "
            "SIGTERM and SIGHUP end them all. Processes another service starts for it are not waited for."
        ),
        usage="jupyter vgpu run [-n N] [-p FRACTION | -m MEMORY] [--limit LIMIT] [--gpu ID] [--wait SECONDS] -- COMMAND...",
    )
    parser.add_argument("-n", "--gpus", default="1", metavar="N", help="number of GPUs (default 1)")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("-p", "--fraction", metavar="FRACTION", help="share of each GPU: 0.25, 1/4 or 25%% (default 1)")
    amount.add_argument("-m", "--memory", metavar="MEMORY", help="memory per GPU, e.g. 6GiB or 512MiB")
    parser.add_argument(
        "--limit", metavar="LIMIT", help="elastic slice: what the command may burst to, of the request's kind (1/2, 8GiB); only the request is booked"
    )
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
        limit=args.limit,
    )
    wait = parse_seconds(args.wait, what="--wait")
    settings = load_settings()
    ledger = open_ledger(settings)
    request = ledger.named(request)  # what run says of it names a pinned GPU as every view does
    for refused in [] if args.quiet else setting_problems():
        print(f"jupyter vgpu: {refused}", file=sys.stderr)  # slices placed here do not get that tier
    # run keeps the slice while it waits for the command's processes (_run_child)
    line = None if args.quiet else _PlaceInLine(ledger, request, wait)
    slice_ = ledger.reserve(request, Holder("command", shlex.join(command), keeper=os.getpid()), wait=wait, waiting=line)
    try:
        env = with_slice(
            os.environ, slice_, ledger_path=str(ledger.path), simulate=ledger.inventory.simulate,  # a broker's, if it keeps the book
            device_names=args.device_names,
        )  # fmt: skip
        fit_installed_frameworks(env)  # for the frameworks of this Python
        if env.get(ENV_ENTER):  # the slice's tier has a hold: the command enters it before it is itself (cli/enter.py)
            command = [sys.executable, "-m", "jupyter_vgpu.cli.enter", *(["-q"] if args.quiet else []), "--", *command]
        plugin = by_tier(slice_.tier)
        if problem := plugin.not_given(env):  # the views say it too, from the slice's report
            write_report(ledger.path, slice_.id, {"tier_problem": problem})
        if not args.quiet:
            simulated = " [SIMULATED GPUs, not real hardware]" if ledger.inventory.simulated else ""
            described = plugin.not_held_text(problem, slice_.mig_profiles) if problem else slice_.tier.describe(slice_.mig_profiles)
            tier = "" if slice_.tier is Tier.COOPERATIVE else f", {described}"
            print(f"jupyter vgpu: {summary(slice_)}{tier}{simulated}", file=sys.stderr)
        keeping = KeepBooked(ledger, slice_, lambda text: print(f"jupyter vgpu: {text}", file=sys.stderr)).start()

        def hold(pid: int) -> Any:
            keeping.pid = pid  # booked again after a reset, the slice is this process's
            return ledger.attach(slice_.id, pid)

        try:
            return _run_child(command, env, hold, quiet=args.quiet)
        finally:
            keeping.stop()
    finally:
        try:
            ledger.release(slice_.id)
        except SliceNotFound:
            pass
        remove_report(ledger.path, slice_.id, slice_.tier.value)  # its processes' reports, notices, what its tier kept


class _PlaceInLine:
    """What ``run --wait`` says on stderr while it waits, so a blank terminal is not taken for a
    hang: one line as it joins the line, one each time its place changes, nothing per attempt.
    The place is read from the ledger at most once a second."""

    def __init__(self, ledger: Ledger, request: SliceRequest, wait: float) -> None:
        self.ledger = ledger
        self.request = request
        self.wait = wait
        self.place: int | None = None
        self.read_at = -1.0

    def __call__(self, ticket: Ticket) -> None:
        now = time.monotonic()
        if self.place is not None and now - self.read_at < 1.0:
            return
        self.read_at = now
        try:
            place = next((w.position for w in self.ledger.waiting() if w.ticket == ticket.number), None)
        except VGPUError:
            return  # said by the attempt that fails, if it does
        if place is None or place == self.place:
            return
        if self.place is None and self.wait <= 0:  # only bursts keep it out (ledger.contract)
            print(
                f"jupyter vgpu: no room now: kernels bursting above their requests hold it; waiting in line (#{place}) up "
                f"to {BURST_WAIT_SECONDS:g} s for them to give it back for {self.request.describe()}; Ctrl+C gives up.",
                file=sys.stderr,
                flush=True,
            )
        elif self.place is None:
            print(
                f"jupyter vgpu: no room now: waiting in line (#{place}) up to {self.wait:g} s for "
                f"{self.request.describe()}; Ctrl+C gives up.",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(f"jupyter vgpu: now #{place} in line for {self.request.describe()}.", file=sys.stderr, flush=True)
        self.place = place


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


def _run_child(command: list[str], env: dict[str, str], on_start: Callable[[int], Any], *, quiet: bool = False) -> int:
    """Run ``command`` and wait for it and every process it started; return its exit code.

    Ctrl-C and Ctrl-\\ reach the command from the terminal (same process group): ``run`` does not
    pass them on then, only where no terminal sent them (``kill -INT``). SIGTERM and SIGHUP sent
    to ``run`` are passed on to every process of the command. Once the command has ended, a
    Ctrl+C (or SIGTERM, SIGHUP) ends the processes it left: a second one kills them."""
    subreaper = _become_subreaper()
    state = {"interrupted": False, "ending": 0}
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        state["interrupted"] = True
        if child is None or child.returncode is not None:
            _end_all(state)  # the command has ended: what it left goes
        elif signum != signal.SIGINT or not _from_terminal():  # a terminal's Ctrl+C reached them all already
            _signal_all(child.pid, signum)

    # handlers, not SIG_IGN, which the command would inherit (a Python command would then ignore Ctrl+C)
    old = {signal.SIGQUIT: signal.signal(signal.SIGQUIT, _ignore), signal.SIGINT: signal.signal(signal.SIGINT, forward)}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:  # not found, not executable, not a program (ENOEXEC)
            return cannot_start(command[0], error)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, forward)
        on_start(child.pid)
        code = child.wait()
        code = code if code >= 0 else 128 - code
        if subreaper:
            _wait_for_the_rest(code, state, on_start, quiet=quiet)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return code


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Ctrl-\\ is the command's to answer (the terminal sent it to the command too)."""


#: prctl(2): the calling process adopts the orphans among its descendants.
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    """Make this process the child subreaper of what it starts (Linux); False where it cannot."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _from_terminal() -> bool:
    """Whether this process is in the foreground of its terminal, where a Ctrl+C reaches every
    process of the group (the command too), not only this one."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue  # not a terminal
    return False


def _started() -> list[psutil.Process]:
    """The running processes the command started: this process's descendants (the subreaper
    adopts the orphans, so a daemon that left its session is among them)."""
    try:
        found = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    alive = []
    for process in found:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.Error:
            pass  # it ended between the listing and the question
    return alive


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass  # ended already, or not ours to signal (a set-uid program)


def _signal_all(command: int, signum: int) -> None:
    """Send ``signum`` to the command and every process it started."""
    for pid in [command, *(p.pid for p in _started() if p.pid != command)]:
        _signal(pid, signum)


def _end_all(state: dict[str, Any]) -> None:
    """End the processes the command left: SIGTERM, then SIGKILL on a second asking."""
    state["ending"] += 1
    for process in _started():
        _signal(process.pid, signal.SIGTERM if state["ending"] == 1 else signal.SIGKILL)


def _reap() -> bool:
    """Reap ended children without waiting; False once there are none left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _wait_for_the_rest(code: int, state: dict[str, Any], hold: Callable[[int], Any], *, quiet: bool) -> None:
    """After the command ended with ``code``: keep the slice (wait) while any process it started
    runs, reaping each as it ends; said once on stderr."""
    if not _reap():
        return
    left = _started()
    if not left:
        return
    try:
        hold(os.getpid())  # the slice's processes are this one's tree now: their use is the slice's
    except VGPUError:
        pass  # the keeper (this process) holds it all the same
    if state["interrupted"]:
        _end_all(state)  # Ctrl+C or SIGTERM ended the command: the rest goes with it
    elif not quiet:
        one = len(left) == 1
        print(
            f"jupyter vgpu: the command exited ({code}); {_processes(left)}, so its slice stays reserved "
            f"until {'it ends (Ctrl+C ends it)' if one else 'they end (Ctrl+C ends them)'}.",
            file=sys.stderr,
        )
    while True:
        try:
            os.waitpid(-1, 0)  # resumed after a signal's handler (PEP 475)
        except ChildProcessError:
            return


def _processes(found: list[psutil.Process], most: int = 5) -> str:
    """``2 processes it started are still running (pid 123 sleep, pid 456 python)``: by pid, and
    by program where they are this user's."""
    uid = os.getuid()
    names = []
    for process in found[:most]:
        try:
            mine = process.uids().real == uid
            names.append(f"pid {process.pid} {process.name()}" if mine else f"pid {process.pid}")
        except psutil.Error:
            names.append(f"pid {process.pid}")
    more = f" and {len(found) - most} more" if len(found) > most else ""
    count = "1 process it started is" if len(found) == 1 else f"{len(found)} processes it started are"
    return f"{count} still running ({', '.join(names)}{more})"
