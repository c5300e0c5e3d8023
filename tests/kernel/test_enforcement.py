"""The Enforcement rows of ``%vgpu`` in the vocabulary every view shares: the recorded tier,
what the slice reserves, the framework limits, and the server's watch."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from .harness import Workspace

A100_MIG = {
    "name": "NVIDIA A100-SXM4-40GB",
    "memory": "40GiB",
    "mig": [
        {"profile": "2g.20gb", "memory": "19.5GiB"},
        {"profile": "1g.10gb", "memory": "9.75GiB"},
    ],
}


def row(text: str, label: str) -> str:
    match = re.search(rf"^  {re.escape(label)} +(.*)$", text, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{text}"
    return match.group(1)


def enforcement(text: str) -> list[str]:
    """The rows of the Enforcement section, as printed."""
    section = text.split("\nEnforcement\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in section.splitlines()]


def status_text(workspace: Workspace, start: Any) -> str:
    kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    [bundle] = kernel.run("%vgpu").displays
    return str(bundle["text/plain"])


def test_an_mps_slice_shows_its_share_of_the_sms(workspace: Workspace, start: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "on")  # the ledger hands out MPS limits as with a daemon
    text = status_text(workspace, start)
    assert row(text, "tier") == "hard (MPS)"
    assert re.search(
        r"\n {20,}the MPS server refuses allocations past 4\.0 GiB per GPU \(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M\) "
        r"and runs it on 25% of the SMs\n",
        text,
    ), text
    assert row(text, "shares") == "memory, and 25% of the SMs (MPS)"
    assert row(text, "framework limits") == "none yet: set when TensorFlow, PyTorch, JAX or CuPy is imported"


def test_a_mig_slice_shows_its_device(workspace: Workspace, start: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "off")
    workspace.simulation.write_text(json.dumps({"devices": [A100_MIG], "processes": []}))
    text = status_text(workspace, start)
    assert row(text, "tier") == "hard (MIG 1g.10gb)"
    assert re.search(r"\n {20,}this kernel sees only its MIG device MIG-\S+; the GPU itself keeps it inside\n", text), text
    assert row(text, "shares") == "a MIG device: its own memory and compute"


def test_a_cooperative_slice_lists_its_rows_in_order(workspace: Workspace, start: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "off")
    rows = enforcement(status_text(workspace, start))
    assert [re.split(r"\s{2,}", line)[0] for line in rows] == ["tier", "shares", "framework limits", "watched"]
    assert not any(line.startswith("cooperative:") for line in rows)
