"""What an admin sets for the jupyter-vgpu server extension (``c.VGPUServer.<name>``): sampling
and history, the watchdog, the idle reclaim and giving bursts back; each checked as it is set,
refused in one sentence. :class:`~.extension.VGPUServer` runs with them."""

from __future__ import annotations

import os
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, default, validate

from ..errors import InvalidConfig
from ..metrics.prometheus import ENV_PROMETHEUS, check_url
from ..units import MAX_WAIT_SECONDS, shorten
from .reclaim.burst import ACTIONS as BURST_ACTIONS
from .watchdog import ACTIONS


class ServerSettings(ExtensionApp):
    """The extension's settings, read as ``c.VGPUServer.<name>``."""

    monitor_interval = Float(
        2.0,
        help="""Seconds between two usage samples. Each sample is one pass over NVML for all
        GPUs and processes plus one read of the ledger, on a worker thread (never the server's
        event loop). It is also how quickly the sidebar, the metrics and the watchdog see a
        change. Shorter costs more CPU; below 0.1 s is refused.""",
    ).tag(config=True)

    history_seconds = Float(
        300.0,
        help="""How many seconds of usage history to keep per slice and per GPU (for the sparklines
        in the sidebar). Kept in memory only; a server restart starts it afresh.""",
    ).tag(config=True)

    history_points = Int(
        60,
        help="""At most this many points of history per slice and per GPU: over history_seconds
        the monitor keeps one point every history_seconds / history_points seconds (never more
        often than monitor_interval). Every point goes into every poll of every open sidebar,
        so more points cost the server CPU and the network bandwidth.""",
    ).tag(config=True)

    dashboard_seconds = Float(
        3600.0,
        help="""How many seconds of history the GPU dashboard shows (per GPU: memory, reservations,
        utilisation, power, temperature, PCIe throughput; per live slice: memory and
        utilisation). Kept in memory only; 0 keeps none.""",
    ).tag(config=True)

    dashboard_step = Float(
        10.0,
        help="""Seconds between two points of the GPU dashboard's history. A point sums up the
        samples of its step (memory: the most seen; the rest: the mean), so no spike is lost.""",
    ).tag(config=True)

    idle_reclaim_after = Float(
        0.0,
        help="""Seconds a kernel's GPU slice may stay idle (no cell run, GPU utilisation 0; a browser
        reconnecting or reloading is not activity) before it is reclaimed for someone it lets in:
        a request in line (or a refused start) that does not fit now and would with the slice
        gone. Its owner gets a notice, then the kernel is shut down (the notebook is kept) and
        the request gets the memory. 0 (the default) never reclaims. Commands (`jupyter vgpu
        run`) and kernels of other servers are never reclaimed.""",
    ).tag(config=True)

    idle_reclaim_notice = Float(
        300.0,
        help="""Seconds between the notice to an idle slice's owner (a JupyterLab notification with
        "Keep it", a line at the notebook's next cell, the status bar counting down) and the
        shutdown. Running a cell or "Keep it" during the notice cancels it.""",
    ).tag(config=True)

    idle_reclaim_mode = Enum(
        ["waiting", "always"],
        default_value="waiting",
        help="""When idle slices are reclaimed: "waiting" (the default) only while someone needs
        the room: a request waits in line, or a kernel start was refused in the last
        idle_reclaim_demand_seconds; "always": whenever one has been idle idle_reclaim_after.""",
    ).tag(config=True)

    idle_reclaim_demand_seconds = Float(
        600.0,
        help="""With idle_reclaim_mode "waiting": a kernel start refused this many seconds ago or
        less still counts as someone needing the room.""",
    ).tag(config=True)

    idle_reclaim_per_user_seconds = Float(
        600.0,
        help="""One user's requests in line and refused starts cause at most one reclaim (the idle
        slices one request needs) in this many seconds, however many places in line they take.
        Another user's requests are bounded the same way in the burst reclaim (the bursts one
        request needs); this server's user's own are not.""",
    ).tag(config=True)

    burst_reclaim_notice = Float(
        60.0,
        help="""Seconds between the notice to a kernel that bursts above its request (an elastic
        slice's, "1/4 GPU, up to 1/2") while someone needs that memory, and burst_reclaim_action.
        At the notice the kernel releases what its frameworks cache (PyTorch, CuPy); a burst given
        back in time ends it. Bursts are reclaimed before idle kernels, the youngest burst first.
        On a hub, the policy's burst_reclaim_notice for this user is the most it can be
        (docs/hub.md, "Bursting on a hub").""",
    ).tag(config=True)

    burst_reclaim_action = Enum(
        list(BURST_ACTIONS),
        default_value="restart",
        help="""What happens to a kernel still bursting when its burst notice runs out: "restart"
        (the default: it keeps its slice, back at its request, and loses its variables),
        "interrupt" (stops the running cell; memory already held stays held), "shutdown" (frees
        the slice too; the notebook is kept) or "warn" (only says so). A kernel within its
        request is never touched. On a hub, the policy's burst_reclaim_action for this user
        applies unless this one gives more back (shutdown, restart, interrupt, warn).""",
    ).tag(config=True)

    accept_kernel_env = Bool(
        False,
        help="""Keep the environment a gateway client sends with a kernel start (the KERNEL_*
        variables and JPY_SESSION_NAME, the notebook's path), as Kernel Gateway does: set on a
        GPU node that remote JupyterLabs use through --gateway-url (`jupyter vgpu gateway` sets
        it). A plain jupyter server ignores that environment.""",
    ).tag(config=True)

    reap_interval = Float(
        10.0,
        help="""Seconds between two sweeps that free the slices of kernels and commands whose
        process has ended (killed, crashed, or a server that went away without cleaning up).
        A kernel shut down normally frees its slice at once; this is the safety net.""",
    ).tag(config=True)

    over_limit_action = Enum(
        list(ACTIONS),
        default_value="warn",
        help="""What to do with a kernel whose processes use more GPU memory than its slice
        reserves (beyond over_limit_tolerance, for longer than over_limit_grace):
        "none" (only show it), "warn" (log it and show a warning in the API and sidebar),
        "interrupt" (as the interrupt button: stops the running cell, memory already held
        stays held), "restart" (frees the memory; the kernel keeps its slice and loses its
        variables), "shutdown" (frees the memory and the slice). Applied once per episode:
        a kernel gets the action again only after it has come back within its limit.
        Slices held by commands (`jupyter vgpu run`) or by kernels of another server are only
        warned about. This watches usage after the fact; it cannot stop an allocation from
        happening (framework limits set at import do that, cooperatively).""",
    ).tag(config=True)

    over_limit_tolerance = Float(
        0.05,
        help="""How far a slice may go over its reservation before it counts as over its limit,
        as a share of the reservation (0.05 = 5%). Frameworks and CUDA allocate in chunks and
        the CUDA context allowance is an estimate, so a small overshoot is normal.""",
    ).tag(config=True)

    over_limit_grace = Float(
        10.0,
        help="""Seconds a slice must stay over its limit before over_limit_action is applied, so a
        short spike (a temporary buffer) is tolerated. 0 acts on the first sample that is over.""",
    ).tag(config=True)

    watchdog_events = Int(
        20,
        help="How many watchdog events to keep (and show in the API) per slice.",
    ).tag(config=True)

    prometheus_url = Unicode(
        help=f"""The site's Prometheus (``http://prometheus:9090``, with a path where it has one; a
        user and password in the URL are sent as basic authentication), which scrapes every node's
        `jupyter vgpu exporter` (or broker): the GPU dashboard's cluster view and
        ``GET /api/vgpu/cluster`` read the cluster from it, showing the user their own slices on
        every node and every node's figures, never another user's names (docs/cluster.md,
        "Prometheus"). Empty: no cluster view. Default: ${ENV_PROMETHEUS}, else empty.""",
    ).tag(config=True)

    @default("prometheus_url")
    def _prometheus_from_env(self) -> str:
        return os.environ.get(ENV_PROMETHEUS, "")

    @validate("prometheus_url")
    def _check_prometheus(self, proposal: Any) -> str:
        text = str(proposal["value"] or "").strip()
        if not text:
            return ""
        try:
            return check_url(text, "c.VGPUServer.prometheus_url")
        except InvalidConfig as error:
            raise TraitError(str(error)) from None

    @validate("monitor_interval")
    def _check_interval(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if not 0.1 <= value <= 3600:
            raise TraitError(f"c.VGPUServer.monitor_interval {shorten(value)} is not allowed; use 0.1 to 3600 seconds.")
        return value

    @validate("history_points", "watchdog_events")
    def _check_count(self, proposal: Any) -> int:
        value = int(proposal["value"])
        if not 1 <= value <= 10_000:
            raise TraitError(f"c.VGPUServer.{proposal['trait'].name} {shorten(value)} is not allowed; use 1 to 10000.")
        return value

    #: The largest value of each number of seconds (or share) that still makes sense.
    _LIMITS = {
        "history_seconds": 7 * 86400.0,
        "dashboard_seconds": 7 * 86400.0,
        "dashboard_step": 3600.0,
        "reap_interval": 3600.0,
        "over_limit_tolerance": 10.0,
        "over_limit_grace": 86400.0,
        "idle_reclaim_after": MAX_WAIT_SECONDS,
        "idle_reclaim_notice": 86400.0,
        "idle_reclaim_demand_seconds": 86400.0,
        "idle_reclaim_per_user_seconds": 86400.0,
        "burst_reclaim_notice": 86400.0,
    }

    @validate(*_LIMITS)
    def _check_not_negative(self, proposal: Any) -> float:
        name = proposal["trait"].name
        value = float(proposal["value"])
        if not 0 <= value <= self._LIMITS[name]:
            raise TraitError(f"c.VGPUServer.{name} {shorten(value)} is not allowed; use 0 to {_plain(self._LIMITS[name])}.")
        return value


def _plain(value: float) -> str:
    """``31622400``, not ``3.16224e+07``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


