"""A real Jupyter Server (non-root base URL) with the jupyter-vgpu extension, real ipykernel
kernels started through its REST API with the vgpu provisioner, on a simulated GPU whose
per-pid usage the test writes (``simulation_file``)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from kernels import Kernel

# pytest-jupyter has no entry point: its fixtures come in by import. Its hooks that run
# coroutine tests themselves are left out, so pytest-asyncio (asyncio_mode=auto) runs these
# tests, and jp_asyncio_loop below hands the server that same loop.
from pytest_jupyter.jupyter_server import *  # noqa: F403
from traitlets.config import Config

del pytest_pycollect_makeitem, pytest_pyfunc_call  # type: ignore[name-defined]  # noqa: F821


@pytest.fixture
async def jp_asyncio_loop() -> AsyncIterator[asyncio.AbstractEventLoop]:
    """pytest-asyncio (asyncio_mode=auto) runs the tests: serve from that loop, not a second one."""
    yield asyncio.get_running_loop()


KERNEL = "python3-vgpu"
DISPLAY_NAME = "Python 3 (1/4 GPU)"
INTERVAL = 0.2
GiB = 1024**3


@pytest.fixture
def vgpu_action() -> str:
    """``c.VGPUServer.over_limit_action`` for the test's server (parametrize to change)."""
    return "warn"


@pytest.fixture
def vgpu_grace() -> float:
    return 0.0


def write_kernelspec(jp_data_dir: Path, config: dict[str, Any], display_name: str = DISPLAY_NAME) -> str:
    """The kernelspec ``KERNEL`` whose kernels get ``config``'s slice from ``vgpu-provisioner``."""
    folder = jp_data_dir / "kernels" / KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": config}},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return KERNEL


@pytest.fixture
def vgpu_kernelspec(jp_data_dir: Path) -> str:
    """A kernelspec whose kernels get a quarter of the GPU from ``vgpu-provisioner``."""
    return write_kernelspec(jp_data_dir, {"gpu_fraction": 0.25})


@pytest.fixture
def vgpu_options() -> dict[str, Any]:
    """More ``c.VGPUServer`` options for the test's server (override in a module)."""
    return {}


@pytest.fixture
def jp_server_config(
    simulation_file: Any, vgpu_kernelspec: str, vgpu_action: str, vgpu_grace: float, vgpu_options: dict[str, Any]
) -> Config:
    return Config(
        {
            "ServerApp": {"jpserver_extensions": {"jupyter_vgpu": True}},
            "VGPUServer": {
                "monitor_interval": INTERVAL,
                "history_seconds": 60 * INTERVAL,
                "history_points": 60,
                "dashboard_step": 2 * INTERVAL,
                "reap_interval": 2 * INTERVAL,
                "over_limit_action": vgpu_action,
                "over_limit_grace": vgpu_grace,
                **vgpu_options,
            },
        }
    )


Fetch = Callable[..., Awaitable[Any]]


@pytest.fixture
async def vgpu_server(jp_serverapp: Any) -> Any:
    """The server with its extensions started, as ``jupyter server`` does once its loop runs
    (pytest-jupyter's ``jp_serverapp`` initialises the server but does not start extensions)."""
    await jp_serverapp.extension_manager.start_all_extensions()
    return jp_serverapp


def extension(serverapp: Any) -> Any:
    """The running VGPUServer extension app."""
    from jupyter_vgpu.server.extension import VGPUServer

    return next(
        a for apps in serverapp.extension_manager.extension_apps.values() for a in apps if isinstance(a, VGPUServer)
    )


async def get_json(jp_fetch: Fetch, *parts: str) -> Any:
    response = await jp_fetch(*parts)
    return json.loads(response.body)


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(INTERVAL / 2)


class ServerKernel:
    """A kernel the test server started through its REST API, driven by the suite's one kernel
    driver (:class:`kernels.Kernel`) on a worker thread, so the server's loop keeps serving."""

    def __init__(self, serverapp: Any, kernel_id: str) -> None:
        self.serverapp = serverapp
        self.id = kernel_id
        self._driver: Kernel | None = None

    @property
    def manager(self) -> Any:
        return self.serverapp.kernel_manager.get_kernel(self.id)

    @property
    def pid(self) -> int:
        return int(self.manager.provisioner.pid)

    @property
    def alive(self) -> bool:
        return self.id in self.serverapp.kernel_manager

    async def driver(self) -> Kernel:
        """The connected driver (its blocking calls belong on a worker thread)."""
        if self._driver is None:
            self._driver = await asyncio.to_thread(Kernel.attach, self.manager.get_connection_info(session=False))
        return self._driver

    async def run(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
        """Execute ``code``; returns the reply content and what it printed."""
        driver = await self.driver()
        outcome = await asyncio.to_thread(driver.run, code, timeout)
        return outcome.reply["content"], outcome.stdout

    def close(self) -> None:
        if self._driver is not None:
            self._driver.stop()
            self._driver = None


@pytest.fixture
async def start_kernel(jp_fetch: Fetch, vgpu_server: Any) -> AsyncIterator[Callable[..., Awaitable[ServerKernel]]]:
    """Start kernels through ``POST /api/kernels`` (or ``/api/sessions`` with a notebook path)."""
    kernels: list[ServerKernel] = []

    async def start(name: str = KERNEL, path: str | None = None) -> ServerKernel:
        if path is None:
            model = await get_json_post(jp_fetch, ("api", "kernels"), {"name": name})
            kernel_id = model["id"]
        else:
            body = {"path": path, "type": "notebook", "name": Path(path).name, "kernel": {"name": name}}
            model = await get_json_post(jp_fetch, ("api", "sessions"), body)
            kernel_id = model["kernel"]["id"]
        kernel = ServerKernel(vgpu_server, kernel_id)
        kernels.append(kernel)
        return kernel

    yield start
    for kernel in kernels:
        kernel.close()


async def get_json_post(jp_fetch: Fetch, parts: tuple[str, ...], body: dict[str, Any]) -> Any:
    response = await jp_fetch(*parts, method="POST", body=json.dumps(body))
    return json.loads(response.body)


def usage(pid: int, memory: str, utilization: int = 0, gpu: int = 0) -> dict[str, Any]:
    """One process entry of the JSON simulation."""
    return {"gpu": gpu, "pid": pid, "memory": memory, "utilization": utilization}


def unused_pid() -> int:
    """A pid no process has: NVML would show such a pid for a process in another pid namespace."""
    pid = 3_000_000
    while psutil.pid_exists(pid):
        pid += 1
    return pid


async def counted(jp_fetch: Any, name: str, **labels: str) -> float:
    """What the server's /metrics counts in ``name`` (``jupyter_vgpu_reclaims_total``) for the
    samples with ``labels``, read as Prometheus reads the page (0 when none is listed)."""
    from prometheus_client.parser import text_string_to_metric_families

    page = (await jp_fetch("metrics")).body.decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )
