"""Hardening round five on an in-process broker with a policy (no system users: callers are
named by the uid and pid a socket would give; the processes are real)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.gpus.simulated_use import use_folder
from jupyter_vgpu.ledger.sqlite import SQLiteLedger
from jupyter_vgpu.slices import Actor

pytest.importorskip("jupyterhub")

from jupyter_vgpu.hub.broker import Broker, Caller, PolicySource


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"users": {"bob": {"max_total": "1/2"}}}))
    inventory = Inventory("1x16GiB", use_folder=use_folder(tmp_path))
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", inventory, context_allowance=0, actor=Actor("root", 0, admin=True))
    made = Broker(ledger, PolicySource(policy), simulate="1x16GiB")
    try:
        yield made
    finally:
        ledger.close()


def bob(pid: int) -> Caller:
    return Caller(pid=pid, uid=6102, gid=6102, user="bob", groups=(), admin=False)


def ask(broker: Broker, caller: Caller, op: str, **args: Any) -> dict[str, Any]:
    return broker.handle(caller, {"op": op, "args": args})


def test_a_place_in_line_whose_process_just_ended_is_not_counted_against_the_total(broker: Broker) -> None:
    """L-4: bob's waiting command was killed; before the reaper took its place out, his next ask
    was refused as if he "already holds" what that place asked for."""
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        placed = ask(broker, bob(waiting.pid), "enqueue", request={"fraction": 0.5}, holder={"kind": "command", "name": "train"})
        assert placed["ok"], placed
        over = ask(broker, bob(os.getpid()), "reserve_now", request={"fraction": 0.25}, holder={"kind": "command", "name": "x"})
        assert over["message"] == (  # counted while it lives, and said as a place in line
            "bob: at most 1/2 GPU in total (user bob); already holds 0 GPU and waits in line for 1/2 GPU and asked for 1/4 GPU."
        ), over
    finally:
        waiting.kill()
        waiting.wait()
    assert [w.ticket for w in broker.ledger.waiting()] == [placed["result"]]  # not reaped yet
    granted = ask(broker, bob(os.getpid()), "reserve_now", request={"fraction": 0.5}, holder={"kind": "command", "name": "y"})
    assert granted["ok"], granted
