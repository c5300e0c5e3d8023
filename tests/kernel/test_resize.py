"""``%vgpu resize`` before any framework touches the GPU: the ledger and the kernel agree.

(Resizing after TensorFlow is imported is in test_tensorflow.py.)
"""

from __future__ import annotations

import pytest

from jupyter_vgpu.units import GiB, MiB

from .harness import Kernel, Workspace


def reserved(workspace: Workspace, slice_id: str) -> int:
    ledger = workspace.ledger()
    try:
        return ledger.get(slice_id).memory_per_gpu
    finally:
        ledger.close()


def slice_variables(kernel: Kernel) -> dict[str, str]:
    return kernel.eval(
        "{k: v for k, v in __import__('os').environ.items() if k.startswith(('JUPYTER_VGPU_', 'XLA_', 'CUPY_'))}"
    )


@pytest.mark.parametrize(
    ("share", "expected", "shown"),
    [("0.5", 8 * GiB, "1/2 GPU (8.0 GiB per GPU)"), ("1/8", 2 * GiB, "1/8 GPU (2.0 GiB per GPU)"), ("6GiB", 6 * GiB, "")],
)
def test_resize_before_any_framework_changes_ledger_and_environment(
    workspace: Workspace, start, share: str, expected: int, shown: str
) -> None:
    slice_ = workspace.reserve(0.25)
    kernel = start(workspace.slice_env(slice_))
    outcome = kernel.run(f"%vgpu resize {share}")
    assert outcome.ok, outcome.stderr
    assert outcome.stdout.startswith(f"Slice {slice_.id} resized from 1/4 GPU (4.0 GiB per GPU) to {shown}")
    assert reserved(workspace, slice_.id) == expected
    env = slice_variables(kernel)
    assert int(env["JUPYTER_VGPU_MEMORY_RESERVED"]) == expected
    assert int(env["JUPYTER_VGPU_MEMORY_LIMIT"]) == expected - 512 * MiB
    assert int(env["CUPY_GPU_MEMORY_LIMIT"]) == expected - 512 * MiB
    jax_fraction = env.get("XLA_CLIENT_MEM_FRACTION") or env["XLA_PYTHON_CLIENT_MEM_FRACTION"]  # as the jaxlib here reads it
    assert float(jax_fraction) == pytest.approx((expected - 512 * MiB) / (16 * GiB), abs=0.001)
    [bundle] = kernel.run("%vgpu").displays
    assert f"{expected / GiB:.1f} GiB per GPU (context allowance included)" in bundle["text/plain"]


def test_resize_that_does_not_fit_is_refused_and_the_ledger_keeps_the_old_size(workspace: Workspace, start) -> None:
    slice_ = workspace.reserve(0.25)
    workspace.reserve(0.5)  # someone else holds half of the GPU
    kernel = start(workspace.slice_env(slice_))
    outcome = kernel.run("%vgpu resize 0.75")
    assert outcome.reply["content"]["status"] == "error"
    assert outcome.stderr.startswith(f"UsageError: Cannot resize slice {slice_.id} to 3/4 GPU: GPU 0 (Simulated A100)")
    assert reserved(workspace, slice_.id) == 4 * GiB
    assert int(slice_variables(kernel)["JUPYTER_VGPU_MEMORY_RESERVED"]) == 4 * GiB


def test_resize_to_a_malformed_size_names_it(workspace: Workspace, start) -> None:
    kernel = start(workspace.slice_env(workspace.reserve(0.25)))
    outcome = kernel.run("%vgpu resize lots")
    assert outcome.stderr.startswith("UsageError: %vgpu resize 'lots': gpu_memory 'lots' is not a size")
    assert "`%vgpu resize 1/2`" in outcome.stderr


def test_resize_with_a_limit_of_the_other_kind_gives_examples_of_the_slices_kind(workspace: Workspace, start) -> None:
    """Issue 49: `%vgpu resize --limit 1/2` on a memory slice gave examples of shares (and a size below it)."""
    slice_ = workspace.reserve(memory="6GiB")
    kernel = start(workspace.slice_env(slice_))
    outcome = kernel.run("%vgpu resize --limit 1/2")
    assert outcome.stderr.strip() == (
        "UsageError: %vgpu resize '--limit 1/2': --limit '1/2' is a share of a GPU but the request is memory (6.0 GiB); "
        "give the limit as a size too, e.g. 12GiB. For example `%vgpu resize --limit 12GiB`."
    )
    assert reserved(workspace, slice_.id) == 6 * GiB  # nothing changed


def test_resize_without_a_slice_says_there_is_none(workspace: Workspace, start) -> None:
    kernel = start(workspace.base_env())
    outcome = kernel.run("%vgpu resize 0.5")
    assert outcome.stderr.startswith("UsageError: This kernel has no GPU slice to resize")
