"""The hub policy's max_limit as two real users meet it through the broker (issue 42, "Admins"):
one group may burst to 1/2 GPU, the other not at all; quotas count requests, never limits."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from jupyter_vgpu.ledger import open_ledger

from .conftest import PYTHON, BrokerProcess, User, Users, student_policy

pytestmark = pytest.mark.hub

#: As a user: each step on the broker, printed as {"ok": ...} or {"error": class, "message": ...}.
STEPS = """
import json, sys, time
from jupyter_vgpu.errors import VGPUError
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, parse_share
ledger = open_ledger()
def step(do):
    try:
        print(json.dumps({"ok": do()}), flush=True)
    except VGPUError as error:
        print(json.dumps({"error": type(error).__name__, "message": str(error)}), flush=True)
for number, (kind, share, limit) in enumerate(json.loads(sys.argv[1])):
    request = parse_share(share, limit)
    if kind == "reserve":
        step(lambda: ledger.reserve_now(request, Holder.kernel("k-%d" % number, labels={"path": "n.ipynb"})).id)
    elif kind == "enqueue":
        step(lambda: ledger.enqueue(request, Holder.command("waits")).number)
    elif kind == "resize":
        mine = [s for s in ledger.slices() if not s.request.elastic][0]
        step(lambda: ledger.resize(mine.id, request).request.describe())
print("done", flush=True)
time.sleep(120)
"""


def steps(user: User, broker: BrokerProcess, *asked: tuple[str, str, str | None]) -> tuple[subprocess.Popen[str], list[dict]]:
    """Run ``asked`` as ``user`` in one process that keeps what it got until it is killed."""
    env = user.env(JUPYTER_VGPU_BROKER=str(broker.socket), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    proc = user.popen(PYTHON, "-c", STEPS, json.dumps(asked), env=env)
    assert proc.stdout is not None
    answers = []
    for line in proc.stdout:
        if line.strip() == "done":
            return proc, answers
        answers.append(json.loads(line))
    proc.kill()
    raise AssertionError(proc.stderr.read() if proc.stderr else "no answers")


def test_max_limit_caps_each_users_limit_and_quotas_count_requests(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    policy = student_policy(system_users)  # students: 1/4 per kernel, 1/2 in total; staff: 1 per kernel
    policy["groups"][system_users.students]["max_limit"] = "1/2"
    policy["groups"][system_users.staff]["max_limit"] = False
    broker.write_policy(policy)
    broker.kill()
    broker.start()
    held = []
    try:
        # alice: two slices of 1/4 GPU, up to 1/2 fill her 1/2 in total (their limits add up to a whole GPU)
        proc, answers = steps(alice, broker, ("reserve", "1/4", "1/2"), ("reserve", "1/4", "1/2"), ("reserve", "1/8", None))
        held.append(proc)
        assert [set(a) for a in answers[:2]] == [{"ok"}, {"ok"}], answers
        assert answers[2]["message"] == (
            f"{alice.name}: at most 1/2 GPU in total (group {system_users.students}); already holds 1/2 GPU and asked for 1/8 GPU."
        )
        alices = {s.id for s in open_ledger().slices()}
        assert len(alices) == 2 and all(s.request.limit_fraction == 0.5 for s in open_ledger().slices())

        # bob (staff: max_limit false) may not burst at all: refused in one sentence, nothing booked; a fixed 1/4 is his
        no_burst = (
            f"{bob.name}: may not burst beyond a request (group {system_users.staff}: max_limit 0); "
            "asked for 1/4 GPU, up to 1/2; ask without a limit."
        )
        proc, answers = steps(bob, broker, ("reserve", "1/4", "1/2"), ("reserve", "1/4", None), ("enqueue", "1/4", "1/2"),
                              ("resize", "1/4", "1/2"))
        held.append(proc)
        assert answers[0] == {"error": "NotPermitted", "message": no_burst}
        assert "ok" in answers[1]
        assert answers[2] == {"error": "NotPermitted", "message": no_burst}  # a place in line: the same
        assert answers[3] == {"error": "NotPermitted", "message": no_burst}  # a resize: the same
        slices = {s.id: s for s in open_ledger().slices()}
        (bobs,) = [s for s in slices.values() if s.owner == bob.name]
        assert set(slices) == alices | {bobs.id} and not bobs.request.elastic  # the resize changed nothing
        assert open_ledger().waiting() == []
    finally:
        for proc in held:
            proc.kill()


def test_a_limit_over_max_limit_is_refused_for_every_way_of_asking(system_users: Users, broker: BrokerProcess) -> None:
    alice = system_users.alice
    policy = student_policy(system_users)
    policy["groups"][system_users.students]["max_limit"] = "1/2"
    policy["users"] = {system_users.bob.name: {"max_limit": "6GiB"}}  # a size: judged once the slice is placed
    broker.write_policy(policy)
    broker.kill()
    broker.start()
    bob = system_users.bob
    bobs, answers = steps(bob, broker, ("reserve", "1/4", "1/2"), ("reserve", "1/4", "3/8"))
    try:
        assert answers[0] == {"error": "NotPermitted", "message": (
            f"{bob.name}: may burst to at most 6.0 GiB per kernel (user {bob.name}); asked for 1/4 GPU, up to 1/2 (a limit of 8.0 GiB)."
        )}
        assert "ok" in answers[1]  # 6 GiB of the 16 GiB GPU
        assert [s.request.limit_fraction for s in open_ledger().slices()] == [0.375]  # the refused one was given back
    finally:
        bobs.kill()
        bobs.wait()
    over = f"{alice.name}: may burst to at most 1/2 GPU per kernel (group {system_users.students}); asked for 1/4 GPU, up to 3/4."
    proc, answers = steps(alice, broker, ("reserve", "1/4", "3/4"), ("enqueue", "1/4", "3/4"), ("reserve", "1/4", None),
                          ("resize", "1/4", "3/4"), ("resize", "1/4", "1/2"))
    try:
        assert answers[:2] == [{"error": "NotPermitted", "message": over}] * 2
        assert "ok" in answers[2]
        assert answers[3] == {"error": "NotPermitted", "message": over}
        assert answers[4] == {"ok": "1/4 GPU, up to 1/2"}  # within the cap
        (only,) = [s for s in open_ledger().slices() if s.owner == alice.name]
        assert only.request.limit_fraction == 0.5 and open_ledger().waiting() == []
    finally:
        proc.kill()


def test_a_size_against_a_share_is_judged_before_it_is_placed_or_waits(system_users: Users, broker: BrokerProcess) -> None:
    """Hardening round five, H1: bob's cap is a GPU share, his requests sizes. Before, a place in
    line for 9 GiB was taken (asking other users' bursts and idle kernels back) and refused only once
    granted; a resize was judged after it had changed the slice (or waited for bursts)."""
    bob = system_users.bob
    policy = student_policy(system_users)
    policy["users"] = {bob.name: {"max_total": "1/2"}}
    broker.write_policy(policy)
    broker.kill()
    broker.start()
    over = f"{bob.name}: at most 1/2 GPU in total (user {bob.name}); already holds"
    proc, answers = steps(
        bob, broker, ("enqueue", "9GiB", None), ("reserve", "9GiB", None), ("reserve", "4GiB", None),
        ("enqueue", "5GiB", None), ("enqueue", "4GiB", None), ("resize", "3/4", None),
    )  # fmt: skip
    try:
        assert answers[0] == {"error": "NotPermitted", "message": f"{over} 0 GPU and asked for 9.0 GiB (9/16 GPU)."}
        assert answers[1] == answers[0]  # a slice now: refused before it is placed, as in line
        assert "ok" in answers[2]
        assert answers[3] == {"error": "NotPermitted", "message": f"{over} 1/4 GPU and asked for 5.0 GiB (5/16 GPU)."}
        assert "ok" in answers[4]  # within: 1/4 held and 1/4 in line
        # The resize: the whole new size beside his other slices (none); his place in line is not a slice.
        assert answers[5] == {"error": "NotPermitted", "message": f"{over} 0 GPU and asked for 3/4 GPU."}
        (held,) = [s for s in open_ledger().slices() if s.owner == bob.name]
        assert held.request.memory == 4 << 30  # unchanged
        assert [w.request.describe() for w in open_ledger().waiting()] == ["4.0 GiB"]  # only the one within
    finally:
        proc.kill()
