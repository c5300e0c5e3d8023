"""Elastic slices against fixed ones on bursty notebooks (issue 42), side by side in one run:
``python benchmarks/elastic.py [--seed N] [--kernels 12] [--notice 60] [--restart 5] [--json]``.

The scene: two simulated 16 GiB GPUs; notebook kernels arrive at random times (seeded) within
the first half hour, each sits at 1-2 GiB, bursts to 6 GiB for a few minutes now and then, and
is shut down when its script is done (about 45-90 minutes of pauses and bursts, unhindered).
The same notebooks run twice on a virtual clock: with **fixed** slices sized for the peak (6 GiB)
and with **elastic** slices (request 2 GiB, limit 6 GiB).

The product decides, on a fresh SQLite ledger per run (``open_ledger`` on a
``JUPYTER_VGPU_SIMULATE`` JSON file of the two GPUs, rewritten at every change of use, so that
its simulated NVML lists each kernel's process with what it holds, as a driver would):

* a kernel waits in the ledger's line (``enqueue``, then ``try_grant`` in line order after every
  change, as the provisioner's waiting loop does, with a ``wait_timeout`` long enough) until
  placement (``place`` on ``occupancy_of``: bursts count) lets it in; its slice is then attached
  to its simulated pid and kept by this process, as a server keeps its kernels';
* at the monitor's ticks (``--interval``, the server's ``monitor_interval``) the server's
  ``UsageMonitor.collect`` takes a sample (stamped with the virtual time) and its reclaim
  engine's ``Reclaim.check`` asks its sources, ``BurstSource`` first (the idle one is off, the
  default), with the line's wants: which bursts get a notice on its board, when one is
  withdrawn, when the action is due.
  The restart goes to a kernel manager here. A tick is skipped when no kernel is above its
  request while someone waits, no notice runs, no restart is under way and no burst began or
  ended since the last: the reclaim would decide nothing on it.

Modelled here: a burst takes only what no request and no other burst holds (its GPU's ``free``);
without it the kernel stays at its base (its framework hits the ceiling and its user runs the
cell again once there is room, after the line's requests had their turn), and gives that burst
up after ``--patience`` minutes. A restart takes ``--restart`` seconds from the action to the
memory back, then the kernel is at its base and its user runs the cut burst again. A fixed slice
bursts within its own 6 GiB. With the provisioner's default ``wait_timeout`` of 0, each request
kept out by a burst would be a refused start instead of a wait.

Checked after every event and tick (the guarantees, counted as broken when they fail): no GPU
booked beyond its memory (the ledger's slices, and its ``overcommitted``); no kernel within its
request given a notice or restarted; no request refused; and a request kept out by bursts alone
(placed if every burst were back within its request) waits at most the notice plus the restart
plus two ticks (the notice comes with the next tick, the action with the first after it runs out).

Printed per run: kernels started without waiting, total, mean and longest wait, requests refused
and kept out by a burst (their longest extra wait, against that bound), bursts (delayed for room,
given up, given a notice, given back in time, reclaimed, notice to memory back), kernels
restarted, time to done, checks and guarantees broken; then elastic / fixed for kernels started
at once (the issue's target: at least 2, with 0 guarantees broken). Exits 1 if any was broken.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jupyter_vgpu.config import VGPU
from jupyter_vgpu.errors import VGPUError
from jupyter_vgpu.ledger import SQLiteLedger, open_ledger
from jupyter_vgpu.server.monitor import UsageMonitor
from jupyter_vgpu.server.reclaim import BurstSource, IdleSource, Notice, Reclaim, trimmed
from jupyter_vgpu.server.watchdog import Watchdog
from jupyter_vgpu.slices import Holder, SliceRequest, Ticket
from jupyter_vgpu.slices.occupancy import GPUOccupancy, Share
from jupyter_vgpu.slices.placement import place
from jupyter_vgpu.units import GiB

GPUS, GPU_MEMORY, PEAK = 2, 16 * GiB, 6 * GiB
REQUESTS = {
    "fixed": SliceRequest.parse(memory="6GiB"),
    "elastic": SliceRequest.parse(memory="2GiB", limit_memory="6GiB"),
}
#: The simulated kernels' pids: above any pid_max (at most 2**22), so never a running process's.
PID_BASE = 2**30


@dataclass(frozen=True)
class Notebook:
    """One notebook's script, the same in both runs (seconds)."""

    name: str
    arrives: float
    base: int  # bytes it holds between bursts
    bursts: tuple[tuple[float, float], ...]  # (pause at its base before, length at the peak)
    tail: float  # pause after its last burst, then it is shut down


def scene(seed: int, kernels: int, stay: tuple[float, float], gap: float, burst: tuple[float, float]) -> list[Notebook]:
    """Arrivals uniform in the first half hour; scripts of exponential pauses and uniform bursts."""
    rng = random.Random(seed)
    notebooks = []
    for i, arrives in enumerate(sorted(rng.uniform(0, 1800) for _ in range(kernels))):
        base, length = int(rng.uniform(1, 2) * GiB), rng.uniform(*stay)
        plan: list[tuple[float, float]] = []
        covered = 0.0
        while covered + (pause := rng.expovariate(1 / gap)) < length:
            plan.append((pause, rng.uniform(*burst)))
            covered += sum(plan[-1])
        notebooks.append(Notebook(f"notebook-{i:02d}", arrives, base, tuple(plan), max(0.0, length - covered)))
    return notebooks


@dataclass
class Kernel:
    """A notebook's kernel in one run."""

    book: Notebook
    pid: int
    state: str = "new"  # waiting, base, delayed (its burst waits for room), burst, restarting, gone
    use: int = 0
    ticket: Ticket | None = None
    slice_id: str | None = None
    next_burst: int = 0
    cuts: int = 0  # restarts so far: the end of a burst one cut short does not come
    delays: int = 0  # bursts that waited for room: only the latest one's patience runs out
    delayed_since: float | None = None
    burst_since: float | None = None
    calmed_at: float | None = None  # when its memory was last back at its base
    kept_out_since: float | None = None  # since when only bursts keep it out (in line)
    restart_done: asyncio.Future[None] | None = None


@dataclass
class Figures:
    """What one run measured (seconds)."""

    kernels: int = 0
    started_at_once: int = 0
    waits: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)  # each kernel's arrival to shutdown
    refused: int = 0
    kept_out: list[float] = field(default_factory=list)  # each request kept out by bursts: its extra wait
    bursts: int = 0
    delayed: int = 0
    delay: float = 0.0
    given_up: int = 0
    noticed: int = 0
    given_back: int = 0  # bursts under notice that ended in time
    reclaimed: int = 0
    notice_to_back: list[float] = field(default_factory=list)
    cut: float = 0.0  # burst work restarts cut short (run again)
    checks: int = 0
    samples: int = 0
    over_booked: int = 0
    touched_within: int = 0  # notices and restarts of a kernel within its request
    over_bound: int = 0
    bound: float = 0.0
    ended_at: float = 0.0
    seconds: float = 0.0

    @property
    def broken(self) -> int:
        return self.over_booked + self.touched_within + self.over_bound + self.refused


class Kernels:
    """The kernel manager the reclaim acts through (what a server's has, as far as it asks)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.by_id: dict[str, Kernel] = {}

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self.by_id

    def get_kernel(self, kernel_id: str) -> Any:
        state = "restarting" if self.by_id[kernel_id].state == "restarting" else "idle"
        return type("Kernel", (), {"execution_state": state, "iopub_port": None})()

    async def restart_kernel(self, kernel_id: str) -> None:
        kernel = self.by_id[kernel_id]
        self.run.restarting(kernel)
        assert kernel.restart_done is not None
        await kernel.restart_done  # as jupyter_server's, done once the kernel is back


class Run:
    """One mode's run of the scene, on its own ledger and simulated GPUs."""

    def __init__(self, mode: str, notebooks: list[Notebook], folder: Path, args: argparse.Namespace) -> None:
        self.mode, self.request, self.args = mode, REQUESTS[mode], args
        self.now, self.order, self.stamp = 0.0, 0, 1_000_000_000
        self.events: list[tuple[float, int, str, int, int]] = []  # (time, order, what, kernel, token)
        self.kernels = [Kernel(book, PID_BASE + i) for i, book in enumerate(notebooks)]
        self.line: list[Kernel] = []  # first in line first
        self.figures = Figures(kernels=len(notebooks), bound=args.notice + args.restart + 2 * args.interval)
        self.spec = folder / "gpus.json"
        self.write_use({})
        ledger = open_ledger(VGPU(ledger_path=str(folder / "ledger.sqlite"), simulate=str(self.spec)))
        assert isinstance(ledger, SQLiteLedger)
        self.ledger = ledger
        quiet = logging.getLogger("benchmarks.elastic")
        quiet.disabled = True
        self.manager = Kernels(self)
        self.monitor = UsageMonitor(ledger, interval=args.interval, log=quiet)
        watchdog = Watchdog(self.manager, log=quiet)
        sources = (
            BurstSource(self.manager, watchdog, notice=args.notice, action="restart", log=quiet),
            IdleSource(self.manager, watchdog, after=0.0, log=quiet),
        )
        self.reclaim = Reclaim(sources, allowance=ledger.allowance_for, log=quiet)
        self.noticed: dict[str, float] = {}  # slice id -> when its notice was given
        self.acted: set[str] = set()  # restarted by the reclaim at this tick
        self.changed = False  # a kernel went above or back within its request since the last tick
        for kernel in self.kernels:
            self.schedule(kernel.book.arrives, "arrive", kernel)

    def schedule(self, at: float, what: str, kernel: Kernel, token: int = 0) -> None:
        self.order += 1
        heapq.heappush(self.events, (at, self.order, what, self.kernels.index(kernel), token))

    @property
    def notices(self) -> Mapping[str, Notice]:
        """The bursts under notice, as the reclaim's board has them."""
        return self.reclaim.board.of("burst")

    def tick_due(self) -> bool:
        if self.changed or self.notices or any(k.state == "restarting" for k in self.kernels):
            return True
        return bool(self.line) and any(k.use > self.reserved for k in self.kernels if k.slice_id)

    async def play(self) -> Figures:
        started = time.perf_counter()
        while any(k.state != "gone" for k in self.kernels):
            tick = (int(self.now // self.args.interval) + 1) * self.args.interval
            if self.tick_due() and tick < (self.events[0][0] if self.events else float("inf")):
                self.now = tick
                await self.tick()
            elif not self.events:
                raise RuntimeError(f"{self.mode}: nothing left to happen to {[k.state for k in self.kernels]}")
            else:
                self.now, _, what, index, token = heapq.heappop(self.events)
                kernel = self.kernels[index]
                # void: the end of a burst a restart cut short, the patience of a burst that found room
                if token == {"calm": kernel.cuts, "give_up": kernel.delays}.get(what, token):
                    getattr(self, what)(kernel)
            await self.settle()
        self.figures.ended_at, self.figures.seconds = self.now, time.perf_counter() - started
        self.monitor.executor.shutdown(wait=False)
        self.ledger.close()
        return self.figures

    # -- what kernels do -------------------------------------------------------------------
    def arrive(self, kernel: Kernel) -> None:
        holder = Holder.kernel(
            kernel.book.name, pid=os.getpid(), labels={"path": f"{kernel.book.name}.ipynb"}, keeper=os.getpid()
        )
        kernel.ticket, kernel.state = self.ledger.enqueue(self.request, holder), "waiting"
        self.line.append(kernel)

    def start(self, kernel: Kernel, slice_id: str) -> None:
        self.ledger.attach(slice_id, kernel.pid)  # the kernel process exists now (post_launch)
        kernel.slice_id, kernel.state = slice_id, "base"
        self.manager.by_id[kernel.book.name] = kernel
        waited = self.now - kernel.book.arrives
        self.figures.waits.append(waited)
        self.figures.started_at_once += int(waited == 0)
        if kernel.kept_out_since is not None:
            self.figures.kept_out.append(extra := self.now - kernel.kept_out_since)
            self.figures.over_bound += int(extra > self.figures.bound + 1e-6)
        self.set_use(kernel, kernel.book.base)
        self.next_step(kernel)

    def next_step(self, kernel: Kernel) -> None:
        """Its next burst after a pause, or its shutdown once its script is done."""
        if kernel.next_burst < len(kernel.book.bursts):
            self.schedule(self.now + kernel.book.bursts[kernel.next_burst][0], "burst", kernel)
        else:
            self.schedule(self.now + kernel.book.tail, "leave", kernel)

    def burst(self, kernel: Kernel) -> None:
        kernel.state, kernel.delayed_since = "delayed", self.now
        if not self.try_burst(kernel):
            kernel.delays += 1
            self.schedule(self.now + self.args.patience * 60, "give_up", kernel, kernel.delays)

    def try_burst(self, kernel: Kernel) -> bool:
        """Its burst begins if what no request and no other burst holds on its GPU lets it."""
        assert kernel.slice_id is not None and kernel.delayed_since is not None
        growth = max(0, PEAK - self.reserved) - max(0, kernel.use - self.reserved)
        if growth > 0:
            uuid = self.ledger.get(kernel.slice_id).gpus[0]
            if growth > next(g.free for g in self.ledger.occupancy().gpus if g.uuid == uuid):
                return False
        if self.now > kernel.delayed_since:
            self.figures.delayed += 1
            self.figures.delay += self.now - kernel.delayed_since
        kernel.state, kernel.delayed_since, kernel.burst_since = "burst", None, self.now
        self.figures.bursts += 1
        self.set_use(kernel, PEAK)
        self.schedule(self.now + kernel.book.bursts[kernel.next_burst][1], "calm", kernel, kernel.cuts)
        return True

    def give_up(self, kernel: Kernel) -> None:
        """No room within its user's patience: that burst is not run."""
        if kernel.state != "delayed":
            return  # it has found room since
        assert kernel.delayed_since is not None
        self.figures.delayed += 1
        self.figures.given_up += 1
        self.figures.delay += self.now - kernel.delayed_since
        kernel.state, kernel.delayed_since = "base", None
        kernel.next_burst += 1
        self.next_step(kernel)

    def calm(self, kernel: Kernel) -> None:
        kernel.state, kernel.calmed_at, kernel.burst_since = "base", self.now, None
        kernel.next_burst += 1
        self.set_use(kernel, kernel.book.base)
        self.next_step(kernel)

    def restarting(self, kernel: Kernel) -> None:
        """The reclaim's action (from the kernel manager): the memory is back ``--restart`` s later."""
        assert kernel.slice_id is not None
        if kernel.state != "burst" or kernel.use <= self.reserved:
            self.figures.touched_within += 1
        self.figures.cut += self.now - (kernel.burst_since or self.now)
        self.acted.add(kernel.slice_id)
        kernel.state, kernel.burst_since, kernel.cuts = "restarting", None, kernel.cuts + 1
        kernel.restart_done = asyncio.get_running_loop().create_future()
        self.schedule(self.now + self.args.restart, "back", kernel)

    def back(self, kernel: Kernel) -> None:
        """The restart is over: memory back, the kernel at its base; its user runs the cut burst again."""
        assert kernel.slice_id is not None and kernel.restart_done is not None
        kernel.state, kernel.calmed_at = "base", self.now
        self.figures.reclaimed += 1
        self.figures.notice_to_back.append(self.now - self.noticed.pop(kernel.slice_id))
        self.set_use(kernel, kernel.book.base)
        kernel.restart_done.set_result(None)
        self.schedule(self.now, "burst", kernel)

    def leave(self, kernel: Kernel) -> None:
        assert kernel.slice_id is not None and kernel.state == "base"
        self.ledger.release(kernel.slice_id)
        del self.manager.by_id[kernel.book.name]
        kernel.state = "gone"
        self.figures.done.append(self.now - kernel.book.arrives)
        self.set_use(kernel, 0)

    # -- after every event and tick ----------------------------------------------------------
    async def settle(self) -> None:
        """The line's requests get their turn, then bursts waiting for room; then the checks."""
        await asyncio.sleep(0)  # a restart whose memory is back ends (the reclaim awaited it)
        for kernel in list(self.line):
            assert kernel.ticket is not None
            try:
                granted = self.ledger.try_grant(kernel.ticket, final=False)
            except VGPUError:
                self.figures.refused += 1
                self.line.remove(kernel)
                kernel.state = "gone"
                continue
            if granted is not None:
                self.line.remove(kernel)
                self.start(kernel, granted.id)
        for kernel in sorted((k for k in self.kernels if k.state == "delayed"), key=lambda k: k.delayed_since or 0.0):
            self.try_burst(kernel)
        self.mark_kept_out()
        self.check()

    def mark_kept_out(self) -> None:
        """Requests in line (first first) that would be placed with every burst back within its request."""
        gpus = self.ledger.occupancy().gpus
        room = trimmed(gpus, [s.slice.id for g in gpus for s in g.shares if g.burst_of(s) > 0])
        for kernel in self.line:
            placed = place(self.request, room, allowance=self.ledger.allowance_for)
            if not placed:
                break
            if kernel.kept_out_since is None:
                kernel.kept_out_since = self.now
            ((gpu, amount),) = placed.chosen
            room = _booked(room, gpu.uuid, amount, kernel.book.name)

    def check(self) -> None:
        self.figures.checks += 1
        usable = {g.uuid: g.memory_usable for g in self.ledger.inventory.snapshot().gpus}
        booked: dict[str, int] = {}
        for s in self.ledger.slices():
            for uuid, memory in zip(s.gpus, s.memory):
                booked[uuid] = booked.get(uuid, 0) + memory
        if any(amount > usable[uuid] for uuid, amount in booked.items()) or self.ledger.overcommitted():
            self.figures.over_booked += 1

    async def tick(self) -> None:
        """One monitor tick and the server's reclaim on it."""
        self.figures.samples += 1
        pids = {k.book.name: k.pid for k in self.kernels if k.slice_id and k.state != "gone"}
        sample = replace(self.monitor.collect(pids), taken_at=self.now)
        if sample.message is not None:
            raise RuntimeError(f"{self.mode}: the monitor's sample failed: {sample.message}")
        before = dict(self.notices)
        await self.reclaim.check(sample)
        await asyncio.sleep(0)  # the reclaim's action begins (Kernels.restart_kernel)
        by_slice = {k.slice_id: k for k in self.kernels if k.slice_id}
        for sid, notice in self.notices.items():
            if sid not in before:
                self.figures.noticed += 1
                self.noticed[sid] = notice.given
                self.figures.touched_within += int(by_slice[sid].use <= self.reserved)
        for sid in before:
            if sid not in self.notices and sid not in self.acted:  # withdrawn
                given, kernel = self.noticed.pop(sid), by_slice[sid]
                if kernel.state != "gone" and kernel.calmed_at is not None and kernel.calmed_at >= given:
                    self.figures.given_back += 1
                    self.figures.notice_to_back.append(kernel.calmed_at - given)
        self.acted.clear()
        self.changed = False

    # -- the simulated GPUs ----------------------------------------------------------------
    @property
    def reserved(self) -> int:
        return self.request.amount_on(GPU_MEMORY)

    def set_use(self, kernel: Kernel, used: int) -> None:
        self.changed = self.changed or (used > self.reserved) != (kernel.use > self.reserved)
        kernel.use = used
        self.write_use({s.id: s.gpus[0] for s in self.ledger.slices()})

    def write_use(self, gpu_of: dict[str, str]) -> None:
        """The GPUs and each kernel's process with what it holds (``JUPYTER_VGPU_SIMULATE``'s JSON)."""
        devices = [{"name": "Simulated GPU 16GiB", "memory": GPU_MEMORY}] * GPUS
        processes = [
            {"gpu": gpu_of[k.slice_id], "pid": k.pid, "memory": k.use}
            for k in self.kernels
            if k.slice_id in gpu_of and k.use
        ]
        self.spec.write_text(json.dumps({"devices": devices, "processes": processes}))
        self.stamp += 1  # the simulated NVML reads the file again when its stamp moves
        os.utime(self.spec, (self.stamp, self.stamp))


def _booked(room: tuple[GPUOccupancy, ...], uuid: str, amount: int, name: str) -> tuple[GPUOccupancy, ...]:
    """``room`` with ``amount`` more booked on GPU ``uuid`` (a request ahead in line, placed in thought)."""
    model = next(s.slice for g in room for s in g.shares)  # (a request is kept out by bursts: some slice bursts)
    share = Share(replace(model, id=f"ahead-{name}"), amount, 0)
    return tuple(replace(g, shares=(*g.shares, share)) if g.uuid == uuid else g for g in room)


def table(runs: dict[str, Figures], notice: float) -> str:
    fixed, elastic = runs["fixed"], runs["elastic"]

    def minutes(seconds: float) -> str:
        return f"{seconds / 60:.1f} min"

    def longest(values: list[float]) -> str:
        return f"{max(values):.0f} s" if values else "-"

    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("kernels started without waiting", lambda f: f"{f.started_at_once} of {f.kernels}"),
        ("total wait", lambda f: minutes(sum(f.waits))),
        ("mean wait", lambda f: minutes(sum(f.waits) / max(1, len(f.waits)))),
        ("longest wait", lambda f: minutes(max(f.waits, default=0.0))),
        ("requests refused", lambda f: str(f.refused)),
        ("requests kept out by a burst", lambda f: str(len(f.kept_out))),
        (f"  their longest extra wait (bound {fixed.bound:.0f} s)", lambda f: longest(f.kept_out)),
        ("bursts to 6 GiB begun (a cut one again)", lambda f: str(f.bursts)),
        ("  delayed for room (total delay)", lambda f: f"{f.delayed} ({minutes(f.delay)})"),
        ("  given up, no room in time", lambda f: str(f.given_up)),
        ("  given a notice", lambda f: str(f.noticed)),
        ("  given back in time", lambda f: str(f.given_back)),
        (f"  reclaimed (restarted after {notice:.0f} s)", lambda f: str(f.reclaimed)),
        ("  notice to memory back (longest)", lambda f: longest(f.notice_to_back)),
        ("  burst work cut by restarts, run again", lambda f: minutes(f.cut)),
        ("kernels restarted", lambda f: str(f.reclaimed)),
        ("mean time from arrival to done", lambda f: minutes(sum(f.done) / max(1, len(f.done)))),
        ("last kernel done after", lambda f: minutes(f.ended_at)),
        ("checks (monitor ticks)", lambda f: f"{f.checks} ({f.samples})"),
        ("guarantees broken", lambda f: str(f.broken)),
        ("  a GPU booked beyond its memory", lambda f: str(f.over_booked)),
        ("  a kernel within its request touched", lambda f: str(f.touched_within)),
        (f"  kept out by bursts over {fixed.bound:.0f} s", lambda f: str(f.over_bound)),
        ("run time", lambda f: f"{f.seconds:.1f} s"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{'':<{width}}{'fixed 6 GiB':>14}{'elastic 2 -> 6 GiB':>21}"]
    lines += [f"{label:<{width}}{value(fixed):>14}{value(elastic):>21}" for label, value in rows]
    ratio = elastic.started_at_once / fixed.started_at_once if fixed.started_at_once else float("inf")
    met = "met" if ratio >= 2 and fixed.broken + elastic.broken == 0 else "NOT met"
    lines.append(
        f"kernels started at once, elastic / fixed: {ratio:.2f} (target: at least 2, 0 guarantees broken: {met})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the scene's seed (default 0)")
    parser.add_argument("--kernels", type=int, default=12, help="notebook kernels (default 12)")
    parser.add_argument("--notice", type=float, default=60.0, help="burst_reclaim_notice, seconds (default 60)")
    parser.add_argument(
        "--restart", type=float, default=5.0, help="seconds from the restart to the memory back (default 5)"
    )
    parser.add_argument("--interval", type=float, default=2.0, help="monitor_interval, seconds (default 2)")
    parser.add_argument(
        "--stay",
        type=float,
        nargs=2,
        default=(45.0, 90.0),
        metavar=("MIN", "MAX"),
        help="minutes of a script (default 45 90)",
    )
    parser.add_argument(
        "--gap", type=float, default=20.0, help="mean minutes at its base between two bursts (default 20)"
    )
    parser.add_argument(
        "--burst",
        type=float,
        nargs=2,
        default=(2.0, 6.0),
        metavar=("MIN", "MAX"),
        help="minutes of a burst (default 2 6)",
    )
    parser.add_argument(
        "--patience", type=float, default=30.0, help="minutes a burst waits for room before it is given up (default 30)"
    )
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object instead of the table")
    args = parser.parse_args(argv)
    for key in (
        "JUPYTER_VGPU_BROKER",
        "JUPYTER_VGPU_SIMULATE",
        "JUPYTER_VGPU_LEDGER",
        "JUPYTER_VGPU_CONTEXT_ALLOWANCE",
    ):
        os.environ.pop(key, None)
    notebooks = scene(
        args.seed,
        args.kernels,
        (args.stay[0] * 60, args.stay[1] * 60),
        args.gap * 60,
        (args.burst[0] * 60, args.burst[1] * 60),
    )
    folder = Path(tempfile.mkdtemp(prefix="vgpu-bench-elastic-"))
    try:
        runs = {}
        for mode in REQUESTS:
            (folder / mode).mkdir()
            runs[mode] = asyncio.run(Run(mode, notebooks, folder / mode, args).play())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps({mode: {**vars(f), "broken": f.broken} for mode, f in runs.items()}))
    else:
        print(
            f"{args.kernels} notebooks on {GPUS} simulated 16 GiB GPUs, seed {args.seed}: 1-2 GiB, bursts to 6 GiB "
            f"(notice {args.notice:g} s, restart {args.restart:g} s, a tick every {args.interval:g} s)"
        )
        print(table(runs, args.notice))
    return 0 if all(f.broken == 0 for f in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
