"""``jupyter vgpu gateway``: serve this GPU node's sliced kernels to remote JupyterLabs.

A plain jupyter server with the jupyter-vgpu extension, restricted to kernels, kernelspecs and the
GPU API (:class:`jupyter_vgpu.server.gateway.GatewayAuthorizer`), a token always required, the
default sliced kernelspecs installed for this user and only sliced ones served
(:class:`jupyter_vgpu.server.gateway.SlicedKernelSpecManager`): a node with none is refused. A CPU-only JupyterLab then uses it with
``jupyter lab --gateway-url=URL --GatewayClient.auth_token=TOKEN`` (docs/remote.md).
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from typing import Any

from ..errors import InvalidRequest
from ..units import format_bytes, shorten

#: The server options this command owns; given again after ``--`` they would undo the restriction.
_OWNED = (
    "authorizer_class", "kernel_spec_manager_class", "jpserver_extensions", "accept_kernel_env",
    "IdentityProvider.token", "ServerApp.token",
)  # fmt: skip


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "gateway",
        help="serve this GPU node's sliced kernels to CPU-only JupyterLabs (--gateway-url)",
        description=(
            "Start a Jupyter server on this GPU node for remote JupyterLabs: kernels, kernelspecs and "
            "the GPU API only (files, terminals and other extensions' pages are refused), a token required. "
            "Only sliced kernelspecs are offered, so each kernel started through it holds a slice of this "
            "node's GPUs. Arguments after -- go to `jupyter server`."
        ),
    )
    parser.add_argument("--ip", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=_port, default=8890, help="the port (default 8890)")
    parser.add_argument(
        "--token", default=None,
        help="the token clients must send (default: $JUPYTER_TOKEN, else a new random one, printed)",
    )  # fmt: skip
    parser.add_argument("--certfile", default=None, help="TLS certificate (PEM): serve https")
    parser.add_argument("--keyfile", default=None, help="TLS private key (PEM) for --certfile")
    parser.add_argument(
        "--no-kernelspecs", action="store_true",
        help="do not install the default sliced kernelspecs (1/4, 1/2, 1 GPU) for this user: serve the sliced ones installed",
    )  # fmt: skip
    parser.add_argument("server_args", nargs=argparse.REMAINDER, help="-- then options for `jupyter server`")
    parser.set_defaults(handler=gateway_command)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port {shorten(text)} is not a port number from 1 to 65535")
    return port


def server_arguments(args: argparse.Namespace, token: str) -> list[str]:
    """The ``jupyter server`` command line for these options."""
    extra = [a for a in args.server_args if a != "--"]
    for given in extra:
        if any(owned in given for owned in _OWNED):
            raise InvalidRequest(f"{shorten(given)} cannot be given to `jupyter vgpu gateway`: it sets that option itself.")
    if bool(args.certfile) != bool(args.keyfile):
        raise InvalidRequest("--certfile and --keyfile go together: give both to serve https, or neither.")
    for path in (args.certfile, args.keyfile):
        if path and not os.path.isfile(path):
            raise InvalidRequest(f"{shorten(path)} is not a file; --certfile and --keyfile name PEM files.")
    command = [
        "--no-browser",
        f"--ServerApp.ip={args.ip}",
        f"--ServerApp.port={args.port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--ServerApp.jpserver_extensions=jupyter_vgpu=True",
        "--ServerApp.authorizer_class=jupyter_vgpu.server.gateway.GatewayAuthorizer",
        "--ServerApp.kernel_spec_manager_class=jupyter_vgpu.server.gateway.SlicedKernelSpecManager",
        "--VGPUServer.accept_kernel_env=True",
    ]
    if args.certfile:
        command += [f"--ServerApp.certfile={args.certfile}", f"--ServerApp.keyfile={args.keyfile}"]
    if os.geteuid() == 0 and "--allow-root" not in extra:
        command.append("--allow-root")
    return command + extra


def gateway_command(args: argparse.Namespace) -> int:
    token = args.token if args.token is not None else os.environ.get("JUPYTER_TOKEN") or secrets.token_urlsafe(32)
    if not token.strip():
        raise InvalidRequest(
            f"An empty token is not allowed: anyone who reaches port {args.port} could run code on this GPU node. "
            "Leave --token out for a random one."
        )
    command = server_arguments(args, token)
    if not args.no_kernelspecs:
        _install_default_kernelspecs()
    _check_sliced_kernelspecs()
    scheme = "https" if args.certfile else "http"
    host = socket.getfqdn() if args.ip in ("0.0.0.0", "::", "") else args.ip
    print(
        f"jupyter-vgpu gateway: this GPU node's sliced kernels at {scheme}://{host}:{args.port}/ "
        "(kernels, kernelspecs and the GPU API only).\n"
        f"{_gpus_line()}\n"
        "On the CPU-only machine run:\n\n"
        f"    jupyter lab --gateway-url={scheme}://{host}:{args.port} --GatewayClient.auth_token={token}\n",
        file=sys.stderr,
        flush=True,
    )
    argv = [sys.executable, "-m", "jupyter_server", *command]
    os.execv(sys.executable, argv)
    return 0  # not reached


def _gpus_line() -> str:
    """The GPUs the node's kernels get slices of, for the banner: simulated ones said so."""
    from ..config import load_settings
    from ..gpus import Inventory

    inventory = Inventory(load_settings().resolved_simulate)
    snapshot = inventory.snapshot()
    if snapshot.simulated:
        described = ", ".join(f"GPU {gpu.index} {format_bytes(gpu.memory_total)}" for gpu in snapshot.gpus)
        return f"GPUs: SIMULATED GPUs, not real hardware ({described or snapshot.message})."
    if not snapshot.available:
        return f"GPUs: none: {snapshot.message or 'NVML finds no GPU'} Kernels start on the CPU."
    names = ", ".join(f"GPU {gpu.index} {gpu.name}" for gpu in snapshot.gpus)
    return f"GPUs: {names}."


def _install_default_kernelspecs() -> None:
    from ..slices import SliceRequest
    from ..slices.request import CLI_NAMES
    from .kernelspec import DEFAULT_SET, install

    for share in DEFAULT_SET:
        name, display, path, action = install(SliceRequest.parse(share, names=CLI_NAMES), user=True, keep=True)
        if action in ("installed", "replaced"):
            print(f"Installed kernelspec {name} ({display!r}) in {path}", file=sys.stderr)


def _check_sliced_kernelspecs() -> None:
    """A node with no sliced kernelspec would serve no kernel at all: say so now, not at each start."""
    from ..server.gateway import SlicedKernelSpecManager

    if not SlicedKernelSpecManager().find_kernel_specs():
        raise InvalidRequest(
            "This GPU node has no sliced kernelspec, and the gateway serves sliced kernels only: install them "
            "with `jupyter vgpu kernelspec install --defaults` (or leave out --no-kernelspecs)."
        )
