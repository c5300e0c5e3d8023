"""An elastic slice through a real server's REST API (issue 42): its request, its limit and its
words, beside a fixed slice that reads as it always has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.units import GiB

from .conftest import get_json, until, write_kernelspec

ELASTIC = {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.5}


@pytest.fixture
def vgpu_kernelspec(jp_data_dir: Path) -> str:
    """This module's kernelspec: "Python 3 (1/4 GPU, up to 1/2)"."""
    return write_kernelspec(jp_data_dir, ELASTIC, "Python 3 (1/4 GPU, up to 1/2)")


async def rows(jp_fetch: Any) -> dict[str, Any]:
    data = await get_json(jp_fetch, "api", "vgpu", "slices")
    return {row["kernel_id"] or row["command"]: row for row in data["slices"]}


async def test_a_rest_row_says_the_request_and_the_limit(jp_fetch: Any, start_kernel: Any) -> None:
    kernel = await start_kernel()
    command = subprocess.Popen(["sleep", "60"])
    ledger = open_ledger()
    try:
        ledger.reserve(SliceRequest.parse(fraction=0.25), Holder("command", "python eval.py", pid=command.pid))
        listed = await until(lambda: _both(jp_fetch, kernel.id), what="both slices")
        elastic, fixed = listed[kernel.id], listed["python eval.py"]
        allowance = elastic["context_allowance"]
        assert elastic["request_text"] == "1/4 GPU, up to 1/2"
        assert elastic["request"]["fraction"] == 0.25 and elastic["request"]["limit_fraction"] == 0.5
        assert elastic["memory_reserved"] == 4 * GiB  # booked: the request
        assert elastic["memory_limit"] == 4 * GiB - allowance
        assert elastic["memory_burst_limit"] == 8 * GiB - allowance
        assert fixed["request_text"] == "1/4 GPU"
        assert fixed["memory_burst_limit"] is None
        assert "limit_fraction" not in fixed["request"] and "limit_memory" not in fixed["request"]
        one = await get_json(jp_fetch, "api", "vgpu", "kernels", kernel.id)
        assert one["slice"]["request_text"] == "1/4 GPU, up to 1/2"
        assert one["slice"]["memory_burst_limit"] == 8 * GiB - allowance
        # The dashboard's history: the request and the limit its chart draws, all GPUs together.
        history = await get_json(jp_fetch, "api", "vgpu", "history")
        charted = {s["kernel_id"] or s["command"]: s for s in history["slices"]}
        assert charted[kernel.id]["memory_reserved_total"] == 4 * GiB
        assert charted[kernel.id]["memory_limit_total"] == 8 * GiB
        assert charted["python eval.py"]["memory_limit_total"] is None
    finally:
        ledger.close()
        command.kill()
        command.wait()


async def _both(jp_fetch: Any, kernel_id: str) -> dict[str, Any] | None:
    found = await rows(jp_fetch)
    return found if kernel_id in found and "python eval.py" in found else None


async def test_status_says_the_limit_beside_the_request(jp_fetch: Any, start_kernel: Any, vgpu_env: dict[str, str]) -> None:
    kernel = await start_kernel()
    await until(lambda: _kernel_row(jp_fetch, kernel.id), what="the kernel's slice")
    jupyter_vgpu = str(Path(sys.executable).parent / "jupyter-vgpu")
    shown = subprocess.run([jupyter_vgpu, "status"], capture_output=True, text=True, timeout=60).stdout
    assert "[1/4 GPU, up to 1/2]" in shown.replace("\u00a0", " "), shown


async def _kernel_row(jp_fetch: Any, kernel_id: str) -> Any:
    return (await rows(jp_fetch)).get(kernel_id)
