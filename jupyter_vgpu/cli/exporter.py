"""``jupyter vgpu exporter``: serve this node's GPUs and every slice of its ledger to Prometheus.

The ledger is the one every ``jupyter vgpu`` command uses (``JUPYTER_VGPU_LEDGER``; with
``JUPYTER_VGPU_BROKER``, the node broker's, every user's slices when run as root or as the broker's
user). The series and their labels are docs/rest.md's label contract (:mod:`jupyter_vgpu.metrics.series`).
"""

from __future__ import annotations

import argparse
import logging
import signal
from typing import Any

from . import options

DEFAULT_PORT = 9401  # beside dcgm-exporter's 9400


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
        "--address", default=options.DEFAULT_ADDRESS,
        help=f"the address to listen on (default {options.DEFAULT_ADDRESS}; 0.0.0.0 for every interface, so a site's Prometheus can scrape it)",
    )  # fmt: skip
    parser.add_argument("--port", type=options.port("--port"), default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument(
        "--hostname", type=options.hostname("--hostname"), default=None,
        help="the hostname label of every series (default: this machine's name, as dcgm-exporter's; on simulated GPUs of a named machine, JUPYTER_VGPU_SIMULATE=2x16GiB@NAME, that name)",
    )  # fmt: skip
    parser.add_argument(
        "--interval", type=options.interval("--interval"), default=options.DEFAULT_INTERVAL, metavar="SECONDS",
        help=f"how often the GPUs and the ledger are read (default {options.DEFAULT_INTERVAL:g}; a scrape serves the latest reading)",
    )  # fmt: skip
    parser.add_argument(
        "--dcgm-job-mapping-dir", type=options.folder("--dcgm-job-mapping-dir"), default=None, metavar="DIR",
        help="also write dcgm-exporter's HPC job mapping there at each reading (a file per GPU, named by its index, "
        "holding the ids of the slices on it; give dcgm-exporter --hpc-job-mapping-dir DIR), so its figures carry "
        "hpc_job=<slice id>. Created if missing; a folder of this user's that nobody else can write to",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", action="store_true",
        help="also the slices of every job that a launcher's engine runs on this node, booked in ledgers of the jobs' own "
        "(each job's read as its user): run as root on such a node, with --hostname the node's name there when that "
        "is not this machine's name. docs/cluster.md, 'Scraping every node'",
    )  # fmt: skip
    parser.set_defaults(handler=exporter)


def exporter(args: argparse.Namespace) -> int:
    from ..config import load_settings
    from ..ledger import open_ledger
    from ..metrics.node import NodePage

    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    ledger = open_ledger(load_settings(), read_only_ok=True)  # reading is all it does
    try:
        page = NodePage(
            ledger, address=args.address, port=args.port, hostname=args.hostname, interval=args.interval,
            job_mapping_dir=args.dcgm_job_mapping_dir, jobs=args.jobs,
        )  # fmt: skip
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: page.shutdown())
        page.serve_forever()
    finally:
        ledger.close()
    return 0
