"""Which bursts go back for whom (issue 42, item 4), on a real ledger, the server's monitor and its
reclaimers: every request in line is planned with what those before it take, so two requests that
each need a burst get both bursts asked back at once, not one per notice; a kernel within its
request is never asked; placement counts a burst of the moment as room to burst into."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from jupyter_vgpu.config import VGPU
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.server.bursts import BurstReclaimer
from jupyter_vgpu.server.monitor import UsageMonitor
from jupyter_vgpu.server.reclaim import IdleReclaimer, placed
from jupyter_vgpu.server.watchdog import Watchdog
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.units import GiB

PID = 3_900_000  # pids no process has: the simulated GPU's processes


class Kernels:
    """A server's kernel manager, as far as the reclaim asks it."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = set(ids)

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self.ids

    def get_kernel(self, kernel_id: str) -> Any:
        return type("Kernel", (), {"execution_state": "idle", "iopub_port": None})()


def write(spec: Path, use: dict[int, int], gpu: str) -> None:
    processes = [{"gpu": gpu, "pid": pid, "memory": used} for pid, used in use.items()]
    spec.write_text(json.dumps({"devices": [{"name": "Simulated GPU", "memory": "16GiB"}], "processes": processes}))


def test_two_requests_in_line_each_needing_a_burst_get_both_asked_back_at_once(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"name": "Simulated GPU", "memory": "16GiB"}], "processes": []}))
    ledger = open_ledger(VGPU(ledger_path=str(tmp_path / "ledger.sqlite"), simulate=str(spec)))
    elastic = SliceRequest.parse(memory="2GiB", limit="6GiB")
    names = [f"k{i}" for i in range(4)]
    held = []
    for i, name in enumerate(names):
        s = ledger.reserve(elastic, Holder.kernel(name, pid=os.getpid(), keeper=os.getpid()))
        ledger.attach(s.id, PID + i)
        held.append(s)
    gpu = held[0].gpus[0]
    # 8 GiB booked; k0 and k1 burst to 6 GiB each: 8 GiB of bursts, nothing free. Two requests of
    # 3 GiB wait: each needs one burst back (4 GiB), and the second only with the first's 3 GiB counted.
    write(spec, {PID: 6 * GiB, PID + 1: 6 * GiB, PID + 2: GiB, PID + 3: GiB}, gpu)
    for who in ("first", "second"):
        ledger.enqueue(SliceRequest.parse(memory="3GiB"), Holder.command(who, pid=os.getpid()))
    manager = Kernels(names)
    watchdog = Watchdog(manager)
    bursts = BurstReclaimer(manager, watchdog, notice=60, placed=lambda want, gpus: placed(want, gpus, ledger.allowance_for))
    reclaimer = IdleReclaimer(manager, watchdog, allowance=ledger.allowance_for, bursts=bursts)
    monitor = UsageMonitor(ledger, interval=1.0)
    try:
        sample = monitor.collect({name: PID + i for i, name in enumerate(names)})
        assert sample.message is None, sample.message
        asyncio.run(reclaimer.check(sample))
        asked = set(bursts.notices)
        assert asked == {held[0].id, held[1].id}  # both bursts, in one sample
        assert not asked & {held[2].id, held[3].id}  # within their requests: never asked
        tickets = [w.ticket for w in ledger.waiting()]
        assert all(bursts.waited_for(t) for t in tickets)  # each place in line says when
    finally:
        monitor.executor.shutdown(wait=False)
        ledger.close()


def test_placement_counts_a_burst_of_the_moment_as_room_to_burst_into(tmp_path: Path) -> None:
    """Benchmark seed 0: a request went to the GPU with less room for requests because the other
    GPU had a burst running just then, leaving a GPU where nobody could burst any more."""
    spec = tmp_path / "gpus.json"
    devices = [{"name": "Simulated GPU", "memory": "16GiB"}] * 2
    spec.write_text(json.dumps({"devices": devices, "processes": []}))
    ledger = open_ledger(VGPU(ledger_path=str(tmp_path / "ledger.sqlite"), simulate=str(spec)))
    elastic = SliceRequest.parse(memory="2GiB", limit="6GiB")
    try:
        # GPU 0: six requests (12 GiB booked); GPU 1: four (8 GiB), one bursting to 6 GiB just now.
        on0 = [ledger.reserve(SliceRequest.parse(memory="2GiB", limit="6GiB", gpu="0"), Holder.command(f"a{i}")) for i in range(6)]
        on1 = [ledger.reserve(SliceRequest.parse(memory="2GiB", limit="6GiB", gpu="1"), Holder("kernel", f"b{i}", pid=PID + i, keeper=os.getpid())) for i in range(4)]
        processes = [{"gpu": 1, "pid": PID, "memory": "6GiB"}]
        spec.write_text(json.dumps({"devices": devices, "processes": processes}))
        new = ledger.reserve(elastic, Holder.command("new"))
        # Both have 4 GiB free now; GPU 1 has 8 GiB no request holds, room for the new one's whole
        # limit once the burst is back, GPU 0 only 4 (2 GiB to burst): GPU 1 it is.
        assert new.gpus == on1[0].gpus, (new.gpu_indices, on0[0].gpu_indices)
    finally:
        ledger.close()
