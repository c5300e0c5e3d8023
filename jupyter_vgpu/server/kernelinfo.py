"""What the server knows of one of its kernels when a request comes in (its views' input)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelInfo:
    """What the server knows about one of its kernels when a request comes in."""

    name: str | None
    path: str | None
