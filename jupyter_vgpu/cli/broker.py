"""``jupyter vgpu broker``: the node broker that owns the node's ledger and applies the quotas."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from ..config import ENV_LEDGER, load_settings
from ..enforcement import setting_problems
from ..errors import InvalidConfig, InvalidRequest
from ..ledger.broker_client import DEFAULT_LEDGER, DEFAULT_SOCKET, ENV_BROKER
from . import options


def add_parser(commands: Any) -> None:
    # Building the parser imports nothing of the hub: `jupyter vgpu --help` works without the
    # [hub] extra, and only running the broker asks for it.
    parser = commands.add_parser(
        "broker",
        help="serve the node's GPU slices to every user over a Unix socket (run as root)",
        description=(
            "Own the node's ledger and serve reservations over a Unix socket, applying per-user and "
            "per-group quotas. Clients find it through JUPYTER_VGPU_BROKER. SIGHUP re-reads the policy."
        ),
    )
    parser.add_argument(
        "--socket", metavar="PATH", default=None,
        help=f"the socket to listen on (default: ${ENV_BROKER} or {DEFAULT_SOCKET})",
    )
    parser.add_argument(
        "--ledger", metavar="PATH", default=None,
        help=f"the node's ledger (default: ${ENV_LEDGER} or {DEFAULT_LEDGER})",
    )
    parser.add_argument(
        "--policy", metavar="FILE", default=None,
        help="quotas: a JSON file, or a jupyterhub_config.py whose c.VGPUPolicy is read (re-read when it changes)",
    )
    parser.add_argument("--reap-interval", type=options.seconds("--reap-interval", 0.1, 86400), default=5.0, metavar="SECONDS", help="how often dead holders' slices are freed")
    parser.add_argument(
        "--waiter-timeout", type=options.seconds("--waiter-timeout", 0.1, 86400), default=30.0, metavar="SECONDS",
        help="drop a place in line whose requester stopped asking for it this long ago (default 30)",
    )
    parser.add_argument(
        "--no-admin-page", action="store_true",
        help="do not serve the admin page even when JupyterHub runs the broker as a service",
    )
    page = parser.add_argument_group(
        "the node's Prometheus page",
        "Also serve /metrics as `jupyter vgpu exporter` does, from the broker's own ledger (every user's slices): "
        "a hub node then needs no exporter. Off unless --metrics-port is given. The page names users, "
        "notebooks and commands: only Prometheus should reach it. Prints the URL it listens on.",
    )
    page.add_argument(
        "--metrics-port", type=options.port("--metrics-port"), default=None, metavar="PORT",
        help="serve the page on this port (dcgm-exporter's is 9400, the exporter's 9401; 0: any free port)",
    )
    page.add_argument(
        "--metrics-address", default=None, metavar="ADDRESS",
        help=f"the address to listen on (default {options.DEFAULT_ADDRESS}; 0.0.0.0 for every interface, so a site's Prometheus can scrape it)",
    )  # fmt: skip
    page.add_argument(
        "--metrics-hostname", type=options.hostname("--metrics-hostname"), default=None, metavar="NAME",
        help="the hostname label of every series (default: this machine's name; on simulated GPUs of a named machine, that name)",
    )  # fmt: skip
    page.add_argument(
        "--metrics-interval", type=options.interval("--metrics-interval"), default=None, metavar="SECONDS",
        help=f"how often the GPUs and the ledger are read for the page (default {options.DEFAULT_INTERVAL:g})",
    )  # fmt: skip
    page.add_argument(
        "--metrics-dcgm-job-mapping-dir", type=options.folder("--metrics-dcgm-job-mapping-dir"), default=None, metavar="DIR",
        help="also write dcgm-exporter's HPC job mapping there at each reading, as `jupyter vgpu exporter "
        "--dcgm-job-mapping-dir` does (the ids of the slices on each GPU)",
    )  # fmt: skip
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(handler=broker)


def broker(args: argparse.Namespace) -> int:
    from ..hub.service import hub_service_address, open_broker, serve

    alone = [
        f"--metrics-{name}" for name in ("address", "hostname", "interval", "dcgm-job-mapping-dir")
        if getattr(args, f"metrics_{name.replace('-', '_')}") is not None
    ]  # fmt: skip
    if alone and args.metrics_port is None:
        raise InvalidRequest(
            f"The broker serves no Prometheus page without --metrics-port, so {' and '.join(alone)} would do nothing: "
            "give --metrics-port too (0: any free port)."
        )
    logging.basicConfig(level=args.log_level, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    settings = load_settings()
    for problem in setting_problems():  # every slice it placed would lack the tier the admin set up, in silence
        raise InvalidConfig(f"The broker does not start with a tier it cannot apply: {problem}")
    socket_path = args.socket or os.environ.get(ENV_BROKER) or DEFAULT_SOCKET
    ledger_path = args.ledger or os.environ.get(ENV_LEDGER) or DEFAULT_LEDGER
    node = open_broker(settings, ledger_path=ledger_path, policy=args.policy, waiter_timeout=args.waiter_timeout)
    metrics = None
    if args.metrics_port is not None:  # listening before the socket: a port it cannot have starts nothing
        from ..metrics.node import NodePage

        try:
            metrics = NodePage(
                node.ledger, address=args.metrics_address or options.DEFAULT_ADDRESS, port=args.metrics_port,
                hostname=args.metrics_hostname, interval=args.metrics_interval or options.DEFAULT_INTERVAL,
                name="broker", who="The broker's metrics page", options="--metrics-",
                job_mapping_dir=args.metrics_dcgm_job_mapping_dir,
                idle=node.idle_seconds,  # what the users' servers told the broker of their kernels
            )  # fmt: skip
        except BaseException:
            node.ledger.close()
            raise
    address = None if args.no_admin_page else hub_service_address()
    if address is None:
        serve(node, socket_path, reap_interval=args.reap_interval, metrics=metrics)
    else:
        port, ip, prefix = address
        serve(node, socket_path, reap_interval=args.reap_interval, admin_port=port, admin_ip=ip, admin_prefix=prefix, metrics=metrics)
    return 0
