"""``jupyter vgpu``: see slices, run any command inside one, manage sliced kernelspecs.

Every user mistake ends as one sentence on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._version import __version__
from ..errors import VGPUError

EXIT_USAGE = 2
EXIT_REFUSED = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from . import broker, kernelspec, run, status

    parser = _Parser(
        prog="jupyter vgpu",
        description="GPU slices for Jupyter kernels and any command.",
    )
    parser.add_argument("--version", action="version", version=f"jupyter-vgpu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    status.add_parser(commands)
    run.add_parser(commands)
    status.add_release_parser(commands)
    status.add_gc_parser(commands)
    kernelspec.add_parser(commands)
    broker.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jupyter-vgpu`` console script (``jupyter vgpu ...``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except VGPUError as error:
        print(f"jupyter vgpu: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
