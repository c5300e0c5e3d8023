"""The admin page: every user's slices on this node, with usage; release one or shut its kernel down.

Served by the broker process when it runs as a JupyterHub managed service, behind the hub's
OAuth (:class:`jupyterhub.services.auth.HubOAuthenticated`). Only hub admins and the policy's
``admin_users``/``admin_groups`` get in; anyone else gets 403.

Routes (under the service prefix, e.g. ``/services/vgpu/``):

* ``GET  .``                          the page (HTML; it calls the JSON routes below)
* ``GET  api/slices``                 every slice, usage and GPUs (JSON)
* ``DELETE api/slices/<id>``          release the slice (the kernel keeps running, without a slice)
* ``GET  api/cluster``                the whole cluster from the policy's ``prometheus_url``: every node,
  every slice named (user, holder, request, limit, use, its kernel's idle time), the lines, the top users (JSON)
* ``POST api/slices/<id>/shutdown``   shut the holder down: a kernel through its user's Jupyter
  server (``DELETE /user/<name>/api/kernels/<id>`` with the service's token), which also frees the
  slice; a command, or a kernel whose server cannot be reached, by releasing the slice and sending
  its process SIGTERM (the broker runs as root).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
from typing import Any
from urllib.parse import quote

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..errors import InvalidConfig, SliceNotFound, VGPUError
from ..metrics.cluster import read_cluster
from ..metrics.clusterview import top_users
from ..metrics.prometheus import Prometheus, PrometheusUnavailable
from ..slices import occupancy_of
from ..slices.holders import attribute
from ..slices.usage import slice_usage
from .broker import Broker
from .integration import ENV_HUB_URL

log = logging.getLogger("jupyter_vgpu.admin")


class AdminHandler(HubOAuthenticated, web.RequestHandler):  # type: ignore[misc]
    """Base: an authenticated hub user who is an admin (hub admin or policy admin)."""

    @property
    def broker(self) -> Broker:
        broker: Broker = self.settings["broker"]
        return broker

    async def prepare(self) -> None:
        user = self.current_user
        if user is None:
            if self.request.path.rstrip("/").endswith("api/slices") or "/api/" in self.request.path:
                raise web.HTTPError(403, "Log in to JupyterHub first.")
            self.redirect(self.get_login_url())
            return
        if not await self._is_admin(user):
            raise web.HTTPError(403, f"{user.get('name')} is not a JupyterHub or GPU admin; this page is for admins.")

    async def _is_admin(self, model: dict[str, Any]) -> bool:
        name = str(model.get("name") or "")
        if model.get("kind", "user") != "user":
            return False
        policy = self.broker.policy.current()
        if policy.is_admin(name, list(model.get("groups") or [])):
            return True
        if model.get("admin") is True:
            return True
        # The model a token's scopes allow may leave "admin" out: ask the hub with our own token.
        try:
            answer = await self._hub_api("GET", f"users/{quote(name)}")
        except (HTTPClientError, OSError) as error:
            log.warning("jupyter-vgpu admin page: cannot ask the hub whether %s is an admin: %s", name, error)
            return False
        return bool(answer.get("admin"))

    async def _hub_api(self, method: str, path: str) -> dict[str, Any]:
        url = self.hub_auth.api_url.rstrip("/") + "/" + path
        request = HTTPRequest(url, method=method, headers={"Authorization": f"token {self.hub_auth.api_token}"})
        response = await AsyncHTTPClient().fetch(request)
        data = json.loads(response.body or b"{}")
        return data if isinstance(data, dict) else {}

    def fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.write({"message": message})

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason
        exc = kwargs.get("exc_info")
        if exc and isinstance(exc[1], web.HTTPError) and exc[1].log_message:
            reason = exc[1].log_message % exc[1].args if exc[1].args else exc[1].log_message
        self.set_header("Content-Type", "application/json")
        self.finish({"message": reason})


def slices_report(broker: Broker) -> dict[str, Any]:
    """Every slice with its measured usage, and the GPUs (blocking: run it on a thread)."""
    snapshot = broker.ledger.inventory.snapshot()
    slices = broker.ledger.slices()
    attribution = attribute(snapshot, {s.id: s.pid for s in slices})
    rows = []
    for s in slices:
        row = s.to_dict()
        # The users' own reports are theirs (and unreadable to the broker): measured figures only.
        usage = slice_usage(s, s.pid, attribution, snapshot, None)
        row["memory_used"] = usage.memory_used
        row["usage_source"] = usage.source
        row["holder_text"] = s.describe_holder()
        rows.append(row)
    return {
        "simulated": snapshot.simulated,
        "policy": broker.policy.current().source,
        "policy_error": broker.policy.error,
        "gpus": [g.to_dict() for g in occupancy_of(snapshot, slices, attribution).gpus],
        "slices": rows,
        "waiting": [{**w.to_dict()} for w in broker.ledger.waiting()],
    }


class SlicesAPIHandler(AdminHandler):
    @web.authenticated
    async def get(self) -> None:
        self.write(await asyncio.to_thread(slices_report, self.broker))


def cluster_report(url: str) -> dict[str, Any]:
    """Every node and every slice (named) from the Prometheus at ``url``, and the top users
    (blocking: run it on a thread)."""
    view = read_cluster(Prometheus(url, setting="the policy's prometheus_url"), user=None)
    reply = view.to_dict()
    reply["top_users"] = top_users(view, by="booked")
    reply["top_unused"] = top_users(view, by="unused")
    return reply


class ClusterAPIHandler(AdminHandler):
    @web.authenticated
    async def get(self) -> None:
        url = self.broker.policy.current().prometheus_url
        if not url:
            return self.fail(404, "The policy names no Prometheus: set c.VGPUPolicy.prometheus_url to see the whole cluster (docs/cluster.md).")
        try:
            self.write(await asyncio.to_thread(cluster_report, url))
        except (PrometheusUnavailable, InvalidConfig) as error:
            self.fail(503, f"The cluster cannot be shown: {error} This node's slices are listed as before.")


class SliceAPIHandler(AdminHandler):
    @web.authenticated
    async def delete(self, slice_id: str) -> None:
        who = str(self.current_user.get("name"))
        try:
            freed = await asyncio.to_thread(self.broker.ledger.release, slice_id)
        except SliceNotFound as error:
            return self.fail(404, str(error))
        log.info("jupyter-vgpu admin page: %s released slice %s of %s.", who, freed.id, freed.owner)
        self.write({"released": freed.id, "owner": freed.owner, "message": f"Released slice {freed.id} of {freed.owner}."})


class ShutdownAPIHandler(AdminHandler):
    @web.authenticated
    async def post(self, slice_id: str) -> None:
        who = str(self.current_user.get("name"))
        try:
            found = await asyncio.to_thread(self.broker.ledger.get, slice_id)
        except SliceNotFound as error:
            return self.fail(404, str(error))
        if found.holder_kind == "kernel":
            problem = await self._shutdown_through_server(found.owner, found.holder)
            if problem is None:
                log.info("jupyter-vgpu admin page: %s shut down kernel %s of %s.", who, found.holder, found.owner)
                return self.write({"shutdown": found.id, "how": "server", "message": f"Shut down kernel {found.holder} of {found.owner}."})
            log.warning("jupyter-vgpu admin page: %s; ending the kernel process instead.", problem)
        try:
            ended = await asyncio.to_thread(self.broker.terminate, found.id, by=who)
        except VGPUError as error:
            return self.fail(404 if isinstance(error, SliceNotFound) else 500, str(error))
        self.write({
            "shutdown": ended.id,
            "how": "signal",
            "message": f"Released slice {ended.id} of {ended.owner} and sent its process {ended.pid} SIGTERM.",
        })

    async def _shutdown_through_server(self, owner: str, kernel_id: str) -> str | None:
        """None on success, else why the user's server could not do it."""
        hub_url = os.environ.get(ENV_HUB_URL, "").rstrip("/")
        if not hub_url:
            return f"{ENV_HUB_URL} is not set, so the user's server cannot be reached"
        url = f"{hub_url}/user/{quote(owner)}/api/kernels/{quote(kernel_id)}"
        request = HTTPRequest(url, method="DELETE", headers={"Authorization": f"token {self.hub_auth.api_token}"}, request_timeout=30)
        try:
            await AsyncHTTPClient().fetch(request)
        except HTTPClientError as error:
            return f"{owner}'s server answered {error.code} to DELETE {url}"
        except OSError as error:
            return f"{owner}'s server at {url} cannot be reached: {error}"
        return None


class PageHandler(AdminHandler):
    @web.authenticated
    async def get(self) -> None:
        prefix = self.settings["vgpu_prefix"]
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(PAGE.replace("{{prefix}}", html.escape(prefix)).replace("{{xsrf}}", html.escape(self.xsrf_token.decode())))


def make_app(broker: Broker, prefix: str) -> web.Application:
    """The admin page's tornado application, routed under ``prefix`` (the service prefix)."""
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    return web.Application(
        [
            (prefix, PageHandler),
            (prefix + "oauth_callback", HubOAuthCallbackHandler),
            (prefix + "api/slices", SlicesAPIHandler),
            (prefix + "api/cluster", ClusterAPIHandler),
            (prefix + r"api/slices/([^/]+)", SliceAPIHandler),
            (prefix + r"api/slices/([^/]+)/shutdown", ShutdownAPIHandler),
        ],
        broker=broker,
        vgpu_prefix=prefix,
        cookie_secret=os.urandom(32),
        # gzip for a browser that accepts it: the cluster's reply is ~900 KiB of JSON at 64 nodes, ~100 gzipped
        compress_response=True,
    )


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>GPU slices · jupyter-vgpu</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.4em;text-align:left}th{background:#f5f5f5}
.sim{background:#fdecc8;padding:.1em .5em;border-radius:.3em}button{margin-right:.3em}
.problem{background:#fde2e1;padding:.5em}
</style></head><body>
<h1>GPU slices on this node <span id="sim"></span></h1>
<p id="policy"></p><div id="gpus"></div>
<table><thead><tr><th>User</th><th>Holder</th><th>GPU</th><th>Share</th><th>Reserved</th><th>Used</th><th></th></tr></thead>
<tbody id="rows"></tbody></table>
<section id="cluster" hidden>
<h2>The cluster <small id="cluster-source"></small></h2>
<p id="cluster-problem" class="problem" hidden></p>
<table><thead><tr><th>Node</th><th>GPUs</th><th>Booked</th><th>Used</th><th>Free</th><th>Room on one GPU</th><th>Waiting</th><th>Seen</th></tr></thead>
<tbody id="nodes"></tbody></table>
<h3>Every slice</h3>
<table><thead><tr><th>User</th><th>Node</th><th>GPU</th><th>Holder</th><th>Request</th><th>Limit</th><th>Used</th><th>Utilisation</th><th>Idle</th></tr></thead>
<tbody id="cluster-slices"></tbody></table>
<h3>Top users by memory booked</h3>
<table><thead><tr><th>User</th><th>Booked</th><th>Used</th><th>Booked, unused</th><th>Slices</th></tr></thead>
<tbody id="top"></tbody></table>
<h3>Top users by memory booked but unused</h3>
<table><thead><tr><th>User</th><th>Booked</th><th>Used</th><th>Booked, unused</th><th>Slices</th></tr></thead>
<tbody id="top-unused"></tbody></table>
</section>
<script>
const prefix = "{{prefix}}", xsrf = "{{xsrf}}";
const gib = b => b == null ? "n/a" : (b / 2 ** 30).toFixed(1) + " GiB";
async function act(method, path) {
  const r = await fetch(prefix + path, {method, headers: {"X-XSRFToken": xsrf}});
  const body = await r.json().catch(() => ({}));
  alert(body.message || r.statusText); load();
}
async function load() {
  const data = await (await fetch(prefix + "api/slices", {headers: {"X-XSRFToken": xsrf}})).json();
  document.getElementById("sim").innerHTML = data.simulated ? '<span class="sim">simulated GPUs</span>' : "";
  document.getElementById("policy").textContent = "Policy: " + data.policy + (data.policy_error ? " (last reload failed: " + data.policy_error + ")" : "");
  document.getElementById("gpus").textContent = data.gpus.map(g => `GPU ${g.index} ${g.name}: ${gib(g.memory_reserved)} of ${gib(g.memory_total)} reserved, ${gib(g.memory_free)} free`).join(" · ");
  const rows = document.getElementById("rows"); rows.textContent = "";
  for (const s of data.slices) {
    const tr = rows.insertRow();
    for (const text of [s.owner, s.holder_text, s.gpu_indices.join(", "), s.request_text, gib(s.memory_reserved_total), gib(s.memory_used)]) tr.insertCell().textContent = text;
    const cell = tr.insertCell();
    const release = document.createElement("button"); release.textContent = "Release";
    release.onclick = () => act("DELETE", "api/slices/" + s.id);
    const stop = document.createElement("button"); stop.textContent = s.holder_kind === "kernel" ? "Shut kernel down" : "End command";
    stop.onclick = () => act("POST", "api/slices/" + s.id + "/shutdown");
    cell.append(release, stop);
  }
}
// a kernel's idle time as its server judged it; "" for a command or where no server said it lately
const idle = t => t == null ? "" : t === 0 ? "busy" : t < 120 ? t + " s" : t < 7200 ? Math.floor(t / 60) + " min" : Math.floor(t / 3600) + " h";
const sum = (xs) => xs.some(x => x == null) ? null : xs.reduce((a, b) => a + b, 0);
function cells(tbody, rows) {
  tbody.textContent = "";
  for (const row of rows) { const tr = tbody.insertRow(); for (const text of row) tr.insertCell().textContent = text; }
}
async function cluster() {
  const r = await fetch(prefix + "api/cluster", {headers: {"X-XSRFToken": xsrf}});
  const section = document.getElementById("cluster"), problem = document.getElementById("cluster-problem");
  if (r.status === 404) { section.hidden = true; return; }
  section.hidden = false;
  const data = await r.json().catch(() => ({}));
  if (!r.ok) { problem.hidden = false; problem.textContent = data.message || r.statusText; return; }
  problem.hidden = true;
  document.getElementById("cluster-source").textContent = "from " + data.prometheus;
  cells(document.getElementById("nodes"), data.nodes.map(n => [
    n.hostname + (n.stale ? " (stale: " + n.problem + ")" : ""), n.gpus.length,
    gib(sum(n.gpus.map(g => g.booked))) + " of " + gib(sum(n.gpus.map(g => g.total))), gib(sum(n.gpus.map(g => g.used))),
    gib(sum(n.gpus.map(g => g.free))), gib(Math.max(...n.gpus.map(g => g.free ?? 0))),
    n.waiting.requests == null ? "n/a" : n.waiting.requests + " (" + gib(n.waiting.memory) + ")",
    n.last_seen ? Math.round(data.read_at - n.last_seen) + " s ago" : "never"]));
  cells(document.getElementById("cluster-slices"), data.slices.map(s => [
    s.user, s.hostname, s.gpus.map(g => g.index).join(", "), s.holder, gib(sum(s.gpus.map(g => g.request))),
    s.gpus.every(g => g.limit == null) ? "" : gib(sum(s.gpus.map(g => g.limit ?? g.request))),
    gib(sum(s.gpus.map(g => g.used))), s.gpus.map(g => g.utilization == null ? "n/a" : g.utilization + "%").join(", "),
    idle(s.idle_seconds)]));
  const top = u => [u.user, gib(u.booked), gib(u.used), gib(u.unused), u.slices];
  cells(document.getElementById("top"), data.top_users.map(top));
  cells(document.getElementById("top-unused"), data.top_unused.map(top));
}
load(); cluster(); setInterval(load, 5000); setInterval(cluster, 10000);
</script></body></html>
"""
