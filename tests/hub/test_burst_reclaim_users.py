"""Bursts given back between two real users on one node broker (issue 42, "Done when"): alice's
elastic kernel (1/4 GPU, up to 3/4) bursts above its request with TensorFlow; bob's command, which
fits only with her burst given back, waits in line; her server gives her a notice that does not
name his command, then restarts her kernel (it keeps its slice, back at its request), and his
command gets in. When her kernel keeps within its request, bob cannot make her lose anything.

The burst terms are the hub policy's (issue 49, Major 1): alice starts her server with a day's
notice and "warn", and the policy's 15 s and "restart" for her apply all the same; she sees them
in `jupyter vgpu status` and `%vgpu`.

alice runs a real jupyter server as herself, backed by the root broker; bob runs `jupyter vgpu run`
as himself. On simulated GPUs a kernel's frameworks say what they hold, and the broker lists it
as the kernel's memory on its GPUs, as a real driver does. After every step alice's REST slices
and root's `jupyter vgpu status --json` (the broker's whole book) agree, and no GPU's reservations
exceed it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_vgpu.units import GiB

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, User, Users, world_dir
from .test_idle_reclaim_users import as_user_python

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

NOTICE = 15.0  # what the test checks during the notice (both views, bob still in line) fits in it on a loaded machine
ELASTIC = {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.75}
GRANTED = "GRANTED-" + "b0b"  # what bob's command prints (its command line holds the pieces apart)


@pytest.fixture
def small_broker(system_users: Users, broker: BrokerProcess) -> BrokerProcess:
    """The broker on one simulated 4 GiB GPU (each of alice's kernels books 1 GiB and may burst to
    3 GiB), with no per-user limits beyond three slices at once, and alice's burst terms."""
    broker.kill(signal.SIGTERM)
    broker.env["JUPYTER_VGPU_SIMULATE"] = "1x4GiB"
    policy = {"burst_reclaim_notice": NOTICE, "burst_reclaim_action": "restart"}
    broker.write_policy({"default": {"max_slices": 3}, "users": {system_users.alice.name: policy}})
    broker.start()
    return broker


class AlicesServer:
    """alice's real jupyter server, backed by the broker, with an elastic kernelspec."""

    def __init__(self, alice: User, broker: BrokerProcess) -> None:
        from jupyter_process import isolated_env, start_jupyter, write_sliced_kernelspec

        self.home = world_dir("vgpu-alice-server-")
        for name in ("root", "config", "data", "runtime", "ipython", "vgpu"):
            (self.home / name).mkdir()
        write_sliced_kernelspec(self.home / "data", ELASTIC, display_name="Python 3 (1/4 GPU, up to 3/4)")
        python = as_user_python(self.home, alice.uid, alice.gid)
        subprocess.run(["chown", "-R", f"{alice.uid}:{alice.gid}", str(self.home)], check=True)
        env = isolated_env(self.home, JUPYTER_VGPU_BROKER=str(broker.socket), HOME=str(self.home), USER=alice.name)
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        self.server = start_jupyter(
            self.home, python=python, env=env,
            # her own settings would keep her burst a day and only warn: the hub policy's terms win
            args=["--VGPUServer.monitor_interval=0.2", "--VGPUServer.burst_reclaim_notice=86400", "--VGPUServer.burst_reclaim_action=warn"],
        )  # fmt: skip

    def api(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.server.api(method, path, body)
        assert status in (200, 201), (status, answer, self.server.log_tail())
        return answer

    def slices(self) -> dict[str, Any]:
        return dict(self.api("GET", "api/vgpu/slices"))

    def row(self, kernel_id: str) -> dict[str, Any] | None:
        return next((s for s in self.slices()["slices"] if s.get("kernel_id") == kernel_id), None)

    def burst_events(self) -> list[dict[str, Any]]:
        return [e for e in self.slices()["watchdog"]["events"] if e["action"] == "burst"]

    def kernel(self, kernel_id: str) -> Any:
        """A client of the kernel, as a notebook has (its connection file)."""
        from kernels import Kernel

        return Kernel.attach(str(self.home / "runtime" / f"kernel-{kernel_id}.json"))

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture
def alices_server(system_users: Users, small_broker: BrokerProcess) -> Iterator[AlicesServer]:
    server = AlicesServer(system_users.alice, small_broker)
    try:
        yield server
    finally:
        server.stop()


def bobs_env(bob: User, broker: BrokerProcess) -> dict[str, str]:
    env = bob.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # this checkout's code, as alice's server and the broker run
    return env


def bobs_command(bob: User, broker: BrokerProcess, share: str, *wait: str) -> subprocess.Popen[str]:
    """bob's `jupyter vgpu run -p SHARE [--wait N]`, a command that prints and exits."""
    code = f"print('{GRANTED[:8]}' + '{GRANTED[8:]}')"
    return bob.popen(
        JUPYTER_VGPU, "run", "-p", share, *wait, "--", sys.executable, "-c", code, env=bobs_env(bob, broker)
    )


def holds(gib: float) -> str:
    """A cell that holds ``gib`` GiB in TensorFlow (its use on simulated GPUs)."""
    return f"import tensorflow as tf\nx = tf.ones(({int(gib * GiB) // 4},), dtype=tf.float32)\nint(tf.size(x))"


def views(server: AlicesServer) -> dict[str, Any]:
    """alice's REST slices by holder (her kernels by id, others' by their hidden names), checked
    against root's `jupyter vgpu status --json` through the broker: the same slices with the same
    reservations, and no GPU's reservations beyond it. Her server's REST answers from its latest
    sample (every 0.2 s here), so a change of the last moment (bob's command just ended) is
    given one more sample or two to agree."""
    deadline = time.monotonic() + 5
    while True:
        data = server.slices()
        status = subprocess.run(
            [sys.executable, "-m", "jupyter_vgpu.cli", "status", "--json"], capture_output=True, text=True, timeout=60
        )  # as root, with JUPYTER_VGPU_BROKER: the broker's whole book
        assert status.returncode == 0, status.stderr
        listed = json.loads(status.stdout)
        for gpu in listed["gpus"]:
            assert gpu["memory_reserved"] <= gpu["memory_total"] - gpu["memory_reserved_by_driver"], gpu
        rest = {s["id"]: s["memory_reserved"] for s in data["slices"]}
        broker = {s["id"]: s["memory_reserved"] for s in listed["slices"]}
        if rest == broker:
            return {s["kernel_id"] or s["id"]: s for s in data["slices"]}
        assert time.monotonic() < deadline, (rest, listed["slices"])
        time.sleep(0.2)


def wait_for(check: Any, *, timeout: float, what: str) -> Any:
    """What ``check`` returns once it is truthy."""
    from jupyter_process import wait_for as waited

    return waited(check, what, timeout)


def start_kernel(server: AlicesServer) -> str:
    from jupyter_process import KERNEL_NAME

    session = server.api(
        "POST", "api/sessions", {"path": "bursty.ipynb", "type": "notebook", "kernel": {"name": KERNEL_NAME}}
    )
    kernel_id = str(session["kernel"]["id"])
    wait_for(lambda: server.row(kernel_id), timeout=60, what="alice's kernel's slice")
    return kernel_id


def test_another_users_command_gets_in_when_alices_burst_is_given_back(
    system_users: Users, small_broker: BrokerProcess, alices_server: AlicesServer
) -> None:
    alice, bob = system_users.alice, system_users.bob
    server = alices_server
    kernel_id = start_kernel(server)
    kernel = server.kernel(kernel_id)
    command = None
    try:
        first_pid = kernel.pid
        outcome = kernel.run(holds(2.5))  # 1.5 GiB above her 1 GiB request
        assert outcome.ok, outcome.error or outcome.stderr

        def bursting() -> Any:
            found = server.row(kernel_id)
            return found if found and (found["memory_burst"] or 0) >= GiB else None

        wait_for(bursting, timeout=30, what="alice's burst in her server's row")
        before = views(server)
        mine = before[kernel_id]
        assert mine["memory_reserved"] == GiB and mine["burst_notice"] is None, mine
        assert mine["owner"] == alice.name
        # She sees the terms she holds her burst on, and whose they are, where she looks.
        theirs = "15 s (user alice)".replace("alice", alice.name)
        sheet = kernel.run("%vgpu").displays[0]["text/plain"]
        assert "Your limits on this node (the hub policy" in sheet and theirs in sheet, sheet
        shown = alice.run(JUPYTER_VGPU, "status", env=bobs_env(alice, small_broker))
        assert shown.returncode == 0 and "notice before a burst someone needs is taken back" in shown.stdout, shown
        assert theirs in shown.stdout and "restart: the kernel is restarted" in shown.stdout, shown.stdout

        command = bobs_command(bob, small_broker, "1/2", "--wait", "120")  # 2 GiB: in only with her burst back

        def noticed() -> Any:
            found = server.row(kernel_id)
            return found if found and found["burst_notice"] else None

        notice = wait_for(noticed, timeout=30, what="the burst notice for bob's request")["burst_notice"]
        assert notice["action"] == "restart" and 0 < notice["seconds_left"] <= NOTICE and notice["burst"] >= GiB, notice
        words = notice["for"]
        assert words == "1 waiting in line (first: another user's command, 1/2 GPU)", words
        assert GRANTED[:8] not in words and "python" not in words and bob.name not in words
        during = views(server)
        assert len(during) == 1  # bob waits in line: no slice of his yet
        assert command.poll() is None

        assert f"15 s notice, then the kernel is restarted (it keeps its slice, back at its request) (the hub policy: user {alice.name})" in server.server.log_text()
        (event,) = wait_for(server.burst_events, timeout=60, what="the restart that gives the burst back")
        assert event["ok"] and event["kernel_id"] == kernel_id and event["path"] == "bursty.ipynb", event
        assert "restarted to give its burst back" in event["message"], event
        assert "another user's command" in event["message"] and GRANTED[:8] not in event["message"], event
        out, err = command.communicate(timeout=90)
        assert command.returncode == 0 and GRANTED in out, (out, err)

        after = views(server)
        assert after[kernel_id]["id"] == mine["id"]  # she kept her slice
        assert after[kernel_id]["memory_reserved"] == GiB and after[kernel_id]["burst_notice"] is None
        assert (after[kernel_id]["memory_burst"] or 0) == 0
        kernel.stop()
        kernel = server.kernel(kernel_id)
        assert kernel.pid != first_pid  # restarted
        assert kernel.eval("'x' in globals()") is False
        assert [e for e in server.burst_events()] == [event]  # once
    finally:
        kernel.stop()
        if command is not None and command.poll() is None:
            command.kill()


def test_bob_cannot_take_anything_from_alices_kernel_within_its_request(
    system_users: Users, small_broker: BrokerProcess, alices_server: AlicesServer
) -> None:
    bob = system_users.bob
    server = alices_server
    kernel_id = start_kernel(server)
    kernel = server.kernel(kernel_id)
    waiting = None
    try:
        first_pid = kernel.pid
        outcome = kernel.run(holds(0.75))  # within her 1 GiB request
        assert outcome.ok, outcome.error or outcome.stderr

        def using() -> Any:
            found = server.row(kernel_id)
            return found if found and (found["memory_used"] or 0) >= GiB // 2 else None

        mine = wait_for(using, timeout=30, what="alice's use in her server's row")
        assert (mine["memory_burst"] or 0) == 0 and mine["burst_notice"] is None, mine
        views(server)

        # 4/5 of the GPU (3.2 GiB; 3 GiB are free beside her request): no burst keeps it out, so
        # without --wait it is refused at once, and nothing of hers is asked back.
        started = time.monotonic()
        refused = bob.run(JUPYTER_VGPU, "run", "-p", "4/5", "--", "true", env=bobs_env(bob, small_broker))
        assert refused.returncode == 75, refused.stderr
        assert time.monotonic() - started < 30
        assert "another user's kernel" in refused.stderr and "bursty" not in refused.stderr, refused.stderr

        # With --wait it waits in line for its whole wait and is refused; her kernel is never touched.
        waiting = bobs_command(bob, small_broker, "4/5", "--wait", "8")
        wait_for(lambda: server.slices()["waiting"], timeout=30, what="bob's request in line")
        deadline = time.monotonic() + 8
        while waiting.poll() is None and time.monotonic() < deadline + 30:
            row = server.row(kernel_id)
            assert row is not None and row["burst_notice"] is None and row["idle_notice"] is None, row
            time.sleep(0.25)
        out, err = waiting.communicate(timeout=30)
        assert waiting.returncode == 75 and GRANTED not in out, (out, err)
        assert not server.burst_events()
        after = views(server)
        assert after[kernel_id]["id"] == mine["id"] and after[kernel_id]["memory_reserved"] == GiB
        assert len(after) == 1  # bob holds nothing
        assert kernel.pid == first_pid and kernel.eval("int(tf.size(x))") == int(0.75 * GiB) // 4  # not restarted
    finally:
        kernel.stop()
        if waiting is not None and waiting.poll() is None:
            waiting.kill()


#: As bob: a slice of 1/4 GPU held by this process, then `%vgpu resize 3/4`'s ledger step (the
#: resize that waits in line for bursts given back), each answer printed as JSON with its time.
RESIZE_AS_BOB = """
import json, time
from jupyter_vgpu.errors import VGPUError
from jupyter_vgpu.kernel.resize import resize_waiting
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, parse_share
ledger = open_ledger()
mine = ledger.reserve_now(parse_share("1/4"), Holder.command("bob's holder"))
print(json.dumps({"ok": mine.id}), flush=True)
started = time.monotonic()
try:
    print(json.dumps({"ok": resize_waiting(ledger, mine.id, parse_share("3/4")).request.describe()}), flush=True)
except VGPUError as error:
    print(json.dumps({"error": str(error), "seconds": time.monotonic() - started}), flush=True)
print(json.dumps({"after": ledger.get(mine.id).request.describe(), "waiting": len(ledger.waiting())}), flush=True)
"""


def test_a_request_over_bobs_quota_is_refused_at_once_and_never_moves_alices_burst(
    system_users: Users, small_broker: BrokerProcess, alices_server: AlicesServer
) -> None:
    """Hardening round five, H1: bob's caps are GPU shares, his requests sizes (and the reverse
    for a resize's wait): each is judged before it takes a place in line, so none of them gives
    alice's bursting kernel a notice, let alone a restart."""
    bob = system_users.bob
    small_broker.write_policy(
        {"default": {"max_slices": 3}, "users": {bob.name: {"max_total": "1/2", "max_limit": "1/2"}}}
    )
    small_broker.kill(signal.SIGTERM)
    small_broker.start()
    server = alices_server
    kernel_id = start_kernel(server)
    kernel = server.kernel(kernel_id)
    try:
        first_pid = kernel.pid
        outcome = kernel.run(holds(2.5))  # 1.5 GiB above her 1 GiB request
        assert outcome.ok, outcome.error or outcome.stderr
        wait_for(lambda: (server.row(kernel_id) or {}).get("memory_burst", 0) >= GiB, timeout=30, what="alice's burst")
        env = bobs_env(bob, small_broker)
        # Each would fit only with her burst back, so it would wait in line and ask it back.
        refusals = {
            # 3 GiB of the 4 GiB GPU is 3/4: over his 1/2 in total wherever it goes
            "total": (["-m", "3GiB", "--gpu", "0", "--wait", "30"], "at most 1/2 GPU in total"),
            # a limit of 2.5 GiB is 5/8 of the GPU: over his max_limit of 1/2
            "limit": (["-m", "2GiB", "--limit", "2.5GiB", "--wait", "30"], "may burst to at most 1/2 GPU per kernel"),
        }
        for what, (options, words) in refusals.items():
            started = time.monotonic()
            refused = bob.run(JUPYTER_VGPU, "run", *options, "--", "true", env=env)
            assert refused.returncode != 0 and words in refused.stderr, (what, refused.stderr)
            assert "(user " + bob.name + ")" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
            assert time.monotonic() - started < NOTICE, what  # at once, not after a notice and a restart

        # A resize to 3/4 beside alice's burst would wait in line for it; over his 1/2 in total, it
        # is refused before the ledger changes or anything waits.
        script = bob.popen(PYTHON, "-c", RESIZE_AS_BOB, env=env)
        out, err = script.communicate(timeout=120)
        answers = [json.loads(line) for line in out.splitlines()]
        assert "ok" in answers[0], (out, err)
        assert answers[1]["error"] == (
            f"{bob.name}: at most 1/2 GPU in total (user {bob.name}); already holds 0 GPU and asked for 3/4 GPU."
        ), answers
        assert answers[1]["seconds"] < NOTICE, answers
        assert answers[2] == {"after": "1/4 GPU", "waiting": 0}, answers

        # alice's server has sampled since: no notice, no event, her kernel untouched, nobody in line.
        after = time.time()
        wait_for(
            lambda: server.slices()["taken_at"] > after + 0.5,
            timeout=30,
            what="alice's server's samples after bob's asks",
        )
        mine = views(server)[kernel_id]
        assert mine["burst_notice"] is None and (mine["memory_burst"] or 0) >= GiB, mine
        assert not server.burst_events() and not server.slices()["waiting"]
        assert kernel.pid == first_pid
    finally:
        kernel.stop()
