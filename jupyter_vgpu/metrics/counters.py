"""What happened on a user's server, counted since it started (issue 48, item 1): kernel starts
refused, by reason; reclaims, by kind (``idle``, ``burst``, or the over-limit ``watchdog``), action
and outcome; bursts given back in time (a notice that ended because the kernel freed its burst).

These events happen in users' servers, so only a server's ``/metrics`` counts them, never the node
exporter (docs/cluster.md, "Label contract"). The server keeps plain counts where the events are
decided (the refusal log, the watchdog, the burst source) and this module turns a snapshot of them
into Prometheus counters at scrape time, as the gauges are built from the latest sample.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily


@dataclass(frozen=True)
class EventCounts:
    """A snapshot of one server's counts."""

    refusals: Mapping[str, int] = field(default_factory=dict)  # reason -> kernel starts refused
    reclaims: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (kind, action, outcome) -> times
    bursts_given_back: int = 0


#: The counters' names (``_total`` is added by the exposition), helps and labels.
REFUSALS: tuple[str, str, tuple[str, ...]] = ("jupyter_vgpu_refusals", "Kernel starts this server refused, by reason (full, timed_out, quota, ...).", ("hostname", "reason"))
RECLAIMS: tuple[str, str, tuple[str, ...]] = (
    "jupyter_vgpu_reclaims",
    "Kernels this server acted on to reclaim GPU memory: kind idle, burst or watchdog (over its limit); the action; ok or failed.",
    ("hostname", "kind", "action", "outcome"),
)
BURSTS_GIVEN_BACK: tuple[str, str, tuple[str, ...]] = ("jupyter_vgpu_bursts_given_back", "Burst notices that ended because the kernel gave its burst back in time.", ("hostname",))


def families(counts: Iterator[EventCounts], hostname: str) -> Iterator[CounterMetricFamily]:
    """The three counters, summed over ``counts`` (one snapshot per server of this process)."""
    refusals: dict[tuple[str, ...], int] = {}
    reclaims: dict[tuple[str, ...], int] = {}
    given_back = 0
    for snapshot in counts:
        for reason, n in snapshot.refusals.items():
            refusals[(hostname, reason)] = refusals.get((hostname, reason), 0) + n
        for key, n in snapshot.reclaims.items():
            labelled = (hostname, *key)
            reclaims[labelled] = reclaims.get(labelled, 0) + n
        given_back += snapshot.bursts_given_back
    tables: tuple[tuple[tuple[str, str, tuple[str, ...]], dict[tuple[str, ...], int]], ...] = (
        (REFUSALS, refusals),
        (RECLAIMS, reclaims),
        (BURSTS_GIVEN_BACK, {(hostname,): given_back}),
    )
    for (name, help_text, labels), values in tables:
        family = CounterMetricFamily(name, help_text, labels=labels)
        for label_values, n in sorted(values.items()):
            family.add_metric(list(label_values), n)
        yield family
