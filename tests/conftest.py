"""Fixtures shared by every test: an isolated ledger on simulated GPUs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def vgpu_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """One simulated 16 GiB GPU and a fresh ledger, inherited by every child process."""
    env = {
        "JUPYTER_VGPU_SIMULATE": "1x16GiB",
        "JUPYTER_VGPU_LEDGER": str(tmp_path / "vgpu" / "ledger.sqlite"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("JUPYTER_VGPU_CONTEXT_ALLOWANCE", raising=False)
    monkeypatch.delenv("JUPYTER_VGPU_BROKER", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)  # messages on one line each, as in a log
    yield env


@pytest.fixture
def simulation_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vgpu_env: dict[str, str]) -> Any:
    """A JSON simulation the test can rewrite (devices and per-pid usage); returns a writer."""
    path = tmp_path / "gpus.json"

    def write(devices: list[dict[str, Any]] | None = None, processes: list[dict[str, Any]] | None = None) -> Path:
        devices = devices or [{"name": "Simulated A100", "memory": "16GiB"}]
        path.write_text(json.dumps({"devices": devices, "processes": processes or []}))
        return path

    write()
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", str(path))
    vgpu_env["JUPYTER_VGPU_SIMULATE"] = str(path)
    return write


@pytest.fixture(autouse=True, scope="session")
def users_own_ledger_is_never_touched() -> Iterator[None]:
    """Every test works in its own ledger; none may create or change the real one."""
    from jupyter_core.paths import jupyter_data_dir

    real = Path(jupyter_data_dir()) / "vgpu" / "ledger.sqlite"

    def state() -> tuple[float, int] | None:
        try:
            st = real.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime, st.st_size)

    before = state()
    yield
    assert state() == before, f"the test session wrote to the user's own ledger {real}"
