"""Remote GPU kernels through jupyter_server's own gateway client (docs/remote.md).

Two sides:

* **The CPU-only side** (``jupyter lab --gateway-url=...``): jupyter_server forwards kernels,
  channels and kernelspecs to the gateway and nothing else, so :class:`GatewayProxyHandler`
  answers ``/api/vgpu/*`` from the GPU node, through the gateway client's connection settings
  (its token, headers, TLS and cookies), and joins the node's slices to this server's sessions by
  kernel id so holders read as notebook paths. Only a short cache is kept here. The notebook's
  path reaches the node with the kernel start: ``JPY_SESSION_NAME`` (which the session manager
  gives every kernel) is added to ``GatewayClient.allowed_envs``.
  The node's refusals keep their status and sentence (:class:`.starts.StartSentences`), and the
  node's default kernel is taken before the first listing or unnamed start.
* **The GPU node**: a plain jupyter server ignores the ``env`` of a kernel start request, so with
  ``c.VGPUServer.accept_kernel_env`` (``jupyter vgpu gateway`` sets it) :class:`KernelStartHandler`
  passes the ``KERNEL_*`` variables and ``JPY_SESSION_NAME`` on to the kernel, as Kernel Gateway
  does; :class:`GatewayAuthorizer` and :func:`serve_node_only` limit the server to kernels,
  kernelspecs and the GPU API, whichever extension added a handler, and
  :class:`SlicedKernelSpecManager` to sliced kernels.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_core.utils import ensure_async
from jupyter_server.auth import Authorizer
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, APIVersionHandler
from jupyter_server.kernelspecs.handlers import KernelSpecResourceHandler
from jupyter_server.services.api.handlers import APISpecHandler, APIStatusHandler
from jupyter_server.services.kernels.handlers import KernelActionHandler, KernelHandler, MainKernelHandler
from jupyter_server.services.kernels.websocket import KernelWebsocketHandler
from jupyter_server.services.kernelspecs.handlers import KernelSpecHandler, MainKernelSpecHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httputil import HTTPServerRequest
from tornado.routing import Matcher, Rule, RuleRouter

from ..launch.errors import KernelStartRefused
from ..launch.refusals import refusals_of
from ..launch.workarounds import CLIENT_NOTEBOOK, names_vgpu_provisioner
from ..units import shorten
from .handlers import VGPUHandler
from .starts import KernelsHandler, SessionsHandler, requester

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
#: Where the CPU-only side notes that it took the node's default kernel name.
DEFAULT_LEARNED = "jupyter_vgpu_node_default_learned"
#: The sliced kernels a refusal names, at most.
MAX_NAMED = 8


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
        refusals = refusals_of(self.kernel_manager)
        viewer = await requester(self)
        if route.startswith("refusals/") and not refusals.may_see(route[len("refusals/") :], viewer):
            # The node cannot tell this server's users apart: the refusals it made for this server
            # are shown here only to the user whose start was refused.
            self.set_status(404)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"message": "No refused kernel start of yours has that id.", "reason": None}))
            return
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
        if route == "refusals" and isinstance(data.get("refusals"), list):
            data["refusals"] = [r for r in data["refusals"] if isinstance(r, dict) and refusals.may_see(str(r.get("id")), viewer)]
        # GET /api/vgpu/sample holds the other routes' replies, one per view: each is joined.
        parts = [data[k] for k in ("slices", "devices", "history") if isinstance(data.get(k), dict)]
        for part in parts if route == "sample" else [data]:
            # one refusal (refusals/<id>) is joined as the list's entries are
            await self._join_sessions({"refusals": [part]} if route.startswith("refusals/") else part)
            part["gateway"] = {"url": client.url, "node": part.get("node")}
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
        runs (only those can be shut down from here). A slice says it whether or not the node
        sent the field: a ``?since=`` reply leaves out what did not change on the node."""
        paths = self._session_paths()
        here = set(self.kernel_manager.list_kernel_ids())
        slices = [e for e in data.get("slices") or [] if isinstance(e, dict)]
        if isinstance(data.get("slice"), dict):
            slices.append(data["slice"])
        entries = list(slices)
        for name in ("waiting", "refusals"):
            entries += [e for e in data.get(name) or [] if isinstance(e, dict)]
        holds = {id(e) for e in slices}
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
            if "running_here" in entry or id(entry) in holds:
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


class GatewaySessionsHandler(SessionsHandler):
    """``POST /api/sessions`` on the CPU-only side: the node's sentences, the node's default kernel."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.get_json_body()
        kernel = body.get("kernel") if isinstance(body, dict) else None
        if not (isinstance(kernel, dict) and (kernel.get("name") or kernel.get("id"))):
            await learn_node_default(self)
        await super().post()  # type: ignore[misc]


class GatewayKernelsHandler(KernelsHandler):
    """``POST /api/kernels`` on the CPU-only side: the node's sentences, the node's default kernel."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.get_json_body()
        if not (isinstance(body, dict) and body.get("name")):
            await learn_node_default(self)
        await super().post()  # type: ignore[misc]


class GatewayKernelSpecsHandler(MainKernelSpecHandler):
    """``GET /api/kernelspecs`` on the CPU-only side, whose ``default`` is the node's from the
    first answer on."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        await learn_node_default(self)
        await super().get()  # type: ignore[misc]


async def learn_node_default(handler: Any) -> None:
    """Take the node's default kernel before the first listing or unnamed start.

    jupyter_server's gateway client adopts the node's default kernel name only as it lists the
    node's kernelspecs, and the kernelspecs API reads the default *before* it lists: until then
    this server offers, and starts, its own default ("python3"), which the node does not serve.
    """
    if handler.settings.get(DEFAULT_LEARNED):
        return
    try:
        await ensure_async(handler.kernel_spec_manager.get_all_specs())
    except Exception:  # the node unreachable: the listing or the start says so itself
        return
    handler.settings[DEFAULT_LEARNED] = True


class KernelStartHandler(KernelsHandler):
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
        if SESSION_VARIABLE in kept:
            # the notebook's path on the client's machine, not under this node's root: the
            # provisioner names the kernel by it (the client maps it back into its own root)
            kept[CLIENT_NOTEBOOK] = kept[SESSION_VARIABLE]
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
    gateway token runs kernels and nothing else. Handlers that never ask the authorizer (JupyterLab's
    workspaces, for one) are refused before they run: with this authorizer the extension routes
    every request through :func:`serve_node_only`'s check."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource in GATEWAY_RESOURCES


class SlicedKernelSpecManager(KernelSpecManager):
    """A GPU node's kernelspecs: those whose metadata names the ``vgpu-provisioner``, so every
    kernel started through the node holds a slice. The others (the plain ``python3`` among them)
    are not listed, and a start that names one is refused in a sentence naming the sliced ones."""

    def find_kernel_specs(self) -> dict[str, str]:
        return {name: folder for name, folder in super().find_kernel_specs().items() if self._sliced_at(folder)}

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        spec: KernelSpec = super().get_kernel_spec(kernel_name)
        if not names_vgpu_provisioner(spec.metadata):
            raise KernelStartRefused(self.unsliced(kernel_name))
        return spec

    def unsliced(self, kernel_name: str) -> str:
        """The sentence for a start or lookup of an unsliced kernelspec."""
        offered = sorted(
            (str((entry.get("spec") or {}).get("display_name") or name), name)
            for name, entry in self.get_all_specs().items()
        )
        if not offered:
            return (
                f"Kernel {shorten(kernel_name)} holds no GPU slice, and this GPU node has no sliced kernel to offer "
                "instead: install them on the node with `jupyter vgpu kernelspec install --defaults`."
            )
        named = ", ".join(f'"{display}" ({name})' for display, name in offered[:MAX_NAMED])
        more = f" and {len(offered) - MAX_NAMED} more" if len(offered) > MAX_NAMED else ""
        return f"Kernel {shorten(kernel_name)} holds no GPU slice, and this GPU node starts sliced kernels only: {named}{more}."

    def default_name(self, configured: str) -> str | None:
        """The node's default kernel: the configured one where it is sliced, else the first
        sliced one by name; None where there is none."""
        names = sorted(self.find_kernel_specs())
        return configured if configured in names else (names[0] if names else None)

    def _sliced_at(self, folder: str) -> bool:
        try:
            return names_vgpu_provisioner(self.kernel_spec_class.from_resource_dir(folder).metadata)
        except Exception:  # no kernel.json (ipykernel's own python3), a broken one: not a slice
            return False


def serve_node_only(serverapp: Any, log: Any) -> None:
    """Make a server whose authorizer is :class:`GatewayAuthorizer` a GPU node and nothing else.

    The authorizer is asked only by handlers that call it (``@authorized``); JupyterLab's
    workspaces, settings and pages, and other extensions' handlers, do not. So every request is
    first routed here: unless the handler that would serve it is one of :data:`NODE_HANDLERS` (or
    the GPU API's), it is refused, whichever extension added that handler and when. And the
    node's default kernel becomes a sliced one (with :class:`SlicedKernelSpecManager`).
    """
    router = serverapp.web_app.default_router
    router.rules.insert(0, Rule(_NotServed(router), NotServedHandler))
    specs, kernels = serverapp.kernel_spec_manager, serverapp.kernel_manager
    if not isinstance(specs, SlicedKernelSpecManager):
        return
    default = specs.default_name(kernels.default_kernel_name)
    if default is None:
        log.error(
            "jupyter-vgpu: this GPU node has no sliced kernelspec, so it starts no kernel: install them with "
            "`jupyter vgpu kernelspec install --defaults`."
        )
    elif default != kernels.default_kernel_name:
        log.info("jupyter-vgpu: the default kernel is %s (sliced), not %s.", default, kernels.default_kernel_name)
        kernels.default_kernel_name = default


#: What a GPU node serves besides the GPU API: kernels, their actions and channels, kernelspecs
#: and their files, /api's version, status and spec (not /api/me, nor /api/resolvePath, which
#: would tell whether a file exists on the node).
NODE_HANDLERS: frozenset[type] = frozenset(
    {
        MainKernelHandler, KernelsHandler, KernelStartHandler, KernelHandler, KernelActionHandler,
        KernelWebsocketHandler, MainKernelSpecHandler, KernelSpecHandler, KernelSpecResourceHandler,
        APIVersionHandler, APIStatusHandler, APISpecHandler,
    }
)  # fmt: skip


class _NotServed(Matcher):
    """Matches the requests a GPU node does not serve: those whose handler (as the rest of the
    router would pick it) is not one of the node's."""

    def __init__(self, router: RuleRouter) -> None:
        self.router = router

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        handler = self._handler(self.router, request)
        if handler is None:
            return None  # nothing serves it: the server's own 404
        served = handler in NODE_HANDLERS or (isinstance(handler, type) and issubclass(handler, VGPUHandler))
        return None if served else {}

    def _handler(self, router: RuleRouter, request: HTTPServerRequest) -> Any:
        for rule in router.rules:
            if rule.matcher is self or rule.matcher.match(request) is None:
                continue
            if isinstance(rule.target, RuleRouter):
                found = self._handler(rule.target, request)
                if found is not None:
                    return found
                continue
            return rule.target
        return None


class NotServedHandler(APIHandler):
    """Every request a GPU node does not serve: 403 and a sentence, before any handler runs."""

    async def prepare(self) -> None:  # type: ignore[override]
        self.set_status(403)
        self.set_header("Content-Type", "application/json")
        path = self.request.path
        message = (
            f"{shorten(path)} is not served here: this GPU node (`jupyter vgpu gateway`) serves kernels, "
            "kernelspecs and the GPU API only."
        )
        self.finish(json.dumps({"message": message, "reason": None}))
