"""The Slurm test cluster (tests/slurm/cluster.py): started once per session, emptied of jobs
after every test. Tests skip, saying why, where this machine cannot run Slurm."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .cluster import SlurmCluster, missing
from .login import Login


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


@pytest.fixture
def login_env(slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process as a login node: the cluster's clients, its own Jupyter folders and ledger,
    and a TMPDIR for the jobs' node-local ledgers (srun passes the environment on)."""
    for key in ("SLURM_CONF", "PATH", "JUPYTER_VGPU_SIMULATE"):
        monkeypatch.setenv(key, slurm.env[key])
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter-path"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JUPYTER_VGPU_LEDGER", str(tmp_path / "login" / "ledger.sqlite"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))
    monkeypatch.setenv("JUPYTER_VGPU_SLURM_TIMEOUT", "5")
    (tmp_path / "node-tmp").mkdir()
    yield tmp_path


@pytest.fixture
async def login(slurm: SlurmCluster, login_env: Path) -> AsyncIterator[Login]:
    node = Login(slurm, login_env)
    yield node
    await node.stop_all()
