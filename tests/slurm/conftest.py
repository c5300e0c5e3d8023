"""The Slurm test cluster (tests/slurm/cluster.py): started once per session, emptied of jobs
after every test. Tests skip, saying why, where this machine cannot run Slurm."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import SlurmCluster, missing


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld and two slurmd (node1, node2) on loopback, each node with two simulated
    16 GiB GPUs of 32 shards each; every process ends with the session."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="vgpu-slurm-") as folder:
        cluster = SlurmCluster(Path(folder))
        try:
            took = cluster.start()
            print(f"\nSlurm test cluster up (munged, slurmctld, 2 slurmd, nodes idle) in {took:.2f} s")
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster, with no job left when the test ends (and its controller running again)."""
    yield slurm_cluster
    slurm_cluster.start_controller()
    slurm_cluster.cancel_all(timeout=20)
    assert slurm_cluster.jobs() == []

