"""tests/gpu: on a real NVIDIA GPU only. One skip for the whole folder, and the figures table.

Every test here is marked ``gpu`` and skipped, with the reason, when NVML itself (never the
simulation, whatever ``JUPYTER_VGPU_SIMULATE`` says) sees no GPU. Tests record figures with the
``figures`` fixture; they are printed at the end of the run and written as JSON to
``$VGPU_FIGURES`` when it is set (``scripts/gpu-tests`` does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.gpus import Inventory

HERE = Path(__file__).parent
FIGURES: dict[str, Any] = {}


@cache
def gpu_absent_reason() -> str | None:
    """Why the GPU tests cannot run here, or None when NVML sees a GPU."""
    snapshot = Inventory("").snapshot()
    if snapshot.available:
        return None
    return f"no NVIDIA GPU visible to NVML: {snapshot.message or 'NVML reports none'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if HERE not in Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.gpu)
        reason = reason or gpu_absent_reason()
        if reason:  # first, so that it wins over a test's own skipif ("torch is not installed")
            item.add_marker(pytest.mark.skipif(True, reason=reason), append=False)


@pytest.fixture
def figures() -> dict[str, Any]:
    """The run's figures: ``figures["context size"] = "512 MiB"`` (any JSON-ready value)."""
    return FIGURES


@pytest.fixture
def real_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Real NVML, a fresh ledger, and a folder for kernelspecs (on JUPYTER_PATH); yields it."""
    monkeypatch.delenv("JUPYTER_VGPU_SIMULATE", raising=False)
    monkeypatch.delenv("JUPYTER_VGPU_BROKER", raising=False)
    monkeypatch.setenv("JUPYTER_VGPU_LEDGER", str(tmp_path / "vgpu" / "ledger.sqlite"))
    data = tmp_path / "jupyter-data"
    (data / "kernels").mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(data), *filter(None, [os.environ.get("JUPYTER_PATH")])]))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    yield data


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("jupyter-vgpu on a real GPU: figures")
    for name, value in FIGURES.items():
        if isinstance(value, dict):
            terminalreporter.write_line(f"{name}:")
            for key, item in value.items():
                terminalreporter.write_line(f"    {key:<28} {item}")
        else:
            terminalreporter.write_line(f"{name:<32} {value}")
    if target := os.environ.get("VGPU_FIGURES"):
        Path(target).write_text(json.dumps(FIGURES, indent=2, default=str))
        terminalreporter.write_line(f"(written to {target})")
