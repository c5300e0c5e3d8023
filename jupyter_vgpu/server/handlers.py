"""REST handlers for ``/api/vgpu/...`` (the JSON contract is docs/rest.md).

Every handler requires a logged-in user and is authorised against resource ``vgpu`` (``read``
for GET, ``write`` for DELETE). Handlers read the monitor's latest sample, which is at most one
interval old; the only blocking work (releasing a slice) runs on the monitor's worker thread.
"""

from __future__ import annotations

import gzip
import os
from typing import Any

import orjson
from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..errors import InvalidRequest, LeftLine, NotPermitted, SliceNotFound, VGPUError
from ..launch.launchers import launcher_of
from ..launch.refusals import refusals_of
from ..slices import Slice, Ticket
from ..slices.records import Waiter
from ..units import shorten
from .changes import Changes
from .dashboard import DashboardHistory
from .elsewhere import elsewhere_view, kernelspec_launchers, leave_line
from .kernelinfo import KernelInfo
from .monitor import UsageMonitor
from .reclaim import NoticeBoard, Reclaim
from .starts import requester
from .views import (
    devices_view,
    history_view,
    host_view,
    kernelspecs_stamp,
    machine_view,
    slice_view,
    slices_view,
)
from .watchdog import Watchdog

MONITOR = "jupyter_vgpu_monitor"
DASHBOARD = "jupyter_vgpu_dashboard"
RECLAIM = "jupyter_vgpu_reclaim"
WATCHDOG = "jupyter_vgpu_watchdog"
CHANGES = "jupyter_vgpu_changes"
SPEC_LAUNCHERS = "jupyter_vgpu_spec_launchers"  # kernelspecs by launcher, with the folders' stamp
#: At most this many kernels' host use in one ``GET /api/vgpu/sample`` (a tab follows one).
MAX_HOSTS = 8


class VGPUHandler(APIHandler):
    """Base: the monitor and watchdog of this server, and what it knows about its kernels."""

    auth_resource = "vgpu"

    @property
    def monitor(self) -> UsageMonitor:
        monitor: UsageMonitor = self.settings[MONITOR]
        return monitor

    @property
    def watchdog(self) -> Watchdog:
        watchdog: Watchdog = self.settings[WATCHDOG]
        return watchdog

    @property
    def reclaim(self) -> Reclaim:
        reclaim: Reclaim = self.settings[RECLAIM]
        return reclaim

    @property
    def board(self) -> NoticeBoard:
        """The reclaim's notices and idle times, which the views show."""
        return self.reclaim.board

    async def kernels(self) -> dict[str, KernelInfo]:
        """This server's kernels: kernelspec name and notebook path (from the session manager)."""
        manager = self.kernel_manager
        paths: dict[str, str] = {}
        sessions: list[dict[str, Any]] = await ensure_async(self.session_manager.list_sessions())  # type: ignore[no-untyped-call]
        for session in sessions:
            kernel = session.get("kernel") or {}
            if kernel.get("id") and session.get("path"):
                paths[kernel["id"]] = session["path"]
        result = {}
        for kernel_id in manager.list_kernel_ids():
            try:
                name = manager.get_kernel(kernel_id).kernel_name
            except KeyError:  # shut down while we looked
                continue
            result[kernel_id] = KernelInfo(name=name or None, path=paths.get(kernel_id))
        return result

    async def spec_launchers(self, stamp: str | None = None) -> dict[str, list[str]]:
        """The display names of this server's kernelspecs by the launcher each names (other than
        ``local``), read again only when a kernelspec folder changed (``stamp``: the folders'
        :func:`.views.kernelspecs_stamp`, when the caller has it)."""
        if stamp is None:
            stamp = await self.kernelspecs_stamp()
        cache: dict[str, Any] = self.settings.setdefault(SPEC_LAUNCHERS, {})
        if cache.get("stamp") != stamp:
            try:
                specs = await ensure_async(self.kernel_spec_manager.get_all_specs())
            except Exception as error:  # a broken kernelspec is the kernel list's business
                self.log.debug("jupyter-vgpu: could not read the kernelspecs: %s", error)
                specs = {}
            cache.update(stamp=stamp, found=kernelspec_launchers(specs))
        found: dict[str, list[str]] = cache["found"]
        return found

    async def kernelspecs_stamp(self) -> str:
        """What changes when a kernelspec of this server is installed, removed or rewritten."""
        stamp: str = await self.monitor.call(kernelspecs_stamp, list(self.kernel_spec_manager.kernel_dirs))
        return stamp

    def kernel_pid(self, kernel_id: str) -> int | None:
        """The pid of this server's kernel ``kernel_id`` (None: not ours, or no process yet)."""
        try:
            pid = getattr(self.kernel_manager.get_kernel(kernel_id).provisioner, "pid", None)
        except (KeyError, web.HTTPError):  # jupyter_server's kernel manager answers 404 for ids not its own
            return None
        return pid if isinstance(pid, int) and pid > 0 else None

    def since(self, name: str = "since") -> float:
        """``?since=<seconds since the epoch>``: only history points taken after it (a poller
        passes the ``taken_at`` of its previous answer and appends what comes back). Empty or
        absent: 0, every point."""
        text = self.get_query_argument(name, "") or "0"
        try:
            value = float(text)
        except ValueError:
            raise web.HTTPError(400, f"{name} must be a time in seconds since the epoch") from None
        return value if value == value else 0.0  # NaN: no filter

    #: Replies of at least this many bytes go gzip-compressed to a client that accepts it (None: never).
    compress_from: int | None = None

    def write_json(self, data: dict[str, Any]) -> None:
        """Answer ``data`` as JSON (orjson: a full reply of 64 slices' history is ~300 KiB, which
        the standard library's encoder took 7 ms to write, orjson 0.5; numbers as keys become
        strings, as ``json`` makes them), compressed as :attr:`compress_from` says."""
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        body = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
        if self.compress_from is not None:
            self.add_header("Vary", "Accept-Encoding")
            if len(body) >= self.compress_from and "gzip" in self.request.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body, compresslevel=6, mtime=0)
                self.set_header("Content-Encoding", "gzip")
        self.finish(body)

    def fail(self, status: int, message: str) -> None:
        """Answer ``{"message": ...}`` with ``status``. (Not ``HTTPError``: tornado treats its
        message as a %-format, and ours quote user input and file paths.)"""
        self.log.info("jupyter-vgpu: %s %s: %s", status, self.request.path, message)
        self.set_status(status)
        self.write_json({"message": message, "reason": None})


class DevicesHandler(VGPUHandler):
    """``GET /api/vgpu/devices``: every GPU with its memory, reservations and utilisation."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        sample = await self.monitor.current()
        reply = devices_view(sample, self.monitor, self.watchdog, self.since())
        reply["host"] = await self.monitor.call(machine_view)
        self.write_json(reply)


class SlicesHandler(VGPUHandler):
    """``GET /api/vgpu/slices``: every slice with its holder and live usage; the waiting line.
    With ``?since=``, of each slice only what changed after it (:mod:`.changes`)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        sample = await self.monitor.current()
        since = self.since()
        reply = slices_view(sample, self.monitor, self.watchdog, await self.kernels(), since, await self.spec_launchers(), board=self.board)
        changes: Changes = self.settings[CHANGES]
        self.write_json(changes.slices_reply(reply, since))


class SampleHandler(VGPUHandler):
    """``GET /api/vgpu/sample``: one sample for every view of a browser tab in one request (the
    sidebar, the status bar, the dashboard): the slices and the line (``?since=``), the GPUs when
    asked (``?devices=<since>``), the dashboard's history when asked (``?history=<since>``), and
    the host use of the kernels named by ``?host=<kernel id>`` on their slices. With ``?since=``
    the slices are what changed after it, as ``GET /api/vgpu/slices?since=`` says them
    (:mod:`.changes`); a slice's ``host`` is this reply's own, sent whenever asked."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        sample = await self.monitor.current()
        kernels = await self.kernels()
        since = self.since()
        changes: Changes = self.settings[CHANGES]
        stamp = await self.kernelspecs_stamp()  # the kernelspecs' launchers and the reply's kernelspecs
        launchers = await self.spec_launchers(stamp)
        slices = changes.slices_reply(slices_view(sample, self.monitor, self.watchdog, kernels, since, launchers, board=self.board), since)
        reply: dict[str, Any] = {"slices": slices}
        if self.get_query_argument("devices", None) is not None:
            reply["devices"] = devices_view(sample, self.monitor, self.watchdog, self.since("devices"))
            reply["devices"]["host"] = await self.monitor.call(machine_view)
        reply["kernelspecs"] = stamp
        if self.get_query_argument("history", None) is not None:
            dashboard: DashboardHistory = self.settings[DASHBOARD]
            reply["history"] = history_view(sample, self.monitor, dashboard, kernels, self.since("history"))
        hosts = set(self.get_query_arguments("host")[:MAX_HOSTS])
        elsewhere = {row.kernel_id for row in sample.elsewhere}  # kernels elsewhere: here is only what reaches them
        for view in slices["slices"]:  # after the changes are noted: who asks for which host varies
            if view["kernel_id"] not in hosts:
                continue
            if view["kernel_id"] in elsewhere:
                view["host"] = None
                continue
            pid = self.kernel_pid(view["kernel_id"])
            usage = sample.find(view["id"])
            if usage is not None:  # its launcher says which process of this host is the kernel, if any
                pid = launcher_of(usage.slice.labels).host_process(pid)
            view["host"] = await self.monitor.call(host_view, pid) if pid is not None else None
        self.write_json(reply)


class SliceHandler(VGPUHandler):
    """``GET /api/vgpu/slices/<id>``: one slice; ``DELETE``: release a slice held by a command."""

    @web.authenticated
    @authorized
    async def get(self, slice_id: str) -> None:
        sample = await self.monitor.current()
        usage = sample.find(slice_id)
        if usage is None:
            return self.fail(404, f"No slice {shorten(slice_id)} exists; GET /api/vgpu/slices lists them.")
        kernels = await self.kernels()
        self.write_json(slice_view(usage, self.monitor, self.watchdog, kernels, self.since(), sample.taken_at, board=self.board))

    @web.authenticated
    @authorized
    async def delete(self, slice_id: str) -> None:
        ledger = self.monitor.ledger
        if ledger is None:
            return self.fail(503, self.monitor.problem or "The jupyter-vgpu ledger is not available.")
        try:
            found: Slice = await self.monitor.call(ledger.get, slice_id)
        except SliceNotFound as error:
            return self.fail(404, str(error))
        except InvalidRequest as error:  # the node broker bounds what an id may be
            return self.fail(400, str(error))
        if found.holder_kind == "kernel":
            return self.fail(
                409,
                f"Slice {found.id} is held by kernel {found.holder}; shut the kernel down instead "
                "(that frees its slice).",
            )
        try:
            await self.monitor.call(ledger.release, found.id)
        except SliceNotFound as error:  # released by someone else meanwhile
            return self.fail(404, str(error))
        except NotPermitted as error:
            return self.fail(403, str(error))
        self.log.info("jupyter-vgpu: released slice %s of %s at the user's request.", found.id, found.holder)
        await self.monitor.refresh()
        self.set_status(204)
        self.finish()


class KeepHandler(VGPUHandler):
    """``POST /api/vgpu/slices/<slice_id>/keep``: the owner's "Keep it" for an idle slice: counts
    as activity, and cancels a reclaim notice."""

    @web.authenticated
    @authorized
    async def post(self, slice_id: str) -> None:
        sample = await self.monitor.current()
        usage = sample.find(slice_id)
        if usage is None:
            return self.fail(404, f"No slice {shorten(slice_id)}; GET /api/vgpu/slices lists them.")
        if usage.slice.uid != self.monitor.uid:
            return self.fail(403, f"Slice {slice_id} is another user's; only its owner can keep it.")
        cancelled = self.reclaim.keep(slice_id)
        self.write_json({"slice_id": slice_id, "kept": True, "notice_cancelled": cancelled})


class KernelHandler(VGPUHandler):
    """``GET /api/vgpu/kernels/<kernel_id>``: one kernel's slice and usage."""

    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        sample = await self.monitor.current()
        kernels = await self.kernels()
        usage = sample.for_kernel(kernel_id)
        if usage is None and kernel_id not in kernels:
            return self.fail(
                404, f"No kernel {shorten(kernel_id)} runs on this server, and no GPU slice is held for that kernel id."
            )
        view = slice_view(usage, self.monitor, self.watchdog, kernels, self.since(), sample.taken_at, board=self.board) if usage is not None else None
        pid = self.kernel_pid(kernel_id)
        if usage is not None:  # its launcher says which process of this host is the kernel, if any
            pid = launcher_of(usage.slice.labels).host_process(pid)
        row = next((row for row in sample.elsewhere if row.kernel_id == kernel_id), None)
        if row is not None:  # a kernel elsewhere: its row is its slice, and here is only what reaches it
            pid = None
            if row.running:
                view = elsewhere_view(row, self.watchdog, kernels)
        host = await self.monitor.call(host_view, pid) if pid is not None else None
        self.write_json({"kernel_id": kernel_id, "slice": view, "host": host})


class HistoryHandler(VGPUHandler):
    """``GET /api/vgpu/history?since=<time>``: the GPU dashboard's hour of history per GPU and
    per live slice (points after ``since`` only)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        sample = await self.monitor.current()
        dashboard: DashboardHistory = self.settings[DASHBOARD]
        self.write_json(history_view(sample, self.monitor, dashboard, await self.kernels(), self.since()))


class RefusalsHandler(VGPUHandler):
    """``GET /api/vgpu/refusals?since=<time>``: this server's refused kernel starts that the user
    asked for, newest first (the last 50, none older than ten minutes), with the structure of each
    refusal."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        viewer = await requester(self)
        self.write_json({"refusals": refusals_of(self.kernel_manager).since(self.since(), owner=viewer)})


class RefusalHandler(VGPUHandler):
    """``GET /api/vgpu/refusals/<refusal_id>``: one refused kernel start, by the id its refused
    request was answered with (JupyterLab lays out the refusal from it); 404 for anyone but the
    user who asked for the start."""

    @web.authenticated
    @authorized
    async def get(self, refusal_id: str) -> None:
        refusal = refusals_of(self.kernel_manager).get(refusal_id, await requester(self))
        if refusal is None:
            return self.fail(
                404, f"No refused kernel start of yours has id {shorten(refusal_id)} (refusals are kept ten minutes)."
            )
        self.write_json(refusal)


class WaitingHandler(VGPUHandler):
    """``DELETE /api/vgpu/waiting/<ticket>``: take one of your requests out of the line; its
    kernel start then fails with "Stopped waiting in line ... cancelled"."""

    @web.authenticated
    @authorized
    async def delete(self, ticket: str) -> None:
        if not ticket.isdigit() and await self._leave_elsewhere(ticket):
            return
        ledger = self.monitor.ledger
        if ledger is None:
            return self.fail(503, self.monitor.problem or "The jupyter-vgpu ledger is not available.")
        if not (ticket.isascii() and ticket.isdigit()) or len(ticket) > 18:
            return self.fail(400, f"{shorten(ticket)} is not a place in line; GET /api/vgpu/slices lists them.")
        waiters: list[Waiter] = await self.monitor.call(ledger.waiting)
        waiter = next((w for w in waiters if w.ticket == int(ticket)), None)
        if waiter is None:
            return self.fail(404, f"No request waits in line with ticket {ticket}; it may have got its slice or left.")
        if waiter.uid != self.monitor.uid:
            return self.fail(403, f"The request with ticket {ticket} is another user's; only they can cancel it.")
        try:
            await self.monitor.call(ledger.leave_queue, Ticket(waiter.ticket, waiter.request))
        except NotPermitted as error:
            return self.fail(403, str(error))
        self.log.info("jupyter-vgpu: ticket %s (%s) left the line at the user's request.", ticket, waiter.request.describe())
        await self.monitor.refresh()
        self.set_status(204)
        self.finish()

    async def _leave_elsewhere(self, ticket: str) -> bool:
        """A kernel of this server waiting in another engine's line (its launcher's row id, as
        ``<launcher>-<id>``): its launcher takes it out. False when the ticket is no launcher's."""
        try:
            left = await leave_line(ticket, dict(os.environ))
        except InvalidRequest as error:
            self.fail(400, str(error))
            return True
        except LeftLine as error:
            self.fail(404, str(error))
            return True
        except VGPUError as error:  # the engine does not answer: an ending kernel stays listed, its end retried
            self.fail(503, str(error))
            return True
        if left is None:
            return False
        self.log.info("jupyter-vgpu: %s left its engine's line at the user's request.", ticket)
        await self.monitor.refresh()
        self.set_status(204)
        self.finish()
        return True


#: What ``GET /api/vgpu`` lists: (method, path under the base URL, what it answers); docs/rest.md
#: has each in full. Every route of :func:`routes` is here (tests/server/test_api.py checks).
ENDPOINTS = (
    ("GET", "api/vgpu/devices", "every GPU: memory, reservations, use, utilisation"),
    ("GET", "api/vgpu/slices", "every slice with its holder and live use, and the waiting line (?since=: what changed)"),
    ("GET", "api/vgpu/slices/<slice_id>", "one slice"),
    ("DELETE", "api/vgpu/slices/<slice_id>", "release a slice a command holds"),
    ("POST", "api/vgpu/slices/<slice_id>/keep", "keep an idle slice: cancels a reclaim notice"),
    ("GET", "api/vgpu/kernels/<kernel_id>", "one kernel's slice and use"),
    ("GET", "api/vgpu/sample", "one sample for a browser tab's views: slices, GPUs, history, host use"),
    ("GET", "api/vgpu/history", "the GPU dashboard's hour of history (?since=)"),
    ("GET", "api/vgpu/refusals", "your refused kernel starts of the last ten minutes"),
    ("GET", "api/vgpu/refusals/<refusal_id>", "one refused kernel start"),
    ("DELETE", "api/vgpu/waiting/<ticket>", "take your request out of the waiting line"),
    ("GET", "api/vgpu/cluster", "every node's GPUs and line, and your slices on every node (from the site's Prometheus)"),
    ("GET", "api/vgpu/cluster/nodes/<hostname>/history", "a node's GPU memory over time, and your slices' there (?seconds=)"),
)


class IndexHandler(VGPUHandler):
    """``GET /api/vgpu``: the GPU API's endpoints under this server's base URL, so the path the
    README's diagram names answers (it answered 404). Behind ``--gateway-url`` this server answers
    it itself: the endpoints are its own."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json(
            {
                "endpoints": [
                    {"method": method, "path": self.base_url + path, "answers": answers} for method, path, answers in ENDPOINTS
                ],
                "docs": "docs/rest.md in the jupyter-vgpu repository",
            }
        )


#: ``GET /api/vgpu`` (and ``/api/vgpu/``), never forwarded to a GPU node.
INDEX_ROUTE = (r"/api/vgpu/?", IndexHandler)


def routes() -> list[tuple[str, type[VGPUHandler]]]:
    """URL patterns relative to the server's base_url (the extension joins them onto it)."""
    return [
        (r"/api/vgpu/devices", DevicesHandler),
        (r"/api/vgpu/sample", SampleHandler),
        (r"/api/vgpu/slices", SlicesHandler),
        (r"/api/vgpu/slices/([^/]+)", SliceHandler),
        (r"/api/vgpu/slices/([^/]+)/keep", KeepHandler),
        (r"/api/vgpu/kernels/([^/]+)", KernelHandler),
        (r"/api/vgpu/history", HistoryHandler),
        (r"/api/vgpu/refusals", RefusalsHandler),
        (r"/api/vgpu/refusals/([^/]+)", RefusalHandler),
        (r"/api/vgpu/waiting/([^/]+)", WaitingHandler),
    ]
