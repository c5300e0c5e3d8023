"""The product on the real NVML path: nvidia-ml-py -> libnvidia-ml, here NVIDIA's own mock of it
(``../shared/nvml-mock``: the real ABI, NVIDIA's H100 and A100 profiles, processes added while a
test runs through an overrides file). No ``JUPYTER_VGPU_SIMULATE``: every process of a test
(commands, kernels, a Jupyter server) loads the library the way it would load the driver's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MOCK = Path(os.environ.get("JUPYTER_VGPU_NVML_MOCK", REPO.parent / "shared" / "nvml-mock"))
LIBRARY = "libnvidia-ml.so.550.163.01"
GiB = 1024**3
MiB = 1024**2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if (MOCK / LIBRARY).is_file():
        return
    skip = pytest.mark.skip(reason=f"NVIDIA's mock NVML is not at {MOCK} (../shared/nvml-mock beside the checkout)")
    for item in items:
        if str(item.fspath).startswith(str(Path(__file__).parent)):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def mock_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where ``libnvidia-ml.so.1`` is the mock, as the loader looks it up. (The shared
    folder keeps the library's symbolic links as plain files, which the loader cannot follow.)"""
    folder = tmp_path_factory.mktemp("nvml-lib")
    for name in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
        (folder / name).symlink_to(MOCK / LIBRARY)
    return folder


@dataclass
class Node:
    """A machine whose driver is NVIDIA's mock with one of its profiles."""

    env: dict[str, str]
    overrides: Path
    ledger: Path

    def set(self, devices: dict[int, dict[str, Any]]) -> None:
        """Processes and memory per GPU index, deep-merged over the profile (the mock re-reads it)."""
        data = {"version": 1, "devices": {str(index): spec for index, spec in devices.items()}}
        tmp = self.overrides.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))  # JSON is YAML
        tmp.replace(self.overrides)

    def vgpu(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jupyter_vgpu.cli", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def status(self) -> dict[str, Any]:
        shown = self.vgpu("status", "--json")
        assert shown.returncode == 0, shown.stderr
        return dict(json.loads(shown.stdout))


def process(pid: int, mib: int, sm: int = 0) -> dict[str, Any]:
    return {"pid": pid, "type": "C", "name": "python", "used_memory_mib": mib, "sm_util": sm}


def make_node(tmp: Path, library: Path, profile: str) -> Node:
    from jupyter_process import isolated_env

    overrides = tmp / "overrides.yaml"
    env = isolated_env(
        tmp,
        LD_LIBRARY_PATH=str(library),
        MOCK_NVML_CONFIG=str(MOCK / "configs" / f"{profile}.yaml"),
        MOCK_NVML_OVERRIDES=str(overrides),
        MOCK_NVML_OVERRIDES_TTL="200ms",
    )
    env.pop("JUPYTER_VGPU_SIMULATE", None)
    node = Node(env, overrides, Path(env["JUPYTER_VGPU_LEDGER"]))
    node.set({})
    return node


@pytest.fixture
def h100(tmp_path: Path, mock_library: Path) -> Iterator[Node]:
    yield make_node(tmp_path, mock_library, "h100")


@pytest.fixture
def a100(tmp_path: Path, mock_library: Path) -> Iterator[Node]:
    yield make_node(tmp_path, mock_library, "a100")
