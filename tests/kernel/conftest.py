"""Fixtures for the kernel-layer tests (helpers live in :mod:`.harness`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import Kernel, Workspace
from .harness import start as start_kernel


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def kernels() -> Iterator[list[Kernel]]:
    """Kernels started by a test; all are shut down at its end."""
    started: list[Kernel] = []
    yield started
    for kernel in started:
        kernel.stop()


@pytest.fixture
def start(kernels: list[Kernel]) -> Any:
    """``start(env, extension=True)`` -> a running :class:`Kernel`, stopped after the test."""

    def starter(env: dict[str, str], **options: Any) -> Kernel:
        kernel = start_kernel(env, **options)
        kernels.append(kernel)
        return kernel

    return starter
