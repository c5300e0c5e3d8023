"""On simulated GPUs, what a slice's process says its frameworks hold reaches the node broker
(issue 42, bursts between two users): the broker lists it as that process's memory, as a real
driver would, so every user's server and `jupyter vgpu status` see it. Before, the broker's
simulated GPUs listed no process at all: a kernel's TensorFlow use stayed in its user's own folder,
and its server never saw it burst. In-process broker, no system users."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.gpus.simulated_use import use_folder
from jupyter_vgpu.ledger.sqlite import SQLiteLedger
from jupyter_vgpu.slices import Actor
from jupyter_vgpu.units import GiB

from .conftest import wait_until

pytest.importorskip("jupyterhub")

from jupyter_vgpu.hub.broker import Broker, Caller, PolicySource

ALICE = Caller(pid=os.getpid(), uid=6101, gid=6101, user="alice", groups=(), admin=False)
BOB = Caller(pid=os.getpid(), uid=6102, gid=6102, user="bob", groups=(), admin=False)


def node(folder: Path, simulate: str) -> Broker:
    inventory = Inventory(simulate, use_folder=use_folder(folder) if simulate else None)
    ledger = SQLiteLedger(folder / "ledger.sqlite", inventory, context_allowance=0, actor=Actor("root", 0, admin=True))
    return Broker(ledger, PolicySource(None), simulate=simulate)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    made = node(tmp_path, "1x4GiB")
    try:
        yield made
    finally:
        made.ledger.close()


def ask(broker: Broker, caller: Caller, op: str, **args: Any) -> dict[str, Any]:
    return broker.handle(caller, {"op": op, "args": args})


def processes(broker: Broker, caller: Caller) -> list[Any]:
    time.sleep(0.6)  # the simulated driver reads the processes' figures again twice a second
    (gpu,) = broker.snapshot_for(caller).gpus
    return list(gpu.processes)


def test_a_slices_process_says_what_it_holds_and_every_user_sees_it(broker: Broker) -> None:
    uuid = broker.ledger.inventory.snapshot().gpus[0].uuid
    assert ask(broker, ALICE, "info")["result"]["simulated_use"] is True
    nobody = ask(broker, ALICE, "simulated_use", used={uuid: GiB})
    assert not nobody["ok"] and nobody["error"] == "NotPermitted", nobody  # no slice of hers yet
    held = ask(broker, ALICE, "reserve_now", request={"fraction": 0.25, "limit_fraction": 0.75},
               holder={"kind": "kernel", "name": "k-alice", "labels": {"path": "private.ipynb"}})  # fmt: skip
    assert held["ok"], held
    sid = held["result"]["id"]
    told = ask(broker, ALICE, "simulated_use", used={uuid: 2 * GiB + GiB // 2}, utilization={uuid: 40})
    assert told == {"ok": True, "result": True}, told
    (mine,) = processes(broker, ALICE)
    assert (mine.pid, mine.used, mine.slice_id) == (os.getpid(), 2 * GiB + GiB // 2, sid)
    (theirs,) = processes(broker, BOB)  # bob sees the memory on the GPU, not the process's pid
    assert (theirs.pid, theirs.used, theirs.slice_id) == (0, 2 * GiB + GiB // 2, sid)
    assert ask(broker, ALICE, "simulated_use", used={uuid: 0})["ok"]
    (given_back,) = processes(broker, ALICE)
    assert given_back.used == 0


def test_a_child_of_the_holder_may_say_it_and_its_figure_goes_when_it_ends(broker: Broker) -> None:
    """A `jupyter vgpu run` command's program is a child of the process that holds the slice."""
    uuid = broker.ledger.inventory.snapshot().gpus[0].uuid
    assert ask(broker, ALICE, "reserve_now", request={"fraction": 0.25}, holder={"kind": "command", "name": "job"})["ok"]
    child = subprocess.Popen(["sleep", "60"])
    try:
        as_child = Caller(pid=child.pid, uid=ALICE.uid, gid=ALICE.gid, user="alice", groups=(), admin=False)
        assert ask(broker, as_child, "simulated_use", used={uuid: GiB // 2})["ok"]
        assert [(p.pid, p.used) for p in processes(broker, ALICE)] == [(child.pid, GiB // 2)]
    finally:
        child.kill()
        child.wait()
    assert processes(broker, ALICE) == []  # ended: its figure is gone with it


def test_what_may_not_be_said(broker: Broker, tmp_path: Path) -> None:
    uuid = broker.ledger.inventory.snapshot().gpus[0].uuid
    assert ask(broker, ALICE, "reserve_now", request={"fraction": 0.25}, holder={"kind": "command", "name": "job"})["ok"]
    for used, words in [
        ({uuid: 5 * GiB}, "is not a use of GPU"),  # more than the GPU has
        ({uuid: -1}, "is not a use of GPU"),
        ({uuid: True}, "is not a use of GPU"),
        ({"GPU-not-here": 1}, "is not one of the broker's simulated GPUs"),
        ([uuid], "takes used and utilization"),
    ]:
        answer = ask(broker, ALICE, "simulated_use", used=used)
        assert not answer["ok"] and words in answer["message"], (used, answer)
    # bob holds no slice: he cannot put a figure on the GPU, not even for alice's process
    answer = ask(broker, BOB, "simulated_use", used={uuid: GiB})
    assert not answer["ok"] and answer["error"] == "NotPermitted", answer
    assert processes(broker, ALICE) == []
    real = node(tmp_path / "real", "")
    try:  # a broker on real GPUs: their driver says what each process holds
        answer = ask(real, ALICE, "simulated_use", used={uuid: GiB})
        assert not answer["ok"] and "not simulated" in answer["message"], answer
        assert ask(real, ALICE, "info")["result"]["simulated_use"] is False
    finally:
        real.ledger.close()


def test_the_broker_command_reads_the_processes_figures_beside_its_ledger(tmp_path: Path) -> None:
    from jupyter_vgpu.config import VGPU
    from jupyter_vgpu.hub.service import open_broker

    opened = open_broker(VGPU(simulate="1x4GiB"), ledger_path=tmp_path / "node" / "ledger.sqlite", policy=None)
    try:
        assert opened.ledger.inventory.use_folder == tmp_path / "node" / "simulated-use"
    finally:
        opened.ledger.close()


CHILD = """
import os, time
from jupyter_vgpu.kernel.simulated import _broker, tell_broker
gpu = os.environ["JUPYTER_VGPU_GPUS"]
print(os.environ.get("JUPYTER_VGPU_SIMULATE"), tell_broker(_broker(), {gpu: 3 << 29}, {gpu: 10})[1], flush=True)
time.sleep(60)
"""


def test_a_command_on_a_brokers_simulated_gpus_knows_them_and_tells_the_broker_what_it_holds(
    broker: Broker, tmp_path: Path
) -> None:
    """The user's own settings name no simulation (a broker started on its own, docs/hub.md):
    the slice's process still learns that its GPUs are the broker's simulated ones, so its
    frameworks' use counts (kernel.simulated). Before, `jupyter vgpu run` and the provisioner gave
    it the user's own JUPYTER_VGPU_SIMULATE: none, and nothing it held was ever seen."""
    import sys
    import threading

    from jupyter_vgpu.hub.listener import BrokerServer

    path = tmp_path / "sock" / "broker.sock"
    path.parent.mkdir(mode=0o755)
    server = BrokerServer(path, broker)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU")}
    env.update(JUPYTER_VGPU_BROKER=str(path), JUPYTER_VGPU_LEDGER=str(tmp_path / "mine" / "ledger.sqlite"))
    command = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/4", "--", sys.executable, "-c", CHILD],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert command.stdout is not None
        line = command.stdout.readline().split()
        assert line == ["1x4GiB", "True"], (line, command.stderr.read() if command.poll() is not None else "")
        (held,) = broker.ledger.slices()
        me = Caller(pid=os.getpid(), uid=os.getuid(), gid=os.getgid(), user="me", groups=(), admin=False)
        assert [(p.used, p.slice_id) for p in processes(broker, me)] == [(3 << 29, held.id)]
    finally:
        command.terminate()
        _, err = command.communicate(timeout=30)
        server.shutdown()
        server.server_close()
    assert "[SIMULATED GPUs, not real hardware]" in err, err


def test_a_process_stops_telling_only_a_broker_that_cannot_take_it() -> None:
    """An older broker (it does not know the request) or one on real GPUs: the process stops
    asking. A broker not reached, or one that does not (yet) see the process as its slice's
    holder: asked again at the next look."""
    from jupyter_vgpu.errors import InvalidRequest, NotPermitted
    from jupyter_vgpu.kernel.simulated import tell_broker
    from jupyter_vgpu.ledger.broker_client import NoAnswer

    class Refusing:
        def __init__(self, error: Exception | None) -> None:
            self.error = error

        def call(self, op: str, **args: Any) -> Any:
            assert op == "simulated_use" and set(args) == {"used", "utilization"}
            if self.error is not None:
                raise self.error
            return True

    told = Refusing(None)
    assert tell_broker(told, {"GPU-x": 1}, {"GPU-x": 0}) == (told, True)
    for error in (NoAnswer("gone"), NotPermitted("not yours yet")):
        kept = Refusing(error)
        assert tell_broker(kept, {"GPU-x": 1}, {"GPU-x": 0}) == (kept, False)
    assert tell_broker(Refusing(InvalidRequest("unknown")), {"GPU-x": 1}, {"GPU-x": 0}) == (None, False)


def test_a_figure_is_taken_for_the_slices_own_gpus_only_and_goes_when_the_slice_ends(tmp_path: Path) -> None:
    """Hardening round five, M4: a process of bob's filled a GPU of no slice of his with 16 GiB
    "used by processes without a slice", and a child that outlived his kernel kept its figure;
    alice was refused there."""
    two = node(tmp_path, "2x4GiB")
    try:
        gpus = [g.uuid for g in two.ledger.inventory.snapshot().gpus]
        held = ask(two, BOB, "reserve_now", request={"fraction": 0.25, "gpu": "0"}, holder={"kind": "kernel", "name": "k-bob"})
        assert held["ok"], held
        sid = held["result"]["id"]
        elsewhere = ask(two, BOB, "simulated_use", used={gpus[1]: 4 * GiB})
        assert not elsewhere["ok"] and elsewhere["error"] == "NotPermitted", elsewhere
        assert elsewhere["message"] == f"GPU 1 is not a GPU of your slice {sid} (GPU 0); its processes hold memory on its GPUs only."
        assert ask(two, BOB, "simulated_use", used={gpus[0]: GiB, gpus[1]: 0})["ok"]  # none elsewhere is no figure there
        def on() -> dict[str, list[int | None]]:  # the simulated driver reads the figures again twice a second
            return {g.uuid: [p.used for p in g.processes] for g in two.snapshot_for(ALICE).gpus}

        wait_until(lambda: on() == {gpus[0]: [GiB], gpus[1]: []}, what=f"bob's figure on GPU 0 only ({on()})")
        # His slice ends; his process (this one) lives on: its figure goes with the slice.
        assert ask(two, BOB, "release", slice_id=sid)["ok"]
        wait_until(lambda: on() == {gpus[0]: [], gpus[1]: []}, what="bob's figure gone with his slice")
        assert not ask(two, BOB, "simulated_use", used={gpus[0]: GiB})["ok"]  # and it says nothing more
    finally:
        two.ledger.close()


def test_one_users_many_reporting_processes_never_hide_another_users_figure(broker: Broker) -> None:
    """Hardening round five, L-1: 260 live processes of bob's that said what they hold (the folder
    is read 256 files at a time, in name order) hid alice's figure from every view."""
    from jupyter_vgpu.gpus.simulated_use import MAX_FILES, write_use

    uuid = broker.ledger.inventory.snapshot().gpus[0].uuid
    folder = broker.ledger.inventory.use_folder
    assert folder is not None
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(MAX_FILES + 4)]
    alices = subprocess.Popen(["sleep", "600"])  # started last: its pid's name sorts after bob's
    try:
        for sleeper in sleepers:  # what the broker wrote for each of bob's processes
            write_use(folder, {uuid: 1 << 20}, {uuid: 0}, pid=sleeper.pid, uid=BOB.uid)
        alice = Caller(pid=alices.pid, uid=ALICE.uid, gid=ALICE.gid, user="alice", groups=(), admin=False)
        assert ask(broker, alice, "reserve_now", request={"fraction": 0.25}, holder={"kind": "kernel", "name": "k-alice"})["ok"]
        assert ask(broker, alice, "simulated_use", used={uuid: GiB})["ok"]
        seen = {p.pid: p.used for p in processes(broker, ALICE)}
        assert seen.get(alices.pid) == GiB, sorted(seen)[-3:]
    finally:
        for process in [*sleepers, alices]:
            process.kill()
            process.wait()
