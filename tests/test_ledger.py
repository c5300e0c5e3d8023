"""The ledger: placement, multi-GPU, waiting in line, reaping, corruption, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_vgpu.errors import InvalidRequest, LedgerError, LeftLine, NotPermitted, SliceNotFound, SliceUnavailable
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import Ledger, SQLiteLedger
from jupyter_vgpu.ledger.file import LedgerFile
from jupyter_vgpu.slices import Actor, Holder, SliceRequest
from jupyter_vgpu.slices.placement import place
from jupyter_vgpu.units import GiB, MiB, format_bytes

CONTEXT = 300 * MiB


def make_ledger(path: Path, spec: str = "2x16GiB") -> Ledger:
    return SQLiteLedger(path, Inventory(spec), context_allowance=CONTEXT, poll_interval=0.05)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return make_ledger(tmp_path / "ledger.sqlite")


def reserve(ledger: Ledger, share: str | float, **kwargs: object) -> object:
    request = (
        SliceRequest.parse(memory=share)
        if isinstance(share, str) and share[-1].isalpha()
        else SliceRequest.parse(share, **kwargs)
    )  # type: ignore[arg-type]
    return ledger.reserve(request, Holder("command", f"test {share}"))


def test_binpack_fills_the_fullest_gpu_that_fits(ledger: Ledger) -> None:
    first = reserve(ledger, 0.5)
    second = reserve(ledger, 0.25)
    assert first.gpu_indices == second.gpu_indices == (0,)  # type: ignore[attr-defined]
    third = reserve(ledger, 0.5)  # 0.25 left on GPU 0: goes to GPU 1
    assert third.gpu_indices == (1,)  # type: ignore[attr-defined]
    fourth = reserve(ledger, 0.25)  # fits GPU 0 exactly: the fullest that fits
    assert fourth.gpu_indices == (0,)  # type: ignore[attr-defined]


def test_spread_uses_the_emptiest_gpu(ledger: Ledger) -> None:
    reserve(ledger, 0.25)
    spread = ledger.reserve(SliceRequest.parse(0.25, placement="spread"), Holder("command", "x"))
    assert spread.gpu_indices == (1,)


def test_ties_break_by_gpu_index(ledger: Ledger) -> None:
    assert reserve(ledger, 0.5).gpu_indices == (0,)  # type: ignore[attr-defined]


def test_placement_turns_the_share_into_bytes_once_per_gpu(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check of one placement (the context allowance, fits at all, fits now, the order, the
    amount) reads the same figure per GPU; the waiting line places each earlier request again."""
    asked: list[int] = []
    amount_on = SliceRequest.amount_on
    monkeypatch.setattr(SliceRequest, "amount_on", lambda self, total: asked.append(total) or amount_on(self, total))
    placement = place(SliceRequest.parse("1/4", gpus=2), ledger.occupancy().gpus, allowance=lambda g: CONTEXT)
    assert [(g.index, amount) for g, amount in placement.chosen] == [(0, 4 * GiB), (1, 4 * GiB)]
    assert asked == [16 * GiB, 16 * GiB]


def test_memory_requests_reserve_exact_bytes_and_frameworks_get_less_the_context(ledger: Ledger) -> None:
    s = reserve(ledger, "6GiB")
    assert s.memory == (6 * GiB,)  # type: ignore[attr-defined]
    assert s.memory_limit == 6 * GiB - CONTEXT  # type: ignore[attr-defined]
    assert s.context_allowance == CONTEXT  # type: ignore[attr-defined]


def test_multi_gpu_request_gets_distinct_gpus_with_the_same_share(ledger: Ledger) -> None:
    s = ledger.reserve(SliceRequest.parse(0.5, gpus=2), Holder("command", "ddp"))
    assert sorted(s.gpu_indices) == [0, 1]
    assert s.memory == (8 * GiB, 8 * GiB)
    with pytest.raises(SliceUnavailable, match="needs 3 GPUs but this machine has 2"):
        ledger.reserve(SliceRequest.parse(0.1, gpus=3), Holder("command", "x"))


def test_pinned_gpu_by_index_or_uuid(ledger: Ledger) -> None:
    gpus = ledger.inventory.snapshot().gpus
    assert reserve(ledger, 0.25, gpu="1").gpu_indices == (1,)  # type: ignore[attr-defined]
    assert reserve(ledger, 0.25, gpu=gpus[1].uuid).gpu_indices == (1,)  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequest, match="GPU '7' does not exist"):
        reserve(ledger, 0.25, gpu="7")


def test_full_gpus_refuse_with_what_is_free_and_who_holds_it(ledger: Ledger) -> None:
    for _ in range(8):
        reserve(ledger, 0.25)
    with pytest.raises(SliceUnavailable) as caught:
        reserve(ledger, 0.25)
    message = str(caught.value)
    assert message.startswith("No room for 1/4 GPU (4.0 GiB) now: every GPU is full.\n")
    assert "GPU 0 (Simulated GPU 16GiB): 0 B free of 16.0 GiB" in message
    assert "reserved by test 0.25" in message


def test_what_fractions_leave_over_is_not_free_anywhere(tmp_path: Path) -> None:
    ledger = make_ledger(tmp_path / "ledger.sqlite", "1x16GiB")
    for _ in range(3):
        reserve(ledger, "1/3")  # 3 x floor(16 GiB / 3) leaves one byte
    assert sum(s.memory_per_gpu for s in ledger.slices()) == 16 * 2**30 - 1
    with pytest.raises(SliceUnavailable) as caught:
        reserve(ledger, 0.25)
    assert str(caught.value).startswith("No room for 1/4 GPU (4.0 GiB) now: every GPU is full.\n")
    assert "0 B free of 16.0 GiB" in str(caught.value) and caught.value.detail["fits_now"]["memory"] is None


def test_free_memory_too_small_for_a_context_is_not_offered(tmp_path: Path) -> None:
    ledger = make_ledger(tmp_path / "ledger.sqlite", "1x16GiB")
    reserve(ledger, f"{16 * 1024 - 300}MiB")  # 300 MiB left, less than the context allowance
    with pytest.raises(SliceUnavailable) as caught:
        reserve(ledger, 0.25)
    message = str(caught.value)
    assert message.startswith(
        f"No room for 1/4 GPU (4.0 GiB) now: the most free is 300 MiB on GPU 0, too little for any slice "
        f"(each holds a CUDA context of {format_bytes(CONTEXT)}).\n"
    )
    assert "Ask for at most" not in message and caught.value.detail["smaller_fits"] is False


def test_a_kernel_refused_for_too_few_gpus_with_room_is_offered_fewer_gpus(ledger: Ledger) -> None:
    """The kernel-start dialog's words for the count that is short (issue 33): not "wait"."""
    from jupyter_vgpu.launch.refusals import refusal_tips

    reserve(ledger, 1.0)  # GPU 0 full, GPU 1 empty
    with pytest.raises(SliceUnavailable) as caught:
        reserve(ledger, 0.5, gpus=2)
    detail = caught.value.detail
    assert detail["fewer_gpus_fit"] == 1 and detail["summary"].endswith(
        "only 1 GPU has room for 1/2 GPU (GPU 1), where 2 are needed."
    )
    tips = refusal_tips(detail, kernels=[], wait_timeout=0)
    assert tips[0] == "A kernel of the same share on 1 GPU fits now (`jupyter vgpu kernelspec install -n 1` and its -p or -m)."


def test_a_request_bigger_than_any_gpu_fails_at_once_even_when_waiting(ledger: Ledger) -> None:
    start = time.monotonic()
    with pytest.raises(SliceUnavailable, match="more than the largest GPU"):
        ledger.reserve(SliceRequest.parse(memory="20GiB"), Holder("command", "x"), wait=5)
    assert time.monotonic() - start < 4


def test_slices_no_bigger_than_the_context_allowance_are_refused(ledger: Ledger) -> None:
    with pytest.raises(InvalidRequest, match="not more than the CUDA-context allowance"):
        reserve(ledger, "200MiB")


def test_memory_used_by_processes_without_a_slice_is_not_reservable(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(
        json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": 999999, "memory": "10GiB"}]})
    )
    ledger = make_ledger(tmp_path / "l.sqlite", str(spec))
    reserve(ledger, "6GiB")
    with pytest.raises(SliceUnavailable, match="10.0 GiB used by processes without a slice"):
        reserve(ledger, "1GiB")


def test_a_slice_using_more_than_it_reserved_takes_that_memory_from_placement(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": []}))
    ledger = make_ledger(tmp_path / "l.sqlite", str(spec))
    ledger.reserve(SliceRequest.parse(0.25), Holder("command", "greedy", pid=os.getpid()))
    spec.write_text(
        json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": os.getpid(), "memory": "5.5GiB"}]})
    )
    (gpu,) = ledger.occupancy().gpus  # type: ignore[attr-defined]
    assert (gpu.reserved, gpu.used_by_slices, gpu.over_use, gpu.free) == (4 * GiB, int(5.5 * GiB), int(1.5 * GiB), int(10.5 * GiB))
    with pytest.raises(SliceUnavailable, match=r"10.5 GiB free of 16.0 GiB; reserved by greedy \[.*\] 4.0 GiB; 1.5 GiB used beyond reservations"):
        reserve(ledger, "11GiB")
    assert reserve(ledger, "10.5GiB")


def test_memory_no_visible_process_accounts_for_is_never_reservable(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"  # 40 GiB in use by processes NVML does not list (other containers)
    spec.write_text(json.dumps({"devices": [{"memory": "80GiB", "used": "40GiB"}], "processes": []}))
    ledger = make_ledger(tmp_path / "l.sqlite", str(spec))
    with pytest.raises(SliceUnavailable, match="40.0 GiB free of 80.0 GiB; 40.0 GiB used by processes without a slice"):
        reserve(ledger, 0.75)
    assert reserve(ledger, 0.5)


def test_memory_used_inside_a_slice_is_not_counted_twice(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(
        json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": os.getpid(), "memory": "7GiB"}]})
    )
    ledger = make_ledger(tmp_path / "l.sqlite", str(spec))
    ledger.reserve(SliceRequest.parse(0.5), Holder("command", "mine", pid=os.getpid()))
    assert ledger.reserve(SliceRequest.parse(0.5), Holder("command", "other"))


def test_release_frees_and_unknown_ids_are_clear(ledger: Ledger) -> None:
    s = reserve(ledger, 1.0)
    ledger.release(s.id[:8])  # type: ignore[attr-defined]
    assert ledger.slices() == []
    with pytest.raises(SliceNotFound, match="No slice 'nope'"):
        ledger.release("nope")


def test_only_the_owner_may_release(ledger: Ledger) -> None:
    s = ledger.acting_for(Actor("bob", 4242)).reserve(SliceRequest.parse(0.5), Holder("command", "x"))
    alice = ledger.acting_for(Actor("alice", 4343))
    for change in (alice.release, alice.resize, alice.attach, alice.update_labels):
        args = {alice.resize: (SliceRequest.parse(0.25),), alice.attach: (os.getpid(),), alice.update_labels: ({"a": "b"},)}
        with pytest.raises(NotPermitted, match="belongs to bob"):
            change(s.id, *args.get(change, ()))
    assert ledger.acting_for(Actor("bob", 4242)).release(s.id).id == s.id
    assert ledger.slices() == []


def test_dead_holders_are_reaped_on_the_next_reservation(ledger: Ledger) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ledger.reserve(SliceRequest.parse(1.0, gpus=2), Holder("command", "doomed", pid=child.pid))
    with pytest.raises(SliceUnavailable):
        reserve(ledger, 0.5)
    child.kill()
    child.wait()
    assert reserve(ledger, 0.5)
    assert [s.holder for s in ledger.slices()] == ["test 0.5"]


def test_a_reused_pid_does_not_keep_a_dead_holders_slice(ledger: Ledger) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    s = ledger.reserve(SliceRequest.parse(0.5), Holder("command", "old", pid=child.pid))
    child.kill()
    child.wait()
    time.sleep(0.05)  # a reused pid always belongs to a later process
    # The kernel hands the dead holder's pid to a new process: the ledger still has the old
    # start time, and now a live (different) process answers to the pid.
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with sqlite3.connect(ledger.path) as db:
            db.execute("UPDATE slices SET pid = ? WHERE id = ?", (newcomer.pid, s.id))
        assert [x.id for x in ledger.reap()] == [s.id]
    finally:
        newcomer.kill()
        newcomer.wait()


def test_waiting_in_line_is_first_come_first_served(ledger: Ledger) -> None:
    """A GPU given back goes to the first in line, though a later, smaller request would fit too.
    (Run 32 of CI: with both GPUs given back at once, both places were granted in the same poll
    and the threads said so in either order; one GPU at a time makes the order the ledger's.)"""
    gpu0 = ledger.reserve(SliceRequest.parse(1.0, gpu="0"), Holder("command", "all of 0"))
    gpu1 = ledger.reserve(SliceRequest.parse(1.0, gpu="1"), Holder("command", "all of 1"))
    got: dict[str, object] = {}

    def wait_for(name: str, share: float) -> None:
        local = make_ledger(ledger.path)
        got[name] = local.reserve(SliceRequest.parse(share), Holder("command", name), wait=30)

    def line() -> list[tuple[int, str]]:
        return [(w.position, w.holder) for w in ledger.waiting()]

    def wait_until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, f"the line stayed {line()}"
            time.sleep(0.02)

    first = threading.Thread(target=wait_for, args=("first", 1.0))
    first.start()
    wait_until(lambda: line() == [(1, "first")])
    second = threading.Thread(target=wait_for, args=("second", 0.25))
    second.start()
    wait_until(lambda: len(line()) == 2)
    assert line() == [(1, "first"), (2, "second")]
    with pytest.raises(SliceUnavailable, match="2 earlier requests wait in line"):
        reserve(ledger, 0.1)  # a newcomer does not jump the line
    ledger.release(gpu0.id)  # the quarter would fit on GPU 0 now, but the whole GPU asked first
    first.join(30)
    assert got["first"].gpu_indices == (0,)  # type: ignore[attr-defined]
    assert "second" not in got and line() == [(1, "second")]
    ledger.release(gpu1.id)
    second.join(30)
    assert got["second"].gpu_indices == (1,)  # type: ignore[attr-defined]
    assert ledger.waiting() == []


def test_a_place_pinned_to_a_gpu_by_its_uuid_is_waited_behind_by_one_pinned_to_it_by_index(ledger: Ledger) -> None:
    """`--gpu 0` and `--gpu GPU-...` name one GPU: the later waits behind the earlier (they were
    compared as written, so the later took the GPU given back before the first in line)."""
    gpu0 = ledger.reserve(SliceRequest.parse(1.0, gpu="0"), Holder("command", "all of 0"))
    bob = ledger.acting_for(Actor("bob", 4242))
    whole = bob.enqueue(SliceRequest.parse(1.0, gpu=gpu0.gpus[0]), Holder("command", "bob: GPU 0 by its UUID"))
    quarter = ledger.enqueue(SliceRequest.parse(0.25, gpu="0"), Holder("command", "a quarter of GPU 0 by its index"))
    assert bob.try_grant(whole, final=False) is None and ledger.try_grant(quarter, final=False) is None
    ledger.release(gpu0.id)
    assert ledger.try_grant(quarter, final=False) is None  # bob's whole GPU asked first, and fits now
    granted = bob.try_grant(whole, final=False)
    assert granted is not None and granted.gpu_indices == (0,)


def test_a_request_that_fits_now_passes_a_place_that_cannot_be_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One user's `run -p 1 --wait 100000` made every other request that fit now fail (issue 19):
    a request that fits passes places that cannot be placed now; a place that waited
    BACKFILL_SECONDS keeps the GPU it is likeliest to get, and is never passed while it fits."""
    from jupyter_vgpu.ledger import line

    ledger = make_ledger(tmp_path / "ledger.sqlite")
    assert isinstance(ledger, SQLiteLedger)
    ledger.reserve(SliceRequest.parse(0.5, gpu="0"), Holder("command", "half on 0"))
    quarter_on_1 = ledger.reserve(SliceRequest.parse(0.25, gpu="1"), Holder("command", "quarter on 1"))
    bob = ledger.acting_for(Actor("bob", 4242))
    whole = bob.enqueue(SliceRequest.parse(1), Holder("command", "bob needs a whole GPU"))
    assert bob.try_grant(whole, final=False) is None
    passed = reserve(ledger, 0.25)  # fits now: it does not wait behind bob's whole GPU
    assert passed.gpu_indices == (0,)  # type: ignore[attr-defined]
    monkeypatch.setattr(line, "BACKFILL_SECONDS", 0.0)  # bob has now waited long enough
    assert reserve(ledger, 0.25).gpu_indices == (0,)  # type: ignore[attr-defined]  # not on GPU 1, the freest: bob's
    with pytest.raises(SliceUnavailable, match="would fit now, but 1 earlier request waits"):
        reserve(ledger, 0.25)  # only GPU 1 has room, and it is kept for bob
    ledger.release(quarter_on_1.id)  # GPU 1 is free: bob's place fits now
    with pytest.raises(SliceUnavailable, match="1 earlier request waits"):
        reserve(ledger, 0.25, gpu="1")  # nobody passes a place that fits
    granted = bob.try_grant(whole, final=False)
    assert granted is not None and granted.gpu_indices == (1,)


def test_a_place_asked_again_with_its_token_after_its_grant_gets_that_slice(ledger: Ledger) -> None:
    """The contract's try_grant, asked again after a lost answer (the broker's clients do)."""
    full = ledger.reserve(SliceRequest.parse(1.0, gpus=2), Holder("command", "all"))
    bob = ledger.acting_for(Actor("bob", 4242))  # type: ignore[attr-defined]
    ticket = bob.enqueue(SliceRequest.parse(0.5), Holder("command", "bob", token="bob-1"))
    assert ticket.token == "bob-1" and bob.try_grant(ticket, final=False) is None
    ledger.release(full.id)
    granted = bob.try_grant(ticket, final=False)
    assert granted is not None and bob.try_grant(ticket, final=False) == granted
    assert ledger.slices() == [granted]
    with pytest.raises(LeftLine, match="in line was cancelled"):  # not bob's token: the place is gone
        ledger.try_grant(ticket, final=False)


def test_waiting_times_out_with_the_reason_and_leaves_the_line(ledger: Ledger) -> None:
    ledger.reserve(SliceRequest.parse(1.0, gpus=2), Holder("command", "all"))
    with pytest.raises(SliceUnavailable, match="Waited 0.3 s in line. No room for 1/2 GPU"):
        ledger.reserve(SliceRequest.parse(0.5), Holder("command", "x"), wait=0.3)
    assert ledger.waiting() == []


def test_a_wait_from_a_notebook_cell_waits_and_an_interrupt_leaves_the_line(ledger: Ledger) -> None:
    """A cell runs inside its kernel's event loop: the wait runs on a loop of its own beside it
    (`%vgpu resize` waits there), and interrupting the kernel ends it and leaves the line."""
    import _thread
    import asyncio
    import threading

    ledger.reserve(SliceRequest.parse(1.0, gpus=2), Holder("command", "all"))
    seen: list[object] = []

    async def cell() -> None:
        with pytest.raises(SliceUnavailable, match="Waited 0.3 s in line. No room for 1/2 GPU"):
            ledger.reserve(SliceRequest.parse(0.5), Holder("command", "x"), wait=0.3)

        def interrupt_once_waiting(ticket: object) -> None:
            if not seen:
                seen.append(ticket)
                threading.Timer(0.2, _thread.interrupt_main).start()  # the kernel's interrupt: SIGINT

        with pytest.raises(KeyboardInterrupt):
            ledger.reserve(SliceRequest.parse(0.5), Holder("command", "x"), wait=60, waiting=interrupt_once_waiting)

    loop = asyncio.new_event_loop()  # as ipykernel runs its loop: SIGINT is KeyboardInterrupt, not asyncio.run's
    try:
        loop.run_until_complete(cell())
    finally:
        loop.close()
    assert seen and ledger.waiting() == []


def test_resize_changes_the_share_in_place_or_says_why_not(ledger: Ledger) -> None:
    a = ledger.reserve(SliceRequest.parse(0.5, gpu="0"), Holder("command", "a"))
    b = ledger.reserve(SliceRequest.parse(0.25, gpu="0"), Holder("command", "b"))
    grown = ledger.resize(a.id, SliceRequest.parse(0.75))
    assert grown.memory == (12 * GiB,) and grown.gpu_indices == (0,)
    with pytest.raises(SliceUnavailable, match="Cannot resize"):
        ledger.resize(b.id, SliceRequest.parse(0.5))
    assert ledger.get(b.id).memory == (4 * GiB,)


def test_a_corrupt_ledger_says_so_and_how_to_recover_without_losing_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerError) as caught:
        make_ledger(path)
    assert "is corrupt" in str(caught.value)
    assert "jupyter vgpu gc --reset-ledger" in str(caught.value)
    moved = LedgerFile.reset(path)
    assert moved is not None and moved.read_bytes().startswith(b"this is not a database")
    assert make_ledger(path).slices() == []


def test_a_ledger_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    make_ledger(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LedgerError, match="newer jupyter-vgpu"):
        make_ledger(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_an_unreadable_ledger_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    make_ledger(path).close()
    path.chmod(0)
    with pytest.raises(LedgerError, match="ledger"):
        make_ledger(path)


def _worker(path: str, seed: int, operations: int, results: multiprocessing.Queue[tuple[int, int, int, int]]) -> None:
    rng = random.Random(seed)
    ledger = make_ledger(Path(path))
    held: list[str] = []
    granted = refused = released = 0
    for _ in range(operations):
        if held and (rng.random() < 0.45 or len(held) > 3):
            ledger.release(held.pop(rng.randrange(len(held))))
            released += 1
        else:
            share = rng.choice([0.125, 0.25, 0.5, 0.75, 1.0])
            gpus = rng.choice([1, 1, 1, 2])
            try:
                held.append(ledger.reserve(SliceRequest.parse(share, gpus=gpus), Holder("command", f"w{seed}")).id)
                granted += 1
            except SliceUnavailable:
                refused += 1
        assert ledger.overcommitted() == []
    for slice_id in held:
        ledger.release(slice_id)
    results.put((seed, granted, refused, released))


@pytest.mark.slow
def test_four_processes_hammering_one_ledger_never_overcommit(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    make_ledger(path).close()
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[tuple[int, int, int, int]] = context.Queue()
    workers = [context.Process(target=_worker, args=(str(path), seed, 80, results)) for seed in range(4)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    assert sum(g + r + f for _, g, r, f in outcomes) == 4 * 80  # reservations tried and releases
    assert sum(g for _, g, _, _ in outcomes) > 50 and sum(f for _, _, _, f in outcomes) > 50
    assert sum(r for _, _, r, _ in outcomes) > 0  # the GPUs really filled up
    with sqlite3.connect(path) as db:
        over = db.execute(
            "SELECT g.uuid FROM gpus g JOIN (SELECT gpu_uuid, SUM(memory) AS r FROM slice_gpus GROUP BY gpu_uuid) s"
            " ON s.gpu_uuid = g.uuid WHERE s.r > g.memory_total"
        ).fetchall()
        assert over == []
        assert db.execute("SELECT count(*) FROM slices").fetchone()[0] == 0


@pytest.mark.parametrize("where", ["/", "folder", "folder/"])
def test_a_ledger_path_that_is_a_folder_is_one_sentence(tmp_path: Path, where: str) -> None:
    (tmp_path / "folder").mkdir()
    path = where if where == "/" else str(tmp_path / where)
    with pytest.raises(LedgerError, match="is a folder; point JUPYTER_VGPU_LEDGER"):
        make_ledger(path)  # type: ignore[arg-type]


def test_a_ledger_path_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(LedgerError, match="Cannot create the ledger folder"):
        make_ledger(blocker / "ledger.sqlite")
