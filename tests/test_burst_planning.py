"""Which bursts go back for whom (issue 42, item 4), on a real ledger, the server's monitor and its
reclaimers: every request in line is planned with what those before it take, so two requests that
each need a burst get both bursts asked back at once, not one per notice; a kernel within its
request is never asked; placement counts a burst of the moment as room to burst into."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyter_vgpu.config import VGPU
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.server.monitor import UsageMonitor
from jupyter_vgpu.server.reclaim import BurstSource, IdleSource, Reclaim
from jupyter_vgpu.server.watchdog import Watchdog
from jupyter_vgpu.slices import Actor, Holder, SliceRequest
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
    reclaim = Reclaim((BurstSource(manager, watchdog, notice=60), IdleSource(manager, watchdog)), allowance=ledger.allowance_for)
    monitor = UsageMonitor(ledger, interval=1.0)
    try:
        sample = monitor.collect({name: PID + i for i, name in enumerate(names)})
        assert sample.message is None, sample.message
        asyncio.run(reclaim.check(sample))
        asked = set(reclaim.board.of("burst"))
        assert asked == {held[0].id, held[1].id}  # both bursts, in one sample
        assert not asked & {held[2].id, held[3].id}  # within their requests: never asked
        tickets = [w.ticket for w in ledger.waiting()]
        assert all(reclaim.board.due("burst", t) for t in tickets)  # each place in line says when
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


class Restarts(Kernels):
    """The kernel manager, recording the restarts the burst reclaim asks for."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__(ids)
        self.restarted: list[str] = []

    async def restart_kernel(self, kernel_id: str) -> None:
        self.restarted.append(kernel_id)


def test_another_users_requests_get_one_burst_reclaim_per_window_this_users_own_are_not_bounded(tmp_path: Path) -> None:
    """Hardening round five, H1: bob asked again and again, and each of his places in line
    restarted alice's bursting kernel once per notice. Like the idle reclaim, another user's
    requests cause one reclaim every ``per_user_seconds``; the server's own user's are not bounded."""
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"name": "Simulated GPU", "memory": "16GiB"}], "processes": []}))
    ledger = open_ledger(VGPU(ledger_path=str(tmp_path / "ledger.sqlite"), simulate=str(spec)))
    bob = ledger.acting_for(Actor("bob", os.getuid() + 4242))
    mine = ledger.reserve(SliceRequest.parse(memory="2GiB", limit="14GiB"), Holder.kernel("k0", pid=os.getpid(), keeper=os.getpid()))
    ledger.attach(mine.id, PID)
    write(spec, {PID: 12 * GiB}, mine.gpus[0])  # 10 GiB above its request: 4 GiB left for anyone
    manager = Restarts(["k0"])
    watchdog = Watchdog(manager)
    reclaim = Reclaim((BurstSource(manager, watchdog, notice=0.0, per_user_seconds=600.0), IdleSource(manager, watchdog)), allowance=ledger.allowance_for)
    monitor = UsageMonitor(ledger, interval=1.0)
    eight = SliceRequest.parse(memory="8GiB")  # fits only with the burst back
    start = time.time()

    async def tick(at: float) -> None:
        sample = replace(monitor.collect({"k0": PID}), taken_at=start + at)
        assert sample.message is None, sample.message
        await reclaim.check(sample)
        await reclaim.stop()  # a restart asked for is done before the next tick

    try:
        first = bob.enqueue(eight, Holder.command("bob's first", pid=os.getpid()))
        asyncio.run(tick(0))
        assert set(reclaim.board.of("burst")) == {mine.id}  # a notice for bob's request...
        asyncio.run(tick(1))
        assert manager.restarted == ["k0"]  # ...and, the notice run out, the restart
        bob.leave_queue(first)  # bob gave up (or was refused) and asks again; alice bursts again
        again = bob.enqueue(eight, Holder.command("bob's second", pid=os.getpid()))
        for at in (2, 3, 300, 599):
            asyncio.run(tick(at))
            assert not reclaim.board.of("burst") and manager.restarted == ["k0"], at  # his reclaim was had lately
        asyncio.run(tick(601))
        assert set(reclaim.board.of("burst")) == {mine.id}  # a new window: his request may ask again
        bob.leave_queue(again)
        asyncio.run(tick(602))
        assert not reclaim.board.of("burst")  # nobody needs it: withdrawn

        # This server's user's own requests are not bounded: the kernels are theirs.
        for at in (700, 800):
            own = ledger.enqueue(eight, Holder.command("my own", pid=os.getpid()))
            asyncio.run(tick(at))
            asyncio.run(tick(at + 1))
            ledger.leave_queue(own)
        assert manager.restarted == ["k0", "k0", "k0"]
    finally:
        monitor.executor.shutdown(wait=False)
        ledger.close()


def test_bursts_beyond_what_no_request_holds_get_a_notice_with_nobody_waiting_the_youngest_first(tmp_path: Path) -> None:
    """Hardening round five, M2: alice's kernel burst to 11.5 GiB while the other requests on the
    16 GiB GPU were booked and not yet used; when they used them, 19.5 GiB were in use and nothing
    gave anything back. On a real GPU the last to allocate within its request runs out of memory."""
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"name": "Simulated GPU", "memory": "16GiB"}], "processes": []}))
    ledger = open_ledger(VGPU(ledger_path=str(tmp_path / "ledger.sqlite"), simulate=str(spec)))
    others = ledger.acting_for(Actor("bob", os.getuid() + 4242))
    elastic = SliceRequest.parse(memory="2GiB", limit="12GiB")
    old, young = (ledger.reserve(elastic, Holder.kernel(k, pid=os.getpid(), keeper=os.getpid())) for k in ("k0", "k1"))
    ledger.attach(old.id, PID)
    ledger.attach(young.id, PID + 1)
    bobs = others.reserve(SliceRequest.parse(memory="4GiB"), Holder("command", "bob's", pid=os.getpid(), keeper=os.getpid()))
    others.attach(bobs.id, PID + 2)
    gpu = old.gpus[0]
    manager = Restarts(["k0", "k1"])
    watchdog = Watchdog(manager)
    reclaim = Reclaim((BurstSource(manager, watchdog, notice=30.0), IdleSource(manager, watchdog)), allowance=ledger.allowance_for)
    monitor = UsageMonitor(ledger, interval=1.0)
    start = time.time()

    def tick(at: float, use: dict[int, float]) -> dict[str, Any]:
        write(spec, {pid: int(gib * GiB) for pid, gib in use.items() if gib}, gpu)  # a process using nothing is not listed
        os.utime(spec, (start + at, start + at))  # read again when its stamp changes: two writes of one size in a tick would not be
        sample = replace(monitor.collect({"k0": PID, "k1": PID + 1}), taken_at=start + at)
        assert sample.message is None, sample.message
        asyncio.run(reclaim.check(sample))
        return sample.occupancy.gpus[0].to_dict()  # the GPU as every view shows it

    try:
        # 8 GiB booked (2 + 2 + 4): 8 GiB no request holds. Both burst within it while bob uses nothing.
        tick(0, {PID: 6, PID + 1: 2, PID + 2: 0})
        tick(1, {PID: 6, PID + 1: 6, PID + 2: 0})  # k1 began bursting later: the younger
        assert not reclaim.board.of("burst")  # 8 GiB of bursts in the 8 GiB no request holds
        shown = tick(2, {PID: 6, PID + 1: 7, PID + 2: 4})  # bob uses his request; bursts now hold 9 GiB of 8
        assert (shown["memory_used"], shown["memory_overbooked"]) == (17 * GiB, GiB)  # over-full, as it is: not clamped at 16
        assert set(reclaim.board.of("burst")) == {young.id}  # the youngest covers the 1 GiB: at once, nobody waiting
        notice = reclaim.board.notice("burst", young.id, start + 2)
        assert notice is not None and notice["for"] == "the requests booked on GPU 0 need 1.0 GiB that bursts hold", notice
        tick(3, {PID: 6, PID + 1: 9, PID + 2: 4})  # 3 GiB over: its 7 GiB of burst still cover it
        assert set(reclaim.board.of("burst")) == {young.id}
        tick(4, {PID: 6, PID + 1: 6, PID + 2: 4})  # given back within what no request holds
        assert not reclaim.board.of("burst") and manager.restarted == []
        tick(5, {PID: 11, PID + 1: 7, PID + 2: 4})  # 14 GiB of bursts: the youngest's 5 do not cover 6
        assert set(reclaim.board.of("burst")) == {young.id, old.id}
        tick(40, {PID: 11, PID + 1: 7, PID + 2: 4})  # the notice ran out: the admin's action
        asyncio.run(reclaim.stop())
        assert sorted(manager.restarted) == ["k0", "k1"]
    finally:
        monitor.executor.shutdown(wait=False)
        ledger.close()
