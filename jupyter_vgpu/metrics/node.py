"""The node's sampler: one reading of the GPUs and the ledger every ``interval`` seconds, on a
thread of its own, for the node exporter's scrapes; and the node's page (:class:`NodePage`), which
``jupyter vgpu exporter`` serves, and ``jupyter vgpu broker --metrics-port`` from its own ledger.

A reading costs what one tick of a server's usage monitor costs (one inventory snapshot with
telemetry: one NVML pass; the ledger's slices and line; the holders' process trees) and nothing
more: it writes nothing to the ledger (no reaper, no re-booking: those are the broker's and the
servers' work); with a job mapping folder, each reading also keeps dcgm-exporter's files there.
Sampling on its own clock rather than at each scrape keeps a scrape's time independent of the
driver (NVML samples PCIe throughput for 20 ms per direction and GPU: 320 ms on 8 GPUs) and its
cost independent of how many Prometheus servers scrape, and a scrape always sees one whole reading,
never half a node.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .._version import __version__
from ..errors import VGPUError
from ..gpus import Snapshot
from ..launch.launchers import report_folder
from ..ledger import Ledger
from ..slices import Occupancy, Slice, Waiter, occupancy_of
from ..slices.holders import ProcessOwners, held
from ..slices.reports import read_idle
from ..slices.usage import ReportCache, SliceUsage, slice_usage
from ..units import shorten
from .jobmap import JobMapping, job_files
from .series import EXPORTER_SERIES, Page, machine_name
from .serve import MetricsServer

log = logging.getLogger("jupyter_vgpu.exporter")


@dataclass(frozen=True)
class NodeReading:
    """Everything one reading of the node saw. ``problem`` says why the node could not be read;
    the reading then holds no GPU, slice or place in line (a scrape shows none rather than a
    part, and Prometheus marks the series stale)."""

    taken_at: float
    snapshot: Snapshot
    occupancy: Occupancy
    slices: tuple[SliceUsage, ...]
    waiting: tuple[Waiter, ...]
    problem: str | None = None
    #: Seconds the reading took (the GPUs, the ledger, the process trees).
    seconds: float = 0.0
    #: Seconds each kernel slice has been idle (0: busy), as its server said lately, by slice id.
    idle: Mapping[str, float] = field(default_factory=dict)


#: The idle seconds of a reading's slices at a time, by slice id (those known).
IdleTimes = Callable[[Sequence[Slice], float], Mapping[str, float]]


def idle_times_of(ledger: Ledger) -> IdleTimes:
    """Where a node page learns how long each kernel has been idle, as its user's server judged it:
    from a node broker, its ``idle_times`` (every slice's for root and the broker's admins, else the
    caller's own); from a ledger of one's own, the servers' idle files beside it
    (:func:`~jupyter_vgpu.slices.reports.read_idle`: only this user's own files are read)."""
    ask = getattr(ledger, "idle_times", None)
    if callable(ask):

        def from_broker(slices: Sequence[Slice], now: float) -> Mapping[str, float]:
            try:
                times = ask()
            except VGPUError:  # an older broker, or none now: the page shows no idle time
                return {}
            live = {s.id for s in slices}
            return {sid: seconds for sid, seconds in times.items() if sid in live}

        return from_broker

    def from_files(slices: Sequence[Slice], now: float) -> Mapping[str, float]:
        found = {s.id: read_idle(ledger.path, s.id, now) for s in slices if s.holder_kind == "kernel" and not s.hidden}
        return {sid: seconds for sid, seconds in found.items() if seconds is not None}

    return from_files


class NodeSampler:
    """Reads the node every ``interval`` seconds; :attr:`latest` is the newest reading.

    Only slices whose holder (or keeper) still runs are read: a slice whose process ended is
    what the reaper frees at its next pass, and the next reservation does not count it either.

    ``on_reading`` is told every reading once :meth:`start` runs (the first one then, each next one
    on the sampler's thread as it is taken), so that what else follows the node (dcgm-exporter's
    job mapping) takes no reading of its own. What it raises is logged, and the sampler reads on.

    ``idle`` says how long each kernel slice has been idle (the broker's page: what the users'
    servers told the broker); by default :func:`idle_times_of` the ledger.

    ``extra`` gives slices booked in other ledgers of the node at each reading (a Slurm node's
    jobs: :func:`_jobs_on`), read beside the ledger's own.
    """

    def __init__(
        self, ledger: Ledger, *, interval: float = 5.0, on_reading: Callable[[NodeReading], None] | None = None,
        idle: IdleTimes | None = None, extra: Callable[[], Sequence[Slice]] | None = None,
    ) -> None:  # fmt: skip
        self.ledger = ledger
        self.extra = extra
        self.interval = interval
        self.on_reading = on_reading
        self.idle = idle or idle_times_of(ledger)
        self._owners = ProcessOwners()  # remembers each GPU process's slice across readings
        self._reports = ReportCache(ledger.path, report_folder)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.latest: NodeReading = self.read()

    def read(self) -> NodeReading:
        """Take one reading (blocking: NVML, SQLite or the broker's socket, /proc)."""
        now, started = time.time(), time.perf_counter()
        try:
            self.ledger.check_split()
            snapshot = self.ledger.inventory.snapshot(telemetry=True)
            slices = [s for s in self.ledger.slices() if s.hidden or held(s)]
            slices += [s for s in self.extra() if held(s)] if self.extra is not None else []
            waiting = tuple(self.ledger.waiting())
            attribution = self._owners.attribute(snapshot, {s.id: s.pid for s in slices})
            self._reports.forget({s.id for s in slices})
            usages = tuple(slice_usage(s, s.pid, attribution, snapshot, None if s.hidden else self._reports.get(s)) for s in slices)
            occupancy = occupancy_of(snapshot, slices, attribution)
            idle = self.idle(slices, now)
        except VGPUError as error:
            return self._failed(now, str(error), started)
        except Exception as error:  # a bug: say so on the page and in the log, and read again next time
            log.exception("jupyter-vgpu exporter: reading the GPUs and the ledger failed")
            return self._failed(now, f"jupyter-vgpu could not read the GPUs and the ledger: {shorten(error)}.", started)
        return NodeReading(now, snapshot, occupancy, usages, waiting, seconds=time.perf_counter() - started, idle=idle)

    def _failed(self, now: float, problem: str, started: float) -> NodeReading:
        snapshot = Snapshot(gpus=(), simulated=self.ledger.inventory.simulated, available=False, message=problem, taken_at=now)
        return NodeReading(now, snapshot, Occupancy(snapshot, ()), (), (), problem, time.perf_counter() - started)

    def start(self) -> None:
        """Read on a daemon thread every ``interval`` seconds until :meth:`stop`."""
        if self._thread is None:
            self._tell(self.latest)
            self._thread = threading.Thread(target=self._run, name="jupyter-vgpu-exporter-sampler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        said = self.latest.problem
        while not self._stop.wait(max(0.0, self.interval - self.latest.seconds)):
            self.latest = reading = self.read()
            self._tell(reading)
            if reading.problem != said:
                said = reading.problem
                if said:
                    log.warning("jupyter-vgpu exporter: %s", said)
                else:
                    log.info("jupyter-vgpu exporter: the GPUs and the ledger can be read again.")

    def _tell(self, reading: NodeReading) -> None:
        if self.on_reading is None:
            return
        try:
            self.on_reading(reading)
        except Exception:  # a bug: say so in the log, and read on
            log.exception("jupyter-vgpu exporter: following a reading of the node failed")

    def stop(self, *, close_ledger: bool = True) -> None:
        """Stop reading (after a reading in progress) and close the ledger, unless ``close_ledger``
        is false (a ledger others use: the broker's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if close_ledger:
            self.ledger.close()


class NodeCollector(Collector):
    """The node exporter's page: the sampler's latest reading, every slice of it, as ``hostname``."""

    def __init__(self, sampler: NodeSampler, hostname: str) -> None:
        self.sampler = sampler
        self.hostname = hostname
        self.gpus = sampler.ledger.inventory.describe()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reading = self.sampler.latest  # one reading for the whole page, however the sampler moves on
        page = Page(EXPORTER_SERIES)
        page.add_exporter(self.hostname, __version__, self.gpus, up=reading.problem is None, taken_at=reading.taken_at)
        if reading.problem is None:
            page.add(reading, self.hostname, idle=reading.idle.get)
        yield from page.families()


def _jobs_on(node: str) -> Callable[[], Sequence[Slice]]:
    """Every slice the jobs of every launcher's engine book on ``node`` in ledgers of their own."""
    from ..launch.launchers import every

    readers = [reader for launcher in every() if (reader := launcher.node_jobs(node)) is not None]
    return lambda: [found for reader in readers for found in reader()]


class NodePage:
    """The node's Prometheus page over ``ledger``: a :class:`NodeSampler` reading it every
    ``interval`` seconds, a :class:`NodeCollector` naming the node ``hostname`` (default: the
    machine's name, or the simulated machine's), and a :class:`MetricsServer` on ``address``:``port``.

    It listens at once, before its first reading: a port it cannot have raises
    :class:`~jupyter_vgpu.errors.InvalidRequest` (one sentence naming the listener as ``who`` and its
    options as ``options`` + ``port``), so a command that cannot serve the page starts nothing else.
    ``name`` is the command that serves it (``exporter``, ``broker``), in its title and its line on
    stderr. It reads the ledger and never closes it: whoever opened it does.

    With ``job_mapping_dir``, each reading also writes dcgm-exporter's HPC job mapping files there
    (:mod:`jupyter_vgpu.metrics.jobmap`), emptied when the page stops; a folder it may not use is
    one sentence naming ``options`` + ``dcgm-job-mapping-dir``, before anything listens.

    ``idle``: how long each kernel has been idle (:class:`NodeSampler`'s; the broker gives its own).
    ``jobs``: also the slices of the jobs that launchers' engines run on this node, named
    ``hostname`` there, in ledgers of their own (:meth:`~jupyter_vgpu.launch.launchers.Launcher.node_jobs`:
    a Slurm node's jobs).
    """

    def __init__(
        self, ledger: Ledger, *, address: str, port: int, hostname: str | None = None, interval: float = 5.0,
        name: str = "exporter", who: str = "The exporter", options: str = "--", job_mapping_dir: str | None = None,
        idle: IdleTimes | None = None, jobs: bool = False,
    ) -> None:  # fmt: skip
        self.name = name
        self.hostname = hostname or machine_name(ledger.inventory.simulate)
        self.job_mapping = JobMapping(job_mapping_dir, who=who, option=f"{options}dcgm-job-mapping-dir") if job_mapping_dir else None
        registry = CollectorRegistry(auto_describe=False)
        try:
            self.server = MetricsServer(
                registry, address, port, title=f"jupyter-vgpu {name} of {self.hostname}", who=who, options=options
            )
        except BaseException:
            if self.job_mapping is not None:
                self.job_mapping.release()
            raise
        try:
            extra = _jobs_on(self.hostname) if jobs else None
            self.sampler = NodeSampler(
                ledger, interval=interval, on_reading=self._map_jobs if self.job_mapping else None, idle=idle, extra=extra
            )  # fmt: skip
            registry.register(NodeCollector(self.sampler, self.hostname))
        except BaseException:
            self.server.close()
            if self.job_mapping is not None:
                self.job_mapping.release()
            raise
        self._thread: threading.Thread | None = None

    def _map_jobs(self, reading: NodeReading) -> None:
        if self.job_mapping is not None and reading.problem is None:  # a failed reading changes nothing
            self.job_mapping.write(job_files(reading.snapshot, [usage.slice for usage in reading.slices]))

    def _close_job_mapping(self) -> None:
        """Empty the job mapping files (no slice is followed any more), once the page has served."""
        if self.job_mapping is not None:
            try:
                self.job_mapping.close()
            except OSError as error:
                log.warning("jupyter-vgpu %s: the job mapping files in %s could not be emptied: %s", self.name, self.job_mapping.folder, error)

    def serve_forever(self) -> None:
        """Read the node on the sampler's thread, say the page's URL on stderr, and serve on this
        thread until :meth:`shutdown`; the sampler stops with it."""
        self.sampler.start()
        try:
            self._say_where()
            self.server.serve_forever()
        finally:
            self.sampler.stop(close_ledger=False)
            self._close_job_mapping()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever`; safe from a signal handler (it waits for nothing)."""
        self.server.shutdown()

    def start(self) -> None:
        """:meth:`serve_forever` on a thread of its own, until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.serve_forever, name=f"jupyter-vgpu-{self.name}-metrics", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop serving and reading and wait for both (a scrape or a reading in progress ends
        first); a page never started stops listening."""
        if self._thread is None:
            self.server.close()
            if self.job_mapping is not None:
                self.job_mapping.release()  # never started: it wrote nothing
            return
        self.shutdown()
        self._thread.join()
        self._thread = None

    def _say_where(self) -> None:
        ledger, address = self.sampler.ledger, self.server.address
        host = socket.getfqdn() if address in ("0.0.0.0", "::", "") else address
        problem = self.sampler.latest.problem
        print(
            f"jupyter-vgpu {self.name}: the GPUs and slices of {self.hostname} at {self.server.url(host)}\n"
            f"  GPUs: {ledger.inventory.describe()}; slices: {ledger.location()}"
            + (f" and those of the jobs on {self.hostname}" if self.sampler.extra else "")
            + f"; read every {self.sampler.interval:g} s"
            + (f"\n  dcgm-exporter's job mapping (slice ids per GPU): {self.job_mapping.folder}" if self.job_mapping else "")
            + (f"\n  Not readable now: {problem}" if problem else ""),
            file=sys.stderr,
            flush=True,
        )
