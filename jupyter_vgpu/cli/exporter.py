"""``jupyter vgpu exporter``: serve this node's GPUs and every slice of its ledger to Prometheus.

The ledger is the one every ``jupyter vgpu`` command uses (``JUPYTER_VGPU_LEDGER``; with
``JUPYTER_VGPU_BROKER``, the node broker's, every user's slices when run as root or as the broker's
user). The series and their labels are docs/rest.md's label contract (:mod:`jupyter_vgpu.metrics.series`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from typing import Any

from ..units import shorten

DEFAULT_PORT = 9401  # beside dcgm-exporter's 9400
_HOSTNAME_MAX = 253


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "exporter",
        help="serve this node's GPUs, slices and line on /metrics for Prometheus",
        description=(
            "Serve /metrics in Prometheus's text format: every GPU of this node and every slice of its ledger "
            "(the one JUPYTER_VGPU_LEDGER names; with JUPYTER_VGPU_BROKER, the broker's: run as root or as the "
            "broker's user to see every user's). The page names users, notebooks and commands: "
            "only Prometheus should reach it. Prints the URL it listens on."
        ),
    )
    parser.add_argument(
        "--address", default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1; 0.0.0.0 for every interface, so a site's Prometheus can scrape it)",
    )  # fmt: skip
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument(
        "--hostname", type=_hostname, default=None,
        help="the hostname label of every series (default: this machine's name, as dcgm-exporter's; on simulated GPUs of a named machine, JUPYTER_VGPU_SIMULATE=2x16GiB@NAME, that name)",
    )  # fmt: skip
    parser.add_argument(
        "--interval", type=_seconds, default=5.0, metavar="SECONDS",
        help="how often the GPUs and the ledger are read (default 5; a scrape serves the latest reading)",
    )  # fmt: skip
    parser.set_defaults(handler=exporter)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port {shorten(text)} is not a port number from 0 to 65535 (0: any free port)")
    return port


def _hostname(text: str) -> str:
    if not text or len(text) > _HOSTNAME_MAX or any(c.isspace() or not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError(
            f"--hostname {shorten(text)} is not a host name: give 1 to {_HOSTNAME_MAX} characters without spaces"
        )
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"--interval {shorten(text)} is not a number of seconds from 0.1 to 3600")
    return value


def exporter(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from ..config import load_settings
    from ..ledger import open_ledger
    from ..metrics.node import NodeCollector, NodeSampler
    from ..metrics.series import machine_name
    from ..metrics.serve import MetricsServer

    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    ledger = open_ledger(load_settings(), read_only_ok=True)  # reading is all it does
    hostname = args.hostname or machine_name(ledger.inventory.simulate)
    registry = CollectorRegistry(auto_describe=False)
    try:  # listen before the first reading: a taken port fails at once
        server = MetricsServer(registry, args.address, args.port, title=f"jupyter-vgpu exporter of {hostname}")
    except BaseException:
        ledger.close()
        raise
    sampler = NodeSampler(ledger, interval=args.interval)
    registry.register(NodeCollector(sampler, hostname))
    sampler.start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: server.shutdown())
    host = socket.getfqdn() if args.address in ("0.0.0.0", "::", "") else args.address
    problem = f"\n  Not readable now: {sampler.latest.problem}" if sampler.latest.problem else ""
    print(
        f"jupyter-vgpu exporter: the GPUs and slices of {hostname} at {server.url(host)}\n"
        f"  GPUs: {ledger.inventory.describe()}; slices: {ledger.location()}; read every {args.interval:g} s{problem}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    finally:
        sampler.stop()
    return 0
