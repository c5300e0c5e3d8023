"""What a CUDA context costs on a GPU before any framework allocates: the context allowance.

Every CUDA process pays for its context outside any framework's limit, so a slice counts an
allowance for it and frameworks get the slice minus the allowance. What a context costs grows
with the number of SMs (per-SM stacks and local memory) and with eager module loading; since
CUDA 12.2 lazy loading is the default on Linux. Published figures (docs/gpu.md has the sources):

===============================  =====  ==============
GPU (compute capability, SMs)    size   where
===============================  =====  ==============
RTX 4060 Ti (8.9, 34)            107 MiB llama.cpp PR 23604
RTX 3090 (8.6, 82)               256 MiB InvokeAI issue 9413
RTX 6000 Ada (8.9, 142)          426 MiB CUDA 13, InvokeAI issue 9413
RTX PRO 6000 Blackwell (12.0,188) 555 MiB llama.cpp PR 23604
unnamed GPU, lazy / eager        274 / 636 MiB  PyTorch PR 86509
V100, K40                        300-700 MB  PyTorch issues 20532, 28113
===============================  =====  ==============

About 3 MiB per SM fits every figure that names its GPU. No figure for A100 or H100 was
found: the table below takes 3 MiB per SM of each family's largest part plus 64 MiB for the
driver and the first kernels a framework loads, rounded up, and an unknown GPU gets the
largest common case. ``tests/gpu`` measures the real figure when a GPU is lent; set
``c.VGPU.context_allowance`` (or ``JUPYTER_VGPU_CONTEXT_ALLOWANCE``) to override it.
"""

from __future__ import annotations

from ..units import MiB

#: Allowance by compute capability (major, minor), from the largest part of each family.
BY_COMPUTE_CAPABILITY: dict[tuple[int, int], int] = {
    (7, 0): 320 * MiB,  # V100: 80 SMs
    (7, 5): 256 * MiB,  # T4 40, RTX 8000 72 SMs
    (8, 0): 384 * MiB,  # A100: 108 SMs
    (8, 6): 320 * MiB,  # A10 72, A40 84, RTX 3090 82 SMs (256 MiB measured)
    (8, 7): 256 * MiB,  # Jetson Orin
    (8, 9): 512 * MiB,  # L40S, RTX 6000 Ada: 142 SMs (426 MiB measured)
    (9, 0): 480 * MiB,  # H100, H200: 132 SMs
    (10, 0): 512 * MiB,  # B200: 148 SMs
    (12, 0): 640 * MiB,  # RTX PRO 6000 Blackwell: 188 SMs (555 MiB measured)
}

#: For a GPU whose compute capability is unknown (a failed query, a simulated GPU).
UNKNOWN = 512 * MiB


def context_allowance(compute_capability: tuple[int, int] | None) -> int:
    """The allowance for a GPU of this compute capability (the nearest known family below it)."""
    if compute_capability is None:
        return UNKNOWN
    if compute_capability in BY_COMPUTE_CAPABILITY:
        return BY_COMPUTE_CAPABILITY[compute_capability]
    lower = [cc for cc in BY_COMPUTE_CAPABILITY if cc <= compute_capability]
    if not lower:
        return BY_COMPUTE_CAPABILITY[min(BY_COMPUTE_CAPABILITY)]
    return BY_COMPUTE_CAPABILITY[max(lower)]
