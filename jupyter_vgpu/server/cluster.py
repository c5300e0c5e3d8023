"""``GET /api/vgpu/cluster``: the cluster as the site's Prometheus sees it, for this server's user
(docs/rest.md, "The cluster"; docs/cluster.md, "Prometheus").

The server asks Prometheus (``c.VGPUServer.prometheus_url``) on a worker thread, at most once per
``CACHE_SECONDS`` however many tabs poll, and answers only what its user may see: every node's
figures (another user's slices are in them as booked memory) and the user's own slices by name.
It answers the same in gateway mode: the cluster is Prometheus's, not the GPU node's.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import InvalidRequest
from ..metrics.cluster import read_cluster
from ..metrics.clusterhistory import NodeUnknown, history_seconds, read_node_history
from ..metrics.prometheus import Prometheus, PrometheusUnavailable
from .handlers import VGPUHandler

CLUSTER = "jupyter_vgpu_cluster"
#: Replies younger than this are served again (Prometheus scrapes every 15 s by default).
CACHE_SECONDS = 2.0


class ClusterReader:
    """Reads the cluster for ``user`` from ``prometheus``, one read at a time, kept ``CACHE_SECONDS``."""

    def __init__(self, prometheus: Prometheus, user: str) -> None:
        self.prometheus = prometheus
        self.user = user
        self._lock = asyncio.Lock()
        self._reply: tuple[float, dict[str, Any]] | None = None

    async def view(self) -> dict[str, Any]:
        async with self._lock:
            if self._reply is not None and time.monotonic() - self._reply[0] < CACHE_SECONDS:
                return self._reply[1]
            view = await asyncio.to_thread(read_cluster, self.prometheus, user=self.user)
            reply = view.to_dict()
            self._reply = (time.monotonic(), reply)
            return reply

    async def history(self, hostname: str, seconds: int) -> dict[str, Any]:
        """A node's memory over the last ``seconds``: its GPUs' and this user's slices'."""
        return await asyncio.to_thread(read_node_history, self.prometheus, hostname, user=self.user, seconds=seconds)


def reader(url: str) -> ClusterReader | None:
    """The server's reader for the Prometheus at ``url`` (checked already), None without one."""
    if not url:
        return None
    return ClusterReader(Prometheus(url, setting="c.VGPUServer.prometheus_url"), pwd.getpwuid(os.getuid()).pw_name)


class ClusterHandler(VGPUHandler):
    """``GET /api/vgpu/cluster``: every node's GPUs and line, and your slices on every node."""

    #: 64 nodes of 8 GPUs are ~100 KiB of JSON (their GPUs' entries alone 80 KiB), 16 KiB gzipped;
    #: an hour of a node's history 18 KiB.
    compress_from = 4 * 1024

    def reader(self) -> ClusterReader | None:
        """This server's reader, or None after answering 404 (no Prometheus set)."""
        cluster: ClusterReader | None = self.settings.get(CLUSTER)
        if cluster is None:
            self.fail(
                404,
                "This server has no cluster view: an admin sets c.VGPUServer.prometheus_url to the site's Prometheus "
                "(docs/cluster.md, \"Reading the cluster back\").",
            )
        return cluster

    @web.authenticated
    @authorized
    async def get(self) -> None:
        if (cluster := self.reader()) is None:
            return
        try:
            self.write_json(await cluster.view())
        except PrometheusUnavailable as error:
            self.fail(503, unavailable(error))


class NodeHistoryHandler(ClusterHandler):
    """``GET /api/vgpu/cluster/nodes/<hostname>/history?seconds=3600``: a node's GPU memory over
    time (total, booked, used) and what your slices book and use there."""

    @web.authenticated
    @authorized
    async def get(self, hostname: str) -> None:  # type: ignore[override]
        if (cluster := self.reader()) is None:
            return
        try:
            seconds = history_seconds(self.get_query_argument("seconds", None))
            self.write_json(await cluster.history(hostname, seconds))
        except InvalidRequest as error:
            self.fail(400, str(error))
        except NodeUnknown as error:
            self.fail(404, str(error))
        except PrometheusUnavailable as error:
            self.fail(503, unavailable(error))


def unavailable(error: PrometheusUnavailable) -> str:
    return f"The cluster view cannot be shown: {error} Every view of this node works as before."


ROUTES = [(r"/api/vgpu/cluster", ClusterHandler), (r"/api/vgpu/cluster/nodes/([^/]+)/history", NodeHistoryHandler)]
