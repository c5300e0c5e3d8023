"""``configure(c, __file__)``: the lines of ``jupyterhub_config.py`` that wire jupyter-vgpu in."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..config import ENV_CONTEXT, ENV_SIMULATE
from ..ledger.broker_client import DEFAULT_LEDGER, DEFAULT_SOCKET, ENV_BROKER

ROLE = "jupyter-vgpu-broker"
#: Where the admin page (the broker's service) reaches the hub's API. Here, not in the admin page's
#: module, so that the broker and `configure` start without JupyterHub's OAuth and database modules.
ENV_HUB_URL = "JUPYTER_VGPU_HUB_URL"


def configure(
    c: Any,
    config_file: str | Path | None = None,
    *,
    service_name: str = "vgpu",
    socket_path: str = DEFAULT_SOCKET,
    ledger_path: str = DEFAULT_LEDGER,
    admin_port: int = 10101,
    hub_url: str | None = None,
    default_share: str | None = None,
    metrics_port: int | None = None,
    python: str = sys.executable,
) -> dict[str, Any]:
    """Run the broker as the managed service ``service_name`` and point single-user servers at it.

    ``config_file`` (pass ``__file__``) is where the broker reads ``c.VGPUPolicy``; a JSON
    policy file works too. ``hub_url`` is the proxy's address as the broker host sees it (default:
    from ``c.JupyterHub.bind_url``), used by the admin page to shut kernels down through their
    user's server. ``default_share`` (e.g. ``"1/4"`` or ``"4GiB"``) makes every kernel of every
    single-user server a sliced kernel of that share, not only the sliced kernelspecs.
    ``metrics_port`` makes the broker serve the node's Prometheus page there (``--metrics-port``; on
    127.0.0.1: give the broker ``--metrics-address`` through ``c.JupyterHub.services`` if the site's
    Prometheus scrapes from elsewhere). Returns the service entry it added.
    """
    command = [python, "-m", "jupyter_vgpu.cli", "broker", "--socket", socket_path, "--ledger", ledger_path]
    if metrics_port is not None:
        command += ["--metrics-port", str(int(metrics_port))]
    if config_file:
        command += ["--policy", str(Path(config_file).resolve())]
    passed = {k: v for k, v in os.environ.items() if k in (ENV_SIMULATE, ENV_CONTEXT)}
    service: dict[str, Any] = {
        "name": service_name,
        "url": f"http://127.0.0.1:{admin_port}",
        "command": command,
        "environment": {**passed, ENV_HUB_URL: hub_url or _hub_url(c)},
        "oauth_no_confirm": True,
        "display": True,
        "info": {"description": "GPU slices of every user on this node (admins only)"},
    }
    c.JupyterHub.services.append(service)
    # The admin page asks the hub whether a user is an admin, and shuts kernels down through
    # the user's own server.
    c.JupyterHub.load_roles.append({"name": ROLE, "scopes": ["read:users", "access:servers"], "services": [service_name]})
    env = {ENV_BROKER: socket_path, **passed}
    if default_share:
        env["JUPYTER_DEFAULT_PROVISIONER_NAME"] = "vgpu-provisioner"
        key = "gpu_memory" if default_share.strip()[-1:].isalpha() else "gpu_fraction"
        c.Spawner.args.append(f"--VGPUProvisioner.{key}={default_share}")
    c.Spawner.environment.update(env)
    return service


def _hub_url(c: Any) -> str:
    hub = c.JupyterHub
    for name in ("public_url", "bind_url"):
        value = hub.get(name) if hasattr(hub, "get") else None
        if isinstance(value, str) and value:
            parsed = urlparse(value)
            host = parsed.hostname or "127.0.0.1"
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            port = f":{parsed.port}" if parsed.port else ""
            base = parsed.path.rstrip("/")
            return f"{parsed.scheme or 'http'}://{host}{port}{base}"
    base_url = hub.get("base_url") if hasattr(hub, "get") else None
    return "http://127.0.0.1:8000" + (str(base_url).rstrip("/") if isinstance(base_url, str) else "")
