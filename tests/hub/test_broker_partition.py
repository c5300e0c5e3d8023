"""The MPS memory-partitioning tier on a shared node: the broker (root) makes each slice's cgroup
and moves a user's process into it when that process asks; a user joins only their own slice.
Real cgroups (a subtree of this test's own) where this machine has a writable cgroup v2
hierarchy; the driver is simulated (see tests/test_mps_partition.py)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_mps_partition import UUID, remove_subtree, writable_cgroup2  # type: ignore[import-not-found]

from .conftest import JUPYTER_VGPU, PYTHON, BrokerProcess, Users

pytestmark = pytest.mark.hub

JOIN = """
import os, sys
from jupyter_vgpu.ledger import open_ledger
try:
    print(open_ledger().join_hold(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else os.getpid()))
except Exception as error:
    print(type(error).__name__, error)
"""


def test_the_broker_moves_a_users_command_into_its_slices_cgroup_and_no_one_elses(
    system_users: Users, broker: BrokerProcess, tmp_path: Path
) -> None:
    import uuid

    mount = writable_cgroup2()
    if mount is None:
        pytest.skip("no writable cgroup v2 hierarchy here (needs root, or a delegated subtree)")
    root = mount / f"vgpu-test-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    spec = broker.ledger.parent / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"name": "Simulated H100", "memory": "16GiB", "uuid": UUID, "memory_partitioning": True}]}))
    broker.kill(signal.SIGTERM)
    broker.env.update({"JUPYTER_VGPU_SIMULATE": str(spec), "JUPYTER_VGPU_CGROUP_ROOT": str(root), "JUPYTER_VGPU_MPS": "on"})
    broker.start()
    alice, bob = system_users.alice, system_users.bob
    env = {"JUPYTER_VGPU_BROKER": str(broker.socket)}
    try:
        script = "cat /proc/self/cgroup; echo $JUPYTER_VGPU_SLICE_ID; sleep 1"
        ran = alice.run(JUPYTER_VGPU, "run", "-p", "1/4", "--", "sh", "-c", script, env=alice.env(**env))
        assert ran.returncode == 0, ran.stderr
        assert "enforced (MPS memory partitioning)" in ran.stderr and "held by MPS's pinned limit" not in ran.stderr, ran.stderr
        lines = ran.stdout.split()
        slice_id = lines[-1]
        assert any(line.startswith("0::") and line.endswith(f"/jupyter-vgpu/{slice_id}") for line in lines), ran.stdout
        assert not (root / "jupyter-vgpu" / slice_id).exists()  # the broker removed it with the slice

        # bob cannot put his process into alice's slice (nor learn anything by trying)
        held = alice.popen(JUPYTER_VGPU, "run", "-p", "1/4", "--", "sh", "-c", "echo $JUPYTER_VGPU_SLICE_ID; sleep 30", env=alice.env(**env))
        assert held.stdout is not None
        alice_slice = held.stdout.readline().strip()
        try:
            tried = bob.run(PYTHON, "-c", JOIN, alice_slice, env=bob.env(**env))
            assert tried.stdout.startswith("NotPermitted") and "only your own slices" in tried.stdout, tried.stdout + tried.stderr
            cgroup = root / "jupyter-vgpu" / alice_slice
            members = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
            assert members and all(Path(f"/proc/{p}").stat().st_uid == alice.uid for p in members)
            # alice cannot have the broker move another process (hers or not) into her slice: a
            # process joins itself (a pid given at connect may be another process's by now)
            other = alice.run(PYTHON, "-c", JOIN, alice_slice, str(held.pid), env=alice.env(**env))
            assert other.stdout.startswith("NotPermitted") and "joins its slice's memory partition itself" in other.stdout, other.stdout
            # nor list alice's pids from her slice's cgroup (only root looks inside)
            peek = bob.run("/bin/cat", str(cgroup / "cgroup.procs"), env=bob.env(**env))
            assert peek.returncode != 0 and not peek.stdout and "Permission denied" in peek.stderr, peek.stdout + peek.stderr
        finally:
            held.kill()
            held.wait()
    finally:
        broker.kill(signal.SIGTERM)
        remove_subtree(root, mount)
