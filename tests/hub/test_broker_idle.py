"""What users' servers tell the node broker of their kernels' idleness (issue 48, item 3: the admin
page's idle time): only for the caller's own slices, kept in memory, forgotten when the slice ends
or the server stops saying it, and listed to root and the broker's admins (an exporter beside the
broker) and to each user for their own slices. In-process broker, no system users (the real users,
server and page: tests/hub/test_idle_reclaim_users.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger.sqlite import SQLiteLedger
from jupyter_vgpu.metrics.node import NodeSampler, idle_times_of
from jupyter_vgpu.slices import Actor
from jupyter_vgpu.slices.reports import IDLE_STALE_SECONDS

pytest.importorskip("jupyterhub")

from jupyter_vgpu.hub.broker import Broker, Caller, PolicySource

ALICE = Caller(pid=os.getpid(), uid=6101, gid=6101, user="alice", groups=(), admin=False)
BOB = Caller(pid=os.getpid(), uid=6102, gid=6102, user="bob", groups=(), admin=False)
ROOT = Caller(pid=os.getpid(), uid=0, gid=0, user="root", groups=(), admin=True)


def ask(broker: Broker, caller: Caller, op: str, **args: Any) -> dict[str, Any]:
    return broker.handle(caller, {"op": op, "args": args})


def test_a_user_says_only_their_own_kernels_idleness_and_it_goes_with_the_slice(tmp_path: Path) -> None:
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"), context_allowance=0, actor=Actor("root", 0, admin=True))
    broker = Broker(ledger, PolicySource(None), simulate="1x16GiB")
    try:
        held = {}
        for who in (ALICE, BOB):
            answer = ask(broker, who, "reserve_now", request={"fraction": 0.25}, holder={"kind": "kernel", "name": f"k-{who.user}"})
            assert answer["ok"], answer
            held[who.user] = answer["result"]["id"]
        alices, bobs = held["alice"], held["bob"]
        since = time.time() - 300
        assert ask(broker, ALICE, "idle", slice_id=alices, since=since) == {"ok": True, "result": True}
        assert ask(broker, BOB, "idle", slice_id=bobs, since=None)["ok"]  # busy now

        refused = ask(broker, BOB, "idle", slice_id=alices, since=time.time())
        assert not refused["ok"] and refused["error"] == "NotPermitted", refused
        assert refused["message"] == f"Slice {alices} is not yours: only its owner's server says whether its kernel is idle."
        assert not ask(broker, ROOT, "idle", slice_id=alices, since=None)["ok"]  # an admin's server judges only its own kernels
        assert ask(broker, ALICE, "idle", slice_id="000000000000", since=None)["error"] == "SliceNotFound"
        for bad in ("yesterday", True, -1, float("inf"), float("nan"), 10**400):
            answer = ask(broker, ALICE, "idle", slice_id=alices, since=bad)
            assert answer["error"] == "InvalidRequest", answer
        assert ask(broker, ALICE, "idle", slice_id=alices, since=time.time() + 3600)["ok"]  # a clock ahead: idle from now
        assert ask(broker, ALICE, "idle", slice_id=alices, since=since)["ok"]

        everyone = ask(broker, ROOT, "idle_times")["result"]
        assert set(everyone) == {alices, bobs} and everyone[alices] == pytest.approx(300, abs=5) and everyone[bobs] == 0
        assert set(ask(broker, ALICE, "idle_times")["result"]) == {alices}  # her own only
        assert set(ask(broker, BOB, "idle_times")["result"]) == {bobs}

        # The broker's page reads them at each reading (its sampler's ``idle``).
        sampler = NodeSampler(ledger, idle=broker.idle_seconds)
        assert sampler.latest.idle[alices] == pytest.approx(300, abs=5) and sampler.latest.idle[bobs] == 0

        # The server stopped saying it: stale, then forgotten; a slice that ends: forgotten at once.
        later = time.time() + IDLE_STALE_SECONDS + 1
        assert broker.idle_seconds(ledger.slices(), now=later) == {}
        assert ask(broker, BOB, "release", slice_id=bobs)["ok"]
        broker.forget_idle()
        assert set(broker._idle) == {alices}
        assert set(ask(broker, ROOT, "idle_times")["result"]) == {alices}
    finally:
        ledger.close()


def test_an_exporter_beside_the_broker_asks_it_for_the_readings_slices(tmp_path: Path) -> None:
    """A node page over a broker's ledger asks its ``idle_times``: only the reading's slices; none
    when the broker does not know the request (an older broker). (A ledger of one's own: the
    servers' idle files, tests/test_exporter.py.)"""

    class Beside:
        path = tmp_path / "ledger.sqlite"

        def __init__(self, answer: Any) -> None:
            self.answer = answer

        def idle_times(self) -> dict[str, float]:
            if isinstance(self.answer, Exception):
                raise self.answer
            return dict(self.answer)

    class One:
        def __init__(self, sid: str, kind: str = "kernel") -> None:
            self.id, self.holder_kind, self.hidden = sid, kind, False

    from jupyter_vgpu.errors import InvalidRequest

    live = [One("aaaaaaaaaaaa")]
    assert idle_times_of(Beside({"aaaaaaaaaaaa": 12.0, "bbbbbbbbbbbb": 3.0}))(live, time.time()) == {"aaaaaaaaaaaa": 12.0}  # type: ignore[arg-type]
    older = Beside(InvalidRequest("The broker does not know the request 'idle_times'; upgrade the client or the broker."))
    assert idle_times_of(older)(live, time.time()) == {}  # type: ignore[arg-type]
