"""``%vgpu``, ``%vgpu devices`` and ``%vgpu help`` in a real sliced kernel, text and HTML."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from jupyter_vgpu.slices import Slice
from jupyter_vgpu.slices.reports import read_report

from .harness import Kernel, Workspace, module_kernel

UUID = "GPU-5e1a0000-0000-4000-8000-00000000a100"


@pytest.fixture(scope="module")
def sliced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Slice, Kernel]]:
    yield from module_kernel(tmp_path_factory, "magics", fraction=0.25)


@pytest.fixture
def kernel(sliced: tuple[Workspace, Slice, Kernel]) -> Kernel:
    workspace, _, kernel = sliced
    workspace.set_usage([{"gpu": 0, "pid": kernel.pid, "memory": "1GiB", "utilization": 30}])
    return kernel


def row(text: str, label: str) -> str:
    """The value of an aligned ``label  value`` row."""
    match = re.search(rf"^  {re.escape(label)} +(.*)$", text, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{text}"
    return match.group(1)


def status(kernel: Kernel) -> dict[str, str]:
    outcome = kernel.run("%vgpu")
    assert outcome.ok, outcome.stderr
    [bundle] = outcome.displays
    assert set(bundle) >= {"text/plain", "text/html"}
    return bundle


def test_status_shows_the_slice(sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel) -> None:
    _, slice_, _ = sliced
    text = status(kernel)["text/plain"]
    assert text.splitlines()[0] == f"jupyter-vgpu · slice {slice_.id}  [simulated GPUs]"
    assert row(text, "GPU") == f"0 · Simulated A100 · {UUID}"
    assert row(text, "share") == "1/4 GPU"
    assert row(text, "reserved") == "4.0 GiB per GPU (context allowance included)"
    assert row(text, "limit") == "3.5 GiB per GPU for frameworks"
    assert row(text, "context allowance") == "512 MiB per GPU for the CUDA context"


def test_status_shows_current_use_and_utilisation(kernel: Kernel) -> None:
    text = status(kernel)["text/plain"]
    assert row(text, "used now") == "1.0 GiB of 4.0 GiB, 25% (simulated: what its frameworks hold in the host's memory, or the simulation file's figure)"
    assert row(text, "utilisation") == "30%"


def test_an_idle_slice_reads_0_percent_as_the_sidebar_does(sliced: tuple[Workspace, Slice, Kernel]) -> None:
    """No GPU process on the slice's GPU: the server counts the slice's use as 0 bytes at 0%
    (slices.usage.usage_of), so %vgpu says 0%, not "n/a" beside a sidebar reading 0%."""
    workspace, _, kernel = sliced
    workspace.set_usage([])
    text = status(kernel)["text/plain"]
    assert row(text, "used now").startswith("0 B of 4.0 GiB, 0%")
    assert row(text, "utilisation") == "0%"


def test_peak_use_stays_after_use_falls(sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel) -> None:
    workspace, _, _ = sliced
    pid = kernel.pid
    workspace.set_usage([{"gpu": 0, "pid": pid, "memory": "3GiB"}])
    status(kernel)
    workspace.set_usage([{"gpu": 0, "pid": pid, "memory": "512MiB"}])
    text = status(kernel)["text/plain"]
    assert row(text, "used now").startswith("512 MiB of 4.0 GiB")
    assert row(text, "peak") == "3.0 GiB"


def test_status_names_the_enforcement_tier_and_each_framework(kernel: Kernel) -> None:
    text = status(kernel)["text/plain"]
    assert row(text, "tier") == "cooperative"
    assert row(text, "shares") == "memory only; compute is shared with the GPU's other users"
    assert row(text, "framework limits") == "none yet: set when TensorFlow, PyTorch, JAX or CuPy is imported"
    assert row(text, "watched") == "the Jupyter server compares NVML use with the slice when its extension runs"
    assert "no framework limit in force" not in text
    for title in ("TensorFlow", "PyTorch", "JAX", "CuPy"):
        assert row(text, title) == "not imported"


def test_status_is_a_table_in_notebooks(sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel) -> None:
    _, slice_, _ = sliced
    html = status(kernel)["text/html"]
    assert html.startswith('<div class="jupyter-vgpu-sheet">')
    assert f"jupyter-vgpu · slice {slice_.id}" in html and "simulated GPUs</span>" in html
    assert re.search(r"<td[^>]*>share</td><td[^>]*>1/4 GPU</td>", html)
    assert re.search(r"<td[^>]*>used now</td><td[^>]*>1.0 GiB of 4.0 GiB", html)
    assert "<code>%vgpu help</code>" in html


def test_status_refreshes_the_report_for_the_server(sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel) -> None:
    workspace, slice_, _ = sliced
    before = time.time()
    status(kernel)
    report = read_report(workspace.ledger_path, slice_.id)
    assert report is not None and report["updated"] >= before
    assert report["pid"] == kernel.pid


def test_devices_lists_physical_gpus_and_marks_the_slice(sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel) -> None:
    outcome = kernel.run("%vgpu devices")
    [bundle] = outcome.displays
    text = bundle["text/plain"]
    assert "Physical GPUs (simulated)" in text
    assert row(text, "GPU 0").endswith(f"{UUID}  ← this slice")
    ledger = sliced[0].ledger()
    try:
        (gpu,) = ledger.occupancy().gpus
    finally:
        ledger.close()
    assert gpu.free == 12 * 1024**3  # the figure `jupyter vgpu status` and the sidebar show
    assert "· 4.0 GiB reserved · free 12.0 GiB ·" in row(text, "GPU 0")
    assert row(text, "visible here") == f"CUDA_VISIBLE_DEVICES={UUID}"
    assert "Not imported: TensorFlow, PyTorch, JAX, CuPy." in text
    assert "← this slice" in bundle["text/html"]


def test_help_lists_every_command(kernel: Kernel) -> None:
    [bundle] = kernel.run("%vgpu help").displays
    text = bundle["text/plain"]
    for command in ("%vgpu", "%vgpu devices", "%vgpu monitor", "%vgpu monitor stop", "%vgpu resize 0.5 | 1/2 | 6GiB"):
        assert f"\n  {command} " in text
    assert "<code>jupyter vgpu status</code>" in bundle["text/html"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%vgpu bogus", "UsageError: %vgpu 'bogus' is not a command; use one of: status, devices, monitor, resize, help"),
        ("%vgpu devices now", "UsageError: %vgpu devices takes no arguments (got 'now')."),
        ("%vgpu monitor --interval fast", "UsageError: %vgpu monitor --interval 'fast' is not a number."),
        ("%vgpu monitor --interval 0", "UsageError: --interval 0 is not allowed; use 0.1 to 3600 seconds."),
        ("%vgpu resize", "UsageError: Say the new size: `%vgpu resize 0.5`"),
    ],
)
def test_a_users_mistake_is_one_line_without_traceback(kernel: Kernel, line: str, message: str) -> None:
    outcome = kernel.run(line)
    assert outcome.reply["content"]["status"] == "error"
    assert outcome.stderr.startswith(message)
    assert len(outcome.stderr.strip().splitlines()) == 1
    assert "Traceback" not in outcome.stderr and outcome.error is None
