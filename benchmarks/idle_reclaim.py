"""The idle reclaim on a crowded node, this checkout against an earlier commit, side by side in one
run: ``python benchmarks/idle_reclaim.py [--against REV] [--ticks N]``.

The scene (issue 30): five simulated 16 GiB GPUs; 16 idle kernels of 1/4 GPU fill GPUs 0-3; a
command holds all of GPU 4; eight users each wait in line for one request. Four of the requests
can be let in by reclaiming idle kernels (1/4 GPU anywhere, 1/2 of GPU 0, 1/4 of GPU 2, 2 x 1/4
GPU); four cannot, whatever is reclaimed (they are pinned, or kept by their policy, to GPU 4).

Each version runs the real idle reclaim (the reclaim engine with its ``IdleSource``; an earlier
commit's ``IdleReclaimer``) in a fresh process on a fresh ledger, with no
notice: after every tick the requests in line are asked to be granted, as their waiting loops
do, until nothing changes. Printed per version: kernels shut down, requests let in, and the
reclaimer's time per tick (the ``check`` call on one sample: median and 95th percentile).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCENE = r"""
import asyncio, inspect, json, logging, os, statistics, sys, time
from dataclasses import replace
from pathlib import Path
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.slices import Holder, SliceRequest, Ticket
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.slices.usage import SliceUsage
from jupyter_vgpu.server.monitor import Sample
try:
    from jupyter_vgpu.server.reclaim import IdleSource, Reclaim
except ImportError:  # an earlier commit: the idle reclaimer was a class of its own
    from jupyter_vgpu.server.reclaim import IdleReclaimer
    Reclaim = None

ledger = SQLiteLedger(Path(sys.argv[1]), Inventory("5x16GiB"), context_allowance=0)
ticks = int(sys.argv[2])
uuids = [g.uuid for g in ledger.inventory.snapshot().gpus]

class Kernels:
    def __init__(self):
        self.slices, self.shut_down = {}, []
    def __contains__(self, kernel_id):
        return kernel_id in self.slices
    def get_kernel(self, kernel_id):
        if kernel_id not in self.slices:
            raise KeyError(kernel_id)
        return type("Kernel", (), {"execution_state": "idle", "iopub_port": None})()
    async def shutdown_kernel(self, kernel_id):
        ledger.release(self.slices.pop(kernel_id))
        self.shut_down.append(kernel_id)

kernels = Kernels()
for gpu in range(4):
    for n in range(4):
        name = f"kernel-{gpu}-{n}"
        kernels.slices[name] = ledger.reserve_now(SliceRequest.parse("1/4", gpu=str(gpu)), Holder("kernel", name, pid=os.getpid())).id
ledger.reserve_now(SliceRequest.parse(1, gpu="4"), Holder("command", "python fill.py", pid=os.getpid()))
wants = [  # (request, the GPUs its policy allows or None), one user each
    (SliceRequest.parse("1/2", gpu="4"), None),
    (SliceRequest.parse("1/4"), None),
    (SliceRequest.parse("1/4"), (uuids[4],)),
    (SliceRequest.parse("1/2", gpu="0"), None),
    (SliceRequest.parse("1/4", gpu="4"), None),
    (SliceRequest.parse("1/4", gpu="2"), None),
    (SliceRequest.parse("1/2"), (uuids[4],)),
    (SliceRequest.parse("1/4", gpus=2), None),
]
users, tickets = {}, []
if hasattr(ledger, "allowed_for_row"):  # as the broker tells the line each waiter's policy
    ledger.allowed_for_row = lambda row: None if users[row["ticket"]][1] is None else frozenset(users[row["ticket"]][1])
for i, (request, allowed) in enumerate(wants):
    ticket = ledger.enqueue(request, Holder("command", f"job-{i}", pid=os.getpid()))
    users[ticket.number] = (1001 + i, allowed)
    tickets.append(ticket)

events = []
watchdog = type("Watchdog", (), {"record": lambda self, event, **counted: events.append(event)})()
if Reclaim is not None:  # the reclaim engine with its idle source only
    idle = IdleSource(kernels, watchdog, after=1e-6, notice=0.0, per_user_seconds=600.0, log=logging.getLogger("bench"))
    reclaimer = Reclaim((idle,), allowance=lambda g: 0, log=logging.getLogger("bench"))
else:
    accepted = inspect.signature(IdleReclaimer).parameters
    extra = {k: v for k, v in {"allowance": lambda g: 0, "per_user_seconds": 600.0}.items() if k in accepted}
    reclaimer = IdleReclaimer(kernels, watchdog, after=1e-6, notice=0.0, log=logging.getLogger("bench"), **extra)
granted, costs, quiet = 0, [], 0
loop = asyncio.new_event_loop()
for tick in range(ticks):
    waiting = tuple(replace(w, uid=users[w.ticket][0], **({"allowed_gpus": users[w.ticket][1]} if hasattr(w, "allowed_gpus") else {})) for w in ledger.waiting())
    slices = ledger.slices()
    usages = tuple(SliceUsage(s, s.pid, {}, 0, 0, "measured", None) for s in slices)
    sample = Sample(time.time(), ledger.inventory.snapshot(), ledger.occupancy(), usages, waiting)
    before = len(kernels.shut_down)
    started = time.perf_counter()
    loop.run_until_complete(reclaimer.check(sample))
    costs.append(time.perf_counter() - started)
    async def settle():
        await asyncio.gather(*reclaimer._tasks)
    loop.run_until_complete(settle())
    got = 0
    for ticket in list(tickets):
        allowed = users[ticket.number][1]  # a policy's GPUs: the broker grants only there
        view = ledger if allowed is None else ledger.acting_for(ledger.actor, allowed_gpus=allowed)
        try:
            if view.try_grant(ticket, final=False) is not None:
                tickets.remove(ticket)
                got += 1
        except Exception:
            tickets.remove(ticket)
    granted += got
    quiet = quiet + 1 if (got == 0 and len(kernels.shut_down) == before) else 0
    if quiet >= 5:
        break
costs.sort()
print(json.dumps({
    "shut_down": len(kernels.shut_down), "let_in": granted, "still_waiting": len(tickets), "ticks": tick + 1,
    "tick_ms_p50": 1000 * costs[len(costs) // 2], "tick_ms_p95": 1000 * costs[int(len(costs) * 0.95)],
}))
"""


def run(source: Path, folder: Path, ticks: int, name: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    for key in ("JUPYTER_VGPU_BROKER", "JUPYTER_VGPU_SIMULATE", "JUPYTER_VGPU_LEDGER"):
        env.pop(key, None)
    ledger = folder / f"{name}.sqlite"
    # from the temporary folder: `python -c` puts the working directory first on sys.path
    out = subprocess.run([sys.executable, "-c", SCENE, str(ledger), str(ticks)], env=env, cwd=folder, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="039dfbf", help="the earlier commit (default: the last before issue 30's reclaim)")
    parser.add_argument("--ticks", type=int, default=200, help="at most this many monitor ticks per version")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="vgpu-bench-reclaim-"))
    try:
        earlier = folder / "earlier"
        earlier.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against, "jupyter_vgpu"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(earlier)], input=archive, check=True)
        for label, source in ((f"before ({args.against})", earlier), ("this checkout", ROOT)):
            figures = run(source, folder, args.ticks, label.split()[0])
            print(
                f"{label:>22}: {figures['shut_down']:2d} idle kernels shut down, {figures['let_in']} of 8 requests let in, "
                f"{figures['still_waiting']} still waiting, after {figures['ticks']} ticks; reclaimer per tick: "
                f"p50 {figures['tick_ms_p50']:.2f} ms, p95 {figures['tick_ms_p95']:.2f} ms"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
