"""The jupyter_server extension: REST API, usage monitor, watchdog and Prometheus metrics.

``pip install jupyter-vgpu`` enables it (jupyter-config/jupyter_server_config.d). Every option
below is ``c.VGPUServer.<name>`` in ``jupyter_server_config.py`` (or ``jupyter_vgpu_config.py``);
where the ledger is and which GPUs (real or simulated) to use are ``c.VGPU.*`` settings shared
with kernels and commands (:mod:`jupyter_vgpu.config`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from traitlets import TraitError
from traitlets.config.loader import DeferredConfig

from .._version import __version__
from ..config import load_settings
from ..enforcement import offered_by, setting_problems
from ..errors import InvalidConfig, VGPUError
from ..gpus.context import context_allowance
from ..launch.errors import OneLineRefusals
from ..launch.refusals import refusals_of
from ..launch.workarounds import check_provisioner_configs, forget_failed_starts
from ..ledger import Ledger, open_ledger
from ..metrics.counters import EventCounts
from ..slices import terms
from ..slices.occupancy import GPUOccupancy
from ..units import shorten
from . import cluster, gateway, handlers, starts
from .changes import Changes
from .dashboard import DashboardHistory
from .elsewhere import clean_up
from .metrics import collector
from .monitor import Sample, UsageMonitor
from .reclaim import BurstSource, IdleSource, Reclaim
from .settings import ServerSettings
from .watchdog import Watchdog, leave_notice


class VGPUServer(ServerSettings):
    """GPU slices in Jupyter Server: who uses what, and what happens to a kernel over its slice."""

    name = "jupyter_vgpu"
    version = __version__
    description = __doc__ or ""
    load_other_extensions = True

    def update_config(self, config: Any) -> None:
        """Take the server's config; a value that cannot work is named in the log in one line and
        keeps its default, while every other ``c.VGPUServer`` option applies (traitlets rolls a
        whole batch back on one error, so the options are then set one by one): one bad number
        never weakens the watchdog's action, and the extension still runs."""
        try:
            super().update_config(config)
            return
        except TraitError:
            pass
        section = config.get(type(self).__name__) if hasattr(config, "get") else None
        for name, value in dict(section or {}).items():
            if not self.has_trait(name):
                continue
            try:
                if isinstance(value, DeferredConfig):  # from the command line: text the trait parses
                    value = value.get_value(self.traits()[name])
                setattr(self, name, value)
            except TraitError as error:
                self.log.error(
                    "jupyter-vgpu: %s c.VGPUServer.%s keeps its default (%s); the other options apply.",
                    error,
                    name,
                    shorten(self.trait_defaults(name)),
                )

    def _config_file_name_default(self) -> str:
        # c.VGPUServer.* may sit next to c.VGPU.* in jupyter_vgpu_config.py.
        return "jupyter_vgpu_config"

    def initialize_settings(self) -> None:
        """Open the ledger and build the monitor and watchdog. Never raises: a broken setting
        (a bad number, an unusable ledger, a bad simulation spec) leaves the API answering
        ``available: false`` with the one-sentence reason, and the server running."""
        assert self.serverapp is not None
        self.gateway_url: str | None = None
        self.settings[cluster.CLUSTER] = cluster.reader(self.prometheus_url)
        if self.serverapp.gateway_config.gateway_enabled:
            # Kernels run on the GPU node behind the gateway: so does every slice. No ledger here.
            self.gateway_url = str(self.serverapp.gateway_config.url)
            gateway.allow_session_name()
            self.log.info("jupyter-vgpu: the GPU API answers from the GPU node at %s (gateway mode).", self.gateway_url)
            return
        ledger, problem, simulated = self._open_ledger()
        self._cluster_from_policy(ledger)
        manager = self.serverapp.kernel_manager
        for logger in {id(log): log for log in (self.serverapp.log, manager.log)}.values():
            if not any(isinstance(f, OneLineRefusals) for f in logger.filters):
                logger.addFilter(OneLineRefusals())  # a refused start: one line, not jupyter_client's traceback
        self._watch(ledger, manager, problem, simulated)
        idle_after = self._reclaim(ledger, manager)
        self.dashboard = DashboardHistory(self.dashboard_seconds, max(self.dashboard_step, self.monitor_interval))

        async def record(sample: Sample) -> None:
            self.dashboard.add(sample)

        self.monitor.listeners.append(record)
        self.settings[handlers.MONITOR] = self.monitor
        self.settings[handlers.DASHBOARD] = self.dashboard
        self.settings[handlers.WATCHDOG] = self.watchdog
        self.settings[handlers.CHANGES] = Changes()
        where = f"ledger {ledger.path}, {ledger.inventory.describe()}" if ledger is not None else "no ledger"
        self.log.info(
            "jupyter-vgpu: monitoring every %.3g s (%s); over-limit action: %s; idle reclaim: %s; a burst someone needs: %s.",
            self.monitor_interval,
            where,
            self.over_limit_action,
            f"after {idle_after:g} s idle{' (the hub policy)' if idle_after != self.idle_reclaim_after else ''}, "
            f"{self.idle_reclaim_notice:g} s notice, {self.idle_reclaim_mode}"
            if idle_after
            else "off",
            self.burst_terms.describe(),
        )

    def _open_ledger(self) -> tuple[Ledger | None, str | None, bool]:
        """The ledger, or why there is none (said in the log and by the API); whether the GPUs are
        simulated. The tiers' settings and the kernelspecs' provisioner configs are checked too."""
        assert self.serverapp is not None
        ledger: Ledger | None = None
        problem = None
        simulated = False
        try:
            settings = load_settings(self.serverapp.config)
            simulated = bool(settings.resolved_simulate)
            ledger = open_ledger(settings)
        except (VGPUError, TraitError) as error:
            problem = str(error)
        except Exception as error:  # a bug must not take the server (or its shutdown) down
            problem = f"jupyter-vgpu could not start: {shorten(error)}."
            self.log.exception("jupyter-vgpu: opening the ledger failed")
        if problem:
            self.log.error("jupyter-vgpu: %s The GPU API answers with this message until it is fixed.", problem)
        for tier_problem in setting_problems():
            self.log.error("jupyter-vgpu: %s", tier_problem)
        if ledger is not None:
            self._log_tiers(ledger)
        check_provisioner_configs()
        return ledger, problem, simulated

    def _watch(self, ledger: Ledger | None, manager: Any, problem: str | None, simulated: bool) -> None:
        """The usage monitor and the watchdog it hands each sample to."""
        self.monitor = UsageMonitor(
            ledger,
            interval=self.monitor_interval,
            history_seconds=self.history_seconds,
            history_points=self.history_points,
            reap_interval=self.reap_interval,
            kernel_pids=lambda: kernel_pids(manager),
            log=self.log,
            problem=problem,
            simulated=simulated,
        )
        self.watchdog = Watchdog(
            manager,
            action=self.over_limit_action,
            tolerance=self.over_limit_tolerance,
            grace=self.over_limit_grace,
            max_events=self.watchdog_events,
            log=self.log,
            on_action=self.monitor.reap_soon,
            ledger_path=ledger.path if ledger is not None else None,
        )
        notices = ledger.path if ledger is not None else None

        async def tell_unbooked(sample: Sample) -> None:
            for usage, message in sample.unbooked:  # a kernel whose slice was not booked again after a reset
                await leave_notice(notices, usage, "rebook", "done", message, self.log)

        self.monitor.listeners += [tell_unbooked, self.watchdog.check]

    def _cluster_from_policy(self, ledger: Ledger | None) -> None:
        """The hub policy's Prometheus, where this server sets none (the broker's ``info``)."""
        info = getattr(ledger, "info", None) or {}
        url = info.get("prometheus_url")
        if self.prometheus_url or not url:
            if self.prometheus_url:
                self.log.info("jupyter-vgpu: the cluster view reads Prometheus at %s.", self.settings[cluster.CLUSTER].prometheus.url)
            return
        try:
            self.settings[cluster.CLUSTER] = cluster.reader(str(url))
        except InvalidConfig as error:  # the broker checked it: a broker of another version
            self.log.warning("jupyter-vgpu: no cluster view: the hub policy's %s", error)
            return
        self.log.info("jupyter-vgpu: the cluster view reads Prometheus at %s (the hub policy's).", self.settings[cluster.CLUSTER].prometheus.url)

    def _reclaim(self, ledger: Ledger | None, manager: Any) -> float:
        """The reclaim engine on the monitor's samples, its sources asked in order: bursts given
        back, then idle kernels shut down; after how many idle seconds it reclaims (0: never)."""
        info = getattr(ledger, "info", None)  # the node broker's, with the hub policy for this user
        idle_after = terms.idle_reclaim_after(self.idle_reclaim_after, info)
        self.burst_terms = terms.burst_terms(self.burst_reclaim_notice, self.burst_reclaim_action, info)
        ledger_path = str(ledger.path) if ledger is not None else None
        bursts = BurstSource(
            manager,
            self.watchdog,
            notice=self.burst_terms.notice,
            action=self.burst_terms.action,
            per_user_seconds=self.idle_reclaim_per_user_seconds,
            log=self.log,
        )
        idle = IdleSource(
            manager,
            self.watchdog,
            after=idle_after,
            notice=self.idle_reclaim_notice,
            mode=self.idle_reclaim_mode,
            per_user_seconds=self.idle_reclaim_per_user_seconds,
            ledger_path=ledger_path,
            tell=self._idle_teller(ledger),
            log=self.log,
        )
        refusals = refusals_of(manager)

        def event_counts() -> EventCounts:  # what /metrics counts of this server (metrics.counters)
            return EventCounts(dict(refusals.counts), dict(self.watchdog.counts), bursts.given_back)

        self.event_counts = event_counts
        self.reclaim = Reclaim(
            (bursts, idle),
            allowance=allowance_of(ledger),
            demand_seconds=self.idle_reclaim_demand_seconds,
            refused_since=refusals_of(manager).since,
            on_action=self.monitor.reap_soon,
            ledger_path=ledger_path,
            log=self.log,
        )
        self.monitor.listeners.append(self.reclaim.check)
        self.settings[handlers.RECLAIM] = self.reclaim
        return idle_after

    def _idle_teller(self, ledger: Ledger | None) -> Callable[[str, float | None], None] | None:
        """With a node broker, each kernel's idleness goes to the broker too (its Prometheus page
        shows it; the idle files in this user's folder are this user's alone), on the monitor's
        worker thread, which talks to the broker at each tick anyway: never on the event loop.
        Without one, the node exporter (this user's) reads the idle files."""
        report = getattr(ledger, "report_idle", None)
        if not callable(report):
            return None
        log = self.log

        def say(slice_id: str, since: float | None) -> None:
            try:
                report(slice_id, since)
            except Exception as error:  # an older broker, or none now: said again within REWRITE_SECONDS
                log.debug("jupyter-vgpu: the broker was not told slice %s's idleness: %s", slice_id, error)

        def tell(slice_id: str, since: float | None) -> None:
            try:
                self.monitor.executor.submit(say, slice_id, since)
            except RuntimeError:  # the monitor has stopped with the server
                pass

        return tell

    def _log_tiers(self, ledger: Ledger) -> None:
        """Say at start what new slices get on each GPU (the strongest tier that applies there), so
        an admin sees whether a hard tier was found without starting a kernel."""
        try:
            gpus = ledger.inventory.snapshot().gpus
        except Exception:  # no GPU, a broker not up yet: the views say so
            return
        offers: dict[str, list[str]] = {}
        for gpu in gpus:
            offers.setdefault(offered_by(gpu), []).append(str(gpu.index))
        for words, indices in offers.items():
            self.log.info("jupyter-vgpu: new slices on GPU %s get %s.", ", ".join(indices), words)

    def initialize_handlers(self) -> None:
        self.handlers += [handlers.INDEX_ROUTE, *cluster.ROUTES]  # answered here in gateway mode too
        if self.gateway_url is not None:
            self.handlers.extend((pattern, gateway.GatewayProxyHandler) for pattern, _ in handlers.routes())
            self.handlers += [
                (r"/api/sessions", gateway.GatewaySessionsHandler),
                (r"/api/kernels", gateway.GatewayKernelsHandler),
                (r"/api/kernelspecs", gateway.GatewayKernelSpecsHandler),
            ]
            return
        self.handlers.extend(handlers.routes())
        kernels = gateway.KernelStartHandler if self.accept_kernel_env else starts.KernelsHandler
        self.handlers += [
            (r"/api/sessions", starts.SessionsHandler),
            (r"/api/sessions/(?P<session_id>\w+-\w+-\w+-\w+-\w+)", starts.SessionHandler),  # jupyter_server's route
            (r"/api/kernels", kernels),
        ]
        if isinstance(self.serverapp.authorizer, gateway.GatewayAuthorizer):  # type: ignore[union-attr]
            gateway.serve_node_only(self.serverapp, self.log)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        monitor: UsageMonitor | None = getattr(self, "monitor", None)
        if monitor is not None:
            reclaim: Reclaim | None = getattr(self, "reclaim", None)
            collector().add(monitor, reclaim.board if reclaim is not None else None, getattr(self, "event_counts", None))
            monitor.start()
        specs = getattr(serverapp, "kernel_spec_manager", None)
        if specs is not None:
            self._orphans = asyncio.ensure_future(asyncio.to_thread(clean_up_launchers, specs, self.log))

    async def stop_extension(self) -> None:
        """Called by the server before it shuts its kernels down. Runs whatever state the
        extension reached (even none, if loading failed), so the server always stops."""
        manager = getattr(self.serverapp, "kernel_manager", None) if self.serverapp is not None else None
        if manager is not None:
            # Kernel starts that failed (GPU full, a quota) or still wait in line would make the
            # server's own kernel shutdown fail with "Kernel does not exist" and never return.
            await forget_failed_starts(manager, self.log)
        watchdog: Watchdog | None = getattr(self, "watchdog", None)
        monitor: UsageMonitor | None = getattr(self, "monitor", None)
        if watchdog is not None:
            await watchdog.stop()
        reclaim: Reclaim | None = getattr(self, "reclaim", None)
        if reclaim is not None:
            await reclaim.stop()
        if monitor is not None:
            collector().remove(monitor)
            await monitor.stop()


def clean_up_launchers(specs: Any, log: Any) -> None:
    """When the server starts: each launcher its kernelspecs name ends what kernels of servers that
    have gone left behind (:func:`.elsewhere.clean_up`)."""
    try:
        found = specs.get_all_specs()
    except Exception as error:  # a broken kernelspec is the kernel list's business
        log.debug("jupyter-vgpu: could not read the kernelspecs: %s", error)
        return
    clean_up(found, os.environ, log)


def allowance_of(ledger: Ledger | None) -> Callable[[GPUOccupancy], int]:
    """The CUDA-context allowance a slice must exceed on a GPU, as the ledger counts it."""
    fixed = getattr(ledger, "context_allowance", None)
    return lambda gpu: fixed if isinstance(fixed, int) else context_allowance(gpu.gpu.compute_capability)


def kernel_pids(manager: Any) -> dict[str, int | None]:
    """Kernel id -> pid of each kernel the server manages (None while it has no process: a
    restart, a remote kernel, a start under way)."""
    pids: dict[str, int | None] = dict.fromkeys(map(str, getattr(manager, "_pending_kernels", None) or ()))
    for kernel_id in list(manager.list_kernel_ids()):
        try:
            pid = getattr(manager.get_kernel(kernel_id).provisioner, "pid", None)
        except KeyError:
            continue
        pids[kernel_id] = pid if isinstance(pid, int) and pid > 0 else None
    return pids
