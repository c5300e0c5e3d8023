"""Remote GPU kernels through jupyter_server's own gateway client (docs/remote.md).

Two sides:

* **The CPU-only side** (``jupyter lab --gateway-url=...``): jupyter_server forwards kernels,
  channels and kernelspecs to the gateway and nothing else, so :class:`GatewayProxyHandler`
  answers ``/api/vgpu/*`` from the GPU node, through the gateway client's connection settings
  (its token, headers, TLS and cookies), and joins the node's slices to this server's sessions by
  kernel id so holders read as notebook paths. Only a short cache is kept here. The notebook's
  path reaches the node with the kernel start: ``JPY_SESSION_NAME`` (which the session manager
  gives every kernel) is added to ``GatewayClient.allowed_envs``.
* **The GPU node**: a plain jupyter server ignores the ``env`` of a kernel start request, so with
  ``c.VGPUServer.accept_kernel_env`` (``jupyter vgpu gateway`` sets it) :class:`KernelStartHandler`
  passes the ``KERNEL_*`` variables and ``JPY_SESSION_NAME`` on to the kernel, as Kernel Gateway
  does; :class:`GatewayAuthorizer` limits the server to kernels, kernelspecs and the GPU API.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth import Authorizer
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.services.kernels.handlers import MainKernelHandler
from jupyter_server.services.sessions.handlers import SessionRootHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

#: The variable that carries a kernel's notebook path (jupyter_server's session manager sets it).
SESSION_VARIABLE = "JPY_SESSION_NAME"
#: Seconds a node's answer to one GET is reused (several browser tabs polling at once).
CACHE_SECONDS = 0.5
#: A poll must not hang on a node that went away: jupyter_server's own default waits 40 s.
CONNECT_TIMEOUT = 5.0
REQUEST_TIMEOUT = 20.0
#: The REST resources a GPU node's restricted server serves (kernels, their channels, kernelspecs
#: and their files, the GPU API, /api's version and status); everything else is refused.
GATEWAY_RESOURCES = frozenset({"kernels", "kernelspecs", "vgpu", "api"})


def gateway_client() -> Any:
    from jupyter_server.gateway.gateway_client import GatewayClient

    return GatewayClient.instance()


def allow_session_name() -> None:
    """Send each kernel's notebook path to the gateway with the kernel start request."""
    client = gateway_client()
    names = [n.strip() for n in (client.allowed_envs or "").split(",") if n.strip()]
    if SESSION_VARIABLE not in names:
        client.allowed_envs = ",".join([*names, SESSION_VARIABLE])


class GatewayProxyHandler(APIHandler):
    """``/api/vgpu/<route>`` answered by the GPU node behind ``--gateway-url``: the same JSON, with
    ``node`` (where it comes from) and notebook paths from this server's sessions."""

    auth_resource = "vgpu"
    _cache: dict[str, tuple[float, int, bytes]] = {}

    @web.authenticated
    @authorized
    async def get(self, *_: str) -> None:
        await self._forward("GET")

    @web.authenticated
    @authorized
    async def delete(self, *_: str) -> None:
        await self._forward("DELETE")

    @web.authenticated
    @authorized
    async def post(self, *_: str) -> None:
        await self._forward("POST")

    async def _forward(self, method: str) -> None:
        client = gateway_client()
        route = self.request.path[len(url_path_join(self.base_url, "api", "vgpu")) :].lstrip("/")
        url = url_path_join(client.url, "api", "vgpu", route)
        if self.request.query:
            url += "?" + self.request.query
        key = f"{method} {url}"
        cached = self._cache.get(key) if method == "GET" else None
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            status, body = cached[1], cached[2]
        else:
            status, body = await self._fetch(client, method, url)
            if method == "GET" and status == 200:
                self._cache.clear()  # one entry per route is plenty; never grows
                self._cache[key] = (time.monotonic(), status, body)
        if status == 204:
            self.set_status(204)
            self.finish()
            return
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            data = {"message": f"The GPU node {client.url} answered HTTP {status} with something that is not JSON."}
        if status >= 400 or not isinstance(data, dict):
            return self._fail(status if status >= 400 else 502, data)
        await self._join_sessions(data)
        data["gateway"] = {"url": client.url, "node": data.get("node")}
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    async def _fetch(self, client: Any, method: str, url: str) -> tuple[int, bytes]:
        """(status, body) from the node; an unreachable node is a 503 with a sentence."""
        kwargs = client.load_connection_args(method=method)  # token, headers, TLS, cookies
        if method == "POST":
            kwargs["body"] = self.request.body or b"{}"
        kwargs["connect_timeout"] = min(float(kwargs.get("connect_timeout") or CONNECT_TIMEOUT), CONNECT_TIMEOUT)
        kwargs["request_timeout"] = min(float(kwargs.get("request_timeout") or REQUEST_TIMEOUT), REQUEST_TIMEOUT)
        try:
            response = await AsyncHTTPClient().fetch(url, raise_error=False, **kwargs)
        except (OSError, HTTPClientError) as error:
            return 503, _unreachable(client.url, error)
        if response.code == 599:  # tornado's code for "no HTTP answer" (refused, timed out)
            return 503, _unreachable(client.url, response.error)
        if client.accept_cookies:
            client.update_cookies(response.headers)
        if response.code in (401, 403) and not _has_message(response.body):
            message = (
                f"The GPU node {client.url} refused this server's gateway token (HTTP {response.code}): "
                "check GatewayClient.auth_token (--GatewayClient.auth_token or JUPYTER_GATEWAY_AUTH_TOKEN)."
            )
            return response.code, json.dumps({"message": message}).encode()
        return response.code, response.body or b""

    def _fail(self, status: int, data: Any) -> None:
        message = data.get("message") if isinstance(data, dict) else None
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message or f"The GPU node answered HTTP {status}."}))

    async def _join_sessions(self, data: dict[str, Any]) -> None:
        """Name each kernel by this server's notebook path, and say which kernels this server
        runs (only those can be shut down from here)."""
        paths = self._session_paths()
        here = set(self.kernel_manager.list_kernel_ids())
        entries: list[dict[str, Any]] = []
        for name in ("slices", "waiting", "refusals"):
            entries += [e for e in data.get(name) or [] if isinstance(e, dict)]
        if isinstance(data.get("slice"), dict):
            entries.append(data["slice"])
        root = os.path.realpath(str(self.settings.get("server_root_dir") or "."))
        for entry in entries:
            path = entry.get("path")
            if isinstance(path, str) and os.path.isabs(path):
                # The node knows the notebook by the path this server sent with the kernel start.
                inside = os.path.relpath(os.path.realpath(path), root)
                entry["path"] = inside if not inside.startswith("..") else path
            kernel_id = entry.get("kernel_id")
            if not isinstance(kernel_id, str):
                continue
            if kernel_id in paths:
                entry["path"] = paths[kernel_id]
            if "running_here" in entry:
                entry["running_here"] = kernel_id in here

    def _session_paths(self) -> dict[str, str]:
        """Kernel id -> notebook path of this server's sessions, read from the session table
        (``list_sessions`` would ask the gateway about every kernel on every poll)."""
        try:
            rows = self.session_manager.cursor.execute("SELECT kernel_id, path FROM session").fetchall()
        except Exception:  # another session manager: no paths, the node's labels stay
            return {}
        return {str(kernel_id): str(path) for kernel_id, path in rows if kernel_id and path}


def _has_message(body: bytes | None) -> bool:
    try:
        return bool(json.loads(body or b"{}").get("message"))
    except (ValueError, AttributeError):
        return False


def _unreachable(url: str, error: object) -> bytes:
    reason = " ".join(str(getattr(error, "strerror", None) or error or "no answer").split())
    reason = reason if len(reason) <= 120 else reason[:117] + "..."
    message = f"GPU node {url} unreachable: {reason}. The GPU views come back when it answers again."
    return json.dumps({"message": message}).encode()


class _GatewaySentences:
    """Kernel starts on the CPU-only side: the node's own sentence, with the node's status.

    jupyter_server's gateway client wraps whatever the node answers, a deliberate 503 refusal
    included, as "Error from Gateway: [<the node's message>] Exception while attempting to connect
    to Gateway server url ... Ensure gateway url is valid and the Gateway instance is running."
    (``gateway_request`` in jupyter_server/gateway/gateway_client.py), and the session handler
    then reports it as HTTP 500 "HTTP 503: Service Unavailable (...)". The node was reached: its
    message is what the user must read (the refusal dialog matches it to the node's refusal).
    """

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = _gateway_error(kwargs.get("exc_info"))
        if error is None:
            super().write_error(status_code, **kwargs)  # type: ignore[misc]
            return
        status, message = error
        self.set_status(status)  # type: ignore[attr-defined]
        self.set_header("Content-Type", "application/json")  # type: ignore[attr-defined]
        self.finish(json.dumps({"message": message, "reason": None}))  # type: ignore[attr-defined]


def _gateway_error(exc_info: Any) -> tuple[int, str] | None:
    """(status, the node's message) when the error is the gateway client's wrapping of an
    answer the node gave; None for anything else (an unreachable node keeps upstream's words)."""
    error = exc_info[1] if isinstance(exc_info, tuple) and len(exc_info) > 1 else None
    seen = 0
    while error is not None and seen < 10:
        if (
            isinstance(error, web.HTTPError)
            and str(error.log_message or "").startswith("Error from Gateway: [")
            and error.args
            and isinstance(error.args[0], str)
            and 400 <= error.status_code < 600
        ):
            return error.status_code, error.args[0]
        error = error.__cause__ or error.__context__
        seen += 1
    return None


class GatewaySessionsHandler(_GatewaySentences, SessionRootHandler):
    """``POST /api/sessions`` on the CPU-only side, with the node's sentences."""


class GatewayKernelsHandler(_GatewaySentences, MainKernelHandler):
    """``POST /api/kernels`` on the CPU-only side, with the node's sentences."""


class KernelStartHandler(MainKernelHandler):
    """``POST /api/kernels`` on the GPU node that keeps the ``env`` a gateway client sends:
    ``KERNEL_*`` variables and the notebook's path (``JPY_SESSION_NAME``), nothing else."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        model = self.get_json_body() or {}
        sent = model.get("env") if isinstance(model, dict) else None
        kept = {
            str(name): value
            for name, value in (sent.items() if isinstance(sent, dict) else ())
            if isinstance(name, str)
            and isinstance(value, str)
            and (name.startswith("KERNEL_") or name == SESSION_VARIABLE)
            and len(value) <= 4096
            and "\0" not in value
        }
        if not kept:
            await super().post()  # type: ignore[misc]
            return
        manager = self.kernel_manager
        kernel_id = await manager.start_kernel(
            kernel_name=model.get("name", manager.default_kernel_name),
            path=model.get("path"),
            kernel_id=model.get("kernel_id"),
            env={**os.environ, **kept},
        )
        reply = await ensure_async(manager.kernel_model(kernel_id))  # type: ignore[no-untyped-call]
        self.set_header("Location", url_path_join(self.base_url, "api", "kernels", kernel_id))
        self.set_status(201)
        self.finish(json.dumps(reply, default=str))


class GatewayAuthorizer(Authorizer):
    """A GPU node serving remote JupyterLabs: kernels, their channels, kernelspecs and the GPU API
    only. Contents, files, terminals, sessions and every other extension are refused (403), so a
    gateway token runs kernels and nothing else."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource in GATEWAY_RESOURCES
