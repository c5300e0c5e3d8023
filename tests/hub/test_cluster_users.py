"""The cluster view between two Unix users (issue 48): bob's server reads the cluster from a real
Prometheus that scrapes two nodes, a hub node (the root broker, its exporter beside it as root,
alice's slice on it) and node-b (root's slice on it). Bob sees his own slice by name and
everyone else's only as booked memory: no user name, notebook or command of theirs reaches him.
With Prometheus down, the cluster is one sentence (503) and bob's node views work as before."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from exporter_process import listening, start_exporter
from prometheus_process import start_prometheus

from .conftest import JUPYTER_VGPU, BrokerProcess, Users, student_policy, wait_until
from .test_idle_reclaim_users import alices_server

pytestmark = pytest.mark.slow
GiB = 1024**3


def holding(user: Any, marker: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``user``'s command holding a quarter of a GPU until its stdin closes; its holder names ``marker``."""
    command = [JUPYTER_VGPU, "run", "-q", "-p", "1/4", "--", "sh", "-c", "read line", marker]
    return subprocess.Popen(user.command(*command) if user else command, env=env, stdin=subprocess.PIPE, text=True, cwd="/")


def test_bob_sees_his_slice_on_every_node_and_others_only_as_booked_memory(
    system_users: Users, broker: BrokerProcess, tmp_path: Path
) -> None:
    alice, bob = system_users.alice, system_users.bob
    began = time.monotonic()
    prometheus = start_prometheus(tmp_path / "prometheus")
    beside_broker = {**os.environ, "JUPYTER_VGPU_BROKER": str(broker.socket), "JUPYTER_VGPU_SIMULATE": "1x16GiB"}
    hub_node = listening(start_exporter(tmp_path / "hub", "hub-node", "1x16GiB", env=beside_broker))  # root, beside the broker
    node_b = listening(start_exporter(tmp_path / "b", "node-b", "2x8GiB@node-b", named=False))
    bob_env = bob.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    held = [
        holding(alice, "alices-notebook-marker", alice.env(JUPYTER_VGPU_BROKER=str(broker.socket))),
        holding(None, "roots-command-marker", node_b.env),
        holding(bob, "bobs-own-marker", bob_env),
    ]
    # The admin names the site's Prometheus in the hub policy: every user's server and command reads it.
    broker.write_policy({**student_policy(system_users), "prometheus_url": prometheus.url})
    wait_until(lambda: bob.run(JUPYTER_VGPU, "status", "--cluster", "--json", env=bob_env).returncode == 0, timeout=30, what="the policy's Prometheus")
    home, server = alices_server(bob, broker, [])
    try:
        prometheus.scrape("two-nodes", [hub_node.address, node_b.address])

        def cluster() -> tuple[int, Any, str]:
            status, body = server.api("GET", "api/vgpu/cluster")
            return status, body, json.dumps(body)

        def complete() -> Any:
            status, body, _ = cluster()
            assert status == 200, (body, server.log_tail())
            nodes = {n["hostname"]: n for n in body["nodes"]}
            booked = {h: [g["booked"] for g in n["gpus"]] for h, n in nodes.items() if not n["stale"]}
            return booked == {"hub-node": [8 * GiB], "node-b": [2 * GiB, 0]} and body["slices"] and body

        body = None

        def seen() -> bool:
            nonlocal body
            body = complete()
            return bool(body)

        wait_until(seen, timeout=90, what="both nodes with alice's, bob's and root's slices booked, and bob's slice")
        assert body is not None
        (mine,) = body["slices"]
        assert mine["hostname"] == "hub-node" and mine["holder"] == shlex.join(["sh", "-c", "read line", "bobs-own-marker"])
        assert [(g["index"], g["request"]) for g in mine["gpus"]] == [(0, 4 * GiB)] and "user" not in mine
        text = json.dumps(body)
        for secret in (alice.name, "alices-notebook-marker", "roots-command-marker", "root"):
            assert secret not in text, secret
        assert body["prometheus"] == prometheus.url
        assert f"the cluster view reads Prometheus at {prometheus.url} (the hub policy's)" in server.log_text()

        # Every view agrees: the broker's node books on its GPU what the cluster view says.
        status = subprocess.run(
            [JUPYTER_VGPU, "status", "--json"], env={**beside_broker, "JUPYTER_VGPU_LEDGER": ""}, capture_output=True, text=True, check=True
        )
        assert [g["memory_reserved"] for g in json.loads(status.stdout)["gpus"]] == [8 * GiB]

        # The same table from the command line, as bob.
        result = bob.run(JUPYTER_VGPU, "status", "--cluster", "--json", env=bob_env)  # the policy's Prometheus
        assert result.returncode == 0, result.stderr
        assert [s["id"] for s in json.loads(result.stdout)["slices"]] == [mine["id"]] and alice.name not in result.stdout

        # The hub node's memory over time: all its bookings, and bob's own apart.
        def history() -> Any:
            status, found = server.api("GET", "api/vgpu/cluster/nodes/hub-node/history?seconds=60")
            assert status == 200, found
            return found["booked"][-1] == 8 * GiB and found["yours_booked"][-1] == 4 * GiB and found

        found: Any = None

        def has_history() -> bool:
            nonlocal found
            found = history()
            return bool(found)

        wait_until(has_history, timeout=60, what="the hub node's history with both bookings")
        assert found["step"] == 1 and len(found["t"]) == len(found["total"]) == len(found["yours_used"]) == 61
        assert found["total"][-1] == 16 * GiB and found["used"][-1] == found["yours_used"][-1] == 0
        assert server.api("GET", "api/vgpu/cluster/nodes/nowhere/history")[0] == 404
        code, said = server.api("GET", "api/vgpu/cluster/nodes/hub-node/history?seconds=5")
        assert (code, said["message"]) == (400, "seconds='5' is not allowed: give 60 to 604800 (7 days).")

        # The admin's report: memory-hours per user, node and group, every user named (it is theirs to read).
        def report(*args: str) -> dict[str, list[float]]:
            result = subprocess.run(
                [JUPYTER_VGPU, "report", "--prometheus", prometheus.url, "--since", "1h", "--step", "1", "--csv", *args],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            lines = result.stdout.splitlines()
            assert lines[0].endswith(",booked_gib_hours,used_gib_hours,idle_gib_hours")
            return {line.split(",")[0]: [float(x) for x in line.split(",")[1:]] for line in lines[1:]}

        held_for = time.monotonic() - began + 5
        by_user = report()
        assert set(by_user) == {alice.name, bob.name, "root"}, by_user
        for name, (booked, used, idle) in by_user.items():
            share = 2 if name == "root" else 4  # GiB: a quarter of node-b's 8 GiB GPU, of the hub node's 16
            assert 0 < booked <= share * held_for / 3600 and used == 0 and idle == booked, (name, booked, used, idle)
        assert set(report("--by", "node")) == {"hub-node", "node-b"}
        assert system_users.students in report("--by", "group")  # alice's group

        prometheus.stop()  # the cluster is one sentence (once the server's last answer, kept 2 s, is old); bob's node views work as before
        wait_until(lambda: cluster()[0] == 503, timeout=30, what="503 from the cluster view with Prometheus down")
        said = cluster()[1]
        assert said["message"].startswith(f"The cluster view cannot be shown: Prometheus at {prometheus.url} cannot be reached: ")
        assert server.api("GET", "api/vgpu/slices")[0] == 200
    finally:
        server.stop()
        for process in held:
            if process.poll() is None:
                assert process.stdin is not None
                process.stdin.close()
        for process in held:
            process.wait(timeout=30)
        for node in (hub_node, node_b):
            node.stop()
        prometheus.stop()
        subprocess.run(["rm", "-rf", str(home)], check=False)

