"""The node's sampler: one reading of the GPUs and the ledger every ``interval`` seconds, on a
thread of its own, for the node exporter's scrapes.

A reading costs what one tick of a server's usage monitor costs (one inventory snapshot with
telemetry: one NVML pass; the ledger's slices and line; the holders' process trees) and nothing
more: it writes nothing (no reaper, no re-booking: those are the broker's and the servers' work).
Sampling on its own clock rather than at each scrape keeps a scrape's time independent of the
driver (NVML samples PCIe throughput for 20 ms per direction and GPU: 320 ms on 8 GPUs) and its
cost independent of how many Prometheus servers scrape, and a scrape always sees one whole reading,
never half a node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .._version import __version__
from ..errors import VGPUError
from ..gpus import Snapshot
from ..launch.launchers import report_folder
from ..ledger import Ledger
from ..slices import Occupancy, Waiter, occupancy_of
from ..slices.holders import ProcessOwners, held
from ..slices.usage import ReportCache, SliceUsage, slice_usage
from ..units import shorten
from .series import EXPORTER_SERIES, Page

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


class NodeSampler:
    """Reads the node every ``interval`` seconds; :attr:`latest` is the newest reading.

    Only slices whose holder (or keeper) still runs are read: a slice whose process ended is
    what the reaper frees at its next pass, and the next reservation does not count it either.
    """

    def __init__(self, ledger: Ledger, *, interval: float = 5.0) -> None:
        self.ledger = ledger
        self.interval = interval
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
            waiting = tuple(self.ledger.waiting())
            attribution = self._owners.attribute(snapshot, {s.id: s.pid for s in slices})
            self._reports.forget({s.id for s in slices})
            usages = tuple(slice_usage(s, s.pid, attribution, snapshot, None if s.hidden else self._reports.get(s)) for s in slices)
            occupancy = occupancy_of(snapshot, slices, attribution)
        except VGPUError as error:
            return self._failed(now, str(error), started)
        except Exception as error:  # a bug: say so on the page and in the log, and read again next time
            log.exception("jupyter-vgpu exporter: reading the GPUs and the ledger failed")
            return self._failed(now, f"jupyter-vgpu could not read the GPUs and the ledger: {shorten(error)}.", started)
        return NodeReading(now, snapshot, occupancy, usages, waiting, seconds=time.perf_counter() - started)

    def _failed(self, now: float, problem: str, started: float) -> NodeReading:
        snapshot = Snapshot(gpus=(), simulated=self.ledger.inventory.simulated, available=False, message=problem, taken_at=now)
        return NodeReading(now, snapshot, Occupancy(snapshot, ()), (), (), problem, time.perf_counter() - started)

    def start(self) -> None:
        """Read on a daemon thread every ``interval`` seconds until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="jupyter-vgpu-exporter-sampler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        said = self.latest.problem
        while not self._stop.wait(max(0.0, self.interval - self.latest.seconds)):
            self.latest = reading = self.read()
            if reading.problem != said:
                said = reading.problem
                if said:
                    log.warning("jupyter-vgpu exporter: %s", said)
                else:
                    log.info("jupyter-vgpu exporter: the GPUs and the ledger can be read again.")

    def stop(self) -> None:
        """Stop reading (after a reading in progress) and close the ledger."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
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
            page.add(reading, self.hostname)
        yield from page.families()
