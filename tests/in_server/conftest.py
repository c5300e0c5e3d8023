"""Tests against a real jupyter_server started by pytest-jupyter.

pytest-jupyter has no entry point: its fixtures come in by import. Its hooks that run
coroutine tests themselves are left out, so pytest-asyncio (asyncio_mode=auto) runs the tests
and ``jp_asyncio_loop`` hands the server that same loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403

del pytest_pycollect_makeitem, pytest_pyfunc_call  # type: ignore[name-defined]  # noqa: F821


@pytest.fixture
async def jp_asyncio_loop() -> AsyncIterator[asyncio.AbstractEventLoop]:
    yield asyncio.get_running_loop()
