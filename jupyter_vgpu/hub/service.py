"""Running the broker: the socket, the reaper, SIGHUP, and the admin page when JupyterHub manages it."""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ..config import VGPU
from ..gpus import Inventory
from ..gpus.simulated_use import use_folder
from ..ledger import SQLiteLedger
from ..ledger.broker_client import DEFAULT_LEDGER, DEFAULT_SOCKET
from ..ledger.line import STALE_WAITER
from ..slices import Actor
from .broker import Broker, PolicySource
from .listener import BrokerServer, install_reload_signal

if TYPE_CHECKING:
    from ..metrics.node import NodePage

log = logging.getLogger("jupyter_vgpu.broker")

__all__ = ["DEFAULT_LEDGER", "DEFAULT_SOCKET", "hub_service_address", "open_broker", "serve"]


def open_broker(
    settings: VGPU, *, ledger_path: str | Path, policy: str | Path | None, waiter_timeout: float = STALE_WAITER
) -> Broker:
    """The broker over the node's ledger; a bad policy file raises :class:`InvalidConfig` here."""
    source = PolicySource(policy)
    simulate = settings.resolved_simulate
    # The broker itself may change any slice (admin): each caller gets a view acting for them.
    ledger = SQLiteLedger(
        ledger_path,
        # on simulated GPUs, what the slices' processes say they hold (Broker.simulated_use)
        Inventory(simulate, use_folder=use_folder(Path(ledger_path).parent) if simulate else None),
        context_allowance=settings.context_allowance_bytes,
        poll_interval=settings.poll_interval,
        actor=replace(Actor.this_process(), admin=True),
        waiter_timeout=waiter_timeout,
        name="node broker's ledger",  # callers are told of it, not of its private path
    )
    return Broker(ledger, source, simulate=simulate)


def serve(broker: Broker, socket_path: str | Path, *, reap_interval: float = 5.0, admin_port: int | None = None,
          admin_prefix: str = "/", admin_ip: str = "127.0.0.1", metrics: NodePage | None = None) -> None:
    """Serve until SIGTERM/SIGINT. With ``admin_port``, also the admin page (tornado, main thread).
    With ``metrics`` (a page over the broker's ledger, listening), also the node's Prometheus page,
    on threads of its own, stopped before the ledger closes."""
    try:
        server = BrokerServer(socket_path, broker)
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise
    stop = threading.Event()
    install_reload_signal(broker.policy)
    reaper = threading.Thread(target=broker.reap_forever, args=(reap_interval, stop), name="jupyter-vgpu-reaper", daemon=True)
    reaper.start()
    log.info(
        "jupyter-vgpu broker: serving the ledger %s on %s (%s; policy: %s).",
        broker.ledger.path, socket_path, broker.ledger.inventory.describe(), broker.policy.policy.source,
    )
    if metrics is not None:
        metrics.start()
    try:
        if admin_port is None:
            def stop_serving(signum: int, frame: FrameType | None) -> None:
                threading.Thread(target=server.shutdown, daemon=True).start()

            signal.signal(signal.SIGTERM, stop_serving)
            signal.signal(signal.SIGINT, stop_serving)
            server.serve_forever(poll_interval=0.2)
        else:
            _serve_with_admin_page(broker, server, admin_port, admin_prefix, admin_ip)
    finally:
        stop.set()
        server.server_close()
        if metrics is not None:
            metrics.stop()  # its sampler reads the ledger until it stops
        broker.ledger.close()


def _serve_with_admin_page(broker: Broker, server: BrokerServer, port: int, prefix: str, ip: str) -> None:
    import asyncio

    from .admin import make_app

    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="jupyter-vgpu-socket", daemon=True).start()

    async def main() -> None:
        app = make_app(broker, prefix)
        http = app.listen(port, address=ip)
        log.info("jupyter-vgpu broker: admin page on http://%s:%s%s", ip, port, prefix)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, done.set)
        loop.add_signal_handler(signal.SIGHUP, broker.policy.reload)
        await done.wait()
        http.stop()
        server.shutdown()

    asyncio.run(main())


def hub_service_address() -> tuple[int, str, str] | None:
    """(port, ip, prefix) of the admin page when JupyterHub started this process as a service."""
    url = os.environ.get("JUPYTERHUB_SERVICE_URL")
    if not url:
        return None
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return parsed.port or 80, parsed.hostname or "127.0.0.1", os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
