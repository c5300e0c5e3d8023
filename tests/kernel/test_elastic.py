"""An elastic slice in a real kernel (issue 42): started from a kernelspec with gpu_fraction and
gpu_fraction_limit through the provisioner, on a simulated 4 GiB GPU, with real TensorFlow."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, Outcome

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.units import GiB, MiB, format_bytes

pytestmark = pytest.mark.tensorflow

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vgpu_env: dict[str, str]) -> Iterator[Kernel]:
    """A kernel of a "Python 3 (1/4 GPU, up to 1/2)" kernelspec on one simulated 4 GiB GPU."""
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "1x4GiB")  # small, so that a burst fits in the host's memory
    root = tmp_path / "jupyter-path"
    folder = root / "kernels" / "python3-vgpu-1-4-to-1-2"
    folder.mkdir(parents=True)
    config = {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.5}
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (1/4 GPU, up to 1/2)",
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": config}},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "3"},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    started = Kernel.start("python3-vgpu-1-4-to-1-2")
    try:
        yield started
    finally:
        started.stop()


def text(outcome: Outcome) -> str:
    return ANSI.sub("", outcome.stdout + "".join(bundle.get("text/plain", "") for bundle in outcome.displays))


@pytest.mark.parametrize(
    ("asked", "grows", "booked", "limit"),
    [
        # "Python 3 (1 GiB GPU, up to 3 GiB)" on a 16 GiB GPU (issue 49: %vgpu said "limit 512 MiB ... (the request)")
        (("0.0625", GiB, "3.0 GiB"), 3 * GiB, "1.0 GiB (guaranteed)", "3.0 GiB (may grow to)"),
        (("0.25", 4 * GiB, "50%"), 8 * GiB, "1/4 GPU (4.0 GiB per GPU, guaranteed)", "50% of a GPU (8.0 GiB per GPU, may grow to)"),
    ],
)
def test_vgpu_says_an_elastic_slices_request_and_limit_in_the_unit_they_were_asked_in(
    asked: tuple[str, int, str], grows: int, booked: str, limit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_vgpu.kernel.state import KernelState, SliceFacts
    from jupyter_vgpu.kernel.status import elastic_rows

    allowance = 512 * MiB
    fraction, reserved, limit_asked = asked
    burst = grows - allowance
    env = {"JUPYTER_VGPU_FRACTION": fraction, "JUPYTER_VGPU_MEMORY_RESERVED": str(reserved), "JUPYTER_VGPU_BURST_SHARE": limit_asked}
    for name, value in {
        **env, "JUPYTER_VGPU_SLICE_ID": "abcdef012345", "JUPYTER_VGPU_GPUS": "GPU-0", "JUPYTER_VGPU_CONTEXT_ALLOWANCE": str(allowance),
        "JUPYTER_VGPU_MEMORY_LIMIT": str(reserved - allowance), "JUPYTER_VGPU_BURST_LIMIT": str(burst),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    rows = dict(elastic_rows(KernelState(SliceFacts.from_env())))
    assert rows["request"] == booked and rows["limit"] == limit, rows
    assert rows["frameworks get"].startswith(f"{format_bytes(reserved - allowance)} per GPU guaranteed, growing on demand to {format_bytes(burst)}")


def test_an_elastic_kernel_books_its_request_and_its_frameworks_get_its_limit(kernel: Kernel) -> None:
    ledger = open_ledger()
    [held] = ledger.slices()
    ledger.close()
    allowance = int(kernel.env("JUPYTER_VGPU_CONTEXT_ALLOWANCE"))
    assert held.memory == (1 * GiB,)  # the request is booked
    assert int(kernel.env("JUPYTER_VGPU_MEMORY_RESERVED")) == 1 * GiB
    assert int(kernel.env("JUPYTER_VGPU_MEMORY_LIMIT")) == 1 * GiB - allowance  # as before
    assert int(kernel.env("JUPYTER_VGPU_BURST_LIMIT")) == 2 * GiB - allowance  # what frameworks may grow to

    status = text(kernel.run("%vgpu"))
    assert "\n  request            1/4 GPU (1.0 GiB per GPU, guaranteed)\n" in status, status
    assert "\n  limit              1/2 GPU (2.0 GiB per GPU, may grow to)\n" in status, status
    frameworks = f"{format_bytes(GiB - allowance)} per GPU guaranteed, growing on demand to {format_bytes(2 * GiB - allowance)}"
    assert f"\n  frameworks get     {frameworks} (the request and the limit less the context allowance)\n" in status, status
    assert "\n  share " not in status and "burst limit" not in status, status  # one name for each figure

    imported = kernel.run("import tensorflow as tf")
    assert imported.ok, imported.error
    shown = text(kernel.run("%vgpu"))
    each = (2 * GiB - allowance) // MiB * MiB
    # What TensorFlow's logical device gets on a real GPU (the CPU build sees no GPU to configure).
    assert re.search(rf"\n  TensorFlow +1 logical GPU of {each / GiB:.1f} GiB on each GPU\n", shown), shown

    # More than the whole request (1 GiB), less than the limit: TensorFlow allocates it.
    burst = 1 * GiB + 256 * MiB
    allocated = kernel.run(f"x = tf.ones(({burst // 4},), dtype=tf.float32); held = int(tf.size(x)) * 4")
    assert allocated.ok, allocated.error
    assert kernel.eval("held") == burst
    assert kernel.eval("tf.config.experimental.get_memory_info('CPU:0')['current']") >= burst  # what the simulated GPU counts
    # %vgpu reads its use against the limit, the request guaranteed, and says what the burst is.
    for _ in range(30):  # the simulated use is written once a second
        shown = text(kernel.run("%vgpu"))
        if "\n  burst " in shown:
            break
        time.sleep(0.5)
    assert re.search(r"\n  used now +1\.\d GiB of up to 2\.0 GiB \(1\.0 GiB guaranteed\)", shown), shown
    assert re.search(r"\n  burst +\d+ MiB above the request: this kernel's while nobody needs it; when a request waits", shown), shown
