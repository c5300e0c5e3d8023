"""``jupyter vgpu``: see slices, run any command inside one, manage sliced kernelspecs.

Every user mistake ends as one sentence on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence

from .._version import __version__
from ..errors import InvalidRequest, LedgerBusy, NeverFits, NoGPU, NotPermitted, SliceUnavailable, VGPUError

#: Exit codes (README.md, "Exit codes"). ``jupyter vgpu run`` passes its command's own code through,
#: so the codes of its refusals are the sysexits(3) ones a command rarely uses.
EXIT_ERROR = 1  # the ledger or a setting cannot be used
EXIT_USAGE = 2  # a mistake in the command line or a request
EXIT_UNAVAILABLE = 75  # EX_TEMPFAIL: no room now (or a wait timed out, or the ledger is busy): try again later
EXIT_NEVER_FITS = 69  # EX_UNAVAILABLE: the request can never fit on these GPUs (or there is none): trying again cannot help
EXIT_REFUSED = 77  # EX_NOPERM: a policy refuses it, or it is another user's


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. The launchers' own ``kernelspec install`` options are looked up
    (every installed launcher loaded, its entry points read: about 0.1 s) only for a command line
    that names ``kernelspec`` (``argv``; None: always), not for every ``run`` and ``status``."""
    from . import broker, exporter, gateway, kernelspec, release, report, run, status

    parser = _Parser(
        prog="jupyter vgpu",
        description="GPU slices for Jupyter kernels and any command.",
    )
    parser.add_argument("--version", action="version", version=f"jupyter-vgpu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    status.add_parser(commands)
    run.add_parser(commands)
    release.add_release_parser(commands)
    release.add_gc_parser(commands)
    kernelspec.add_parser(commands, launchers=argv is None or "kernelspec" in argv)
    broker.add_parser(commands)
    exporter.add_parser(commands)
    report.add_parser(commands)
    gateway.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jupyter-vgpu`` console script (``jupyter vgpu ...``)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except VGPUError as error:
        print(wrap(f"jupyter vgpu: {error}"), file=sys.stderr)
        return exit_code(error)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `jupyter vgpu status --json | head`: the reader has gone; no traceback, and no second
        # error as Python flushes stdout at exit (the Python docs' recipe for SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a killed pipe writer


def exit_code(error: VGPUError) -> int:
    if isinstance(error, (NeverFits, NoGPU)):
        return EXIT_NEVER_FITS  # no GPU here: asking again cannot help either
    if isinstance(error, (SliceUnavailable, LedgerBusy)):
        return EXIT_UNAVAILABLE
    if isinstance(error, NotPermitted):
        return EXIT_REFUSED
    if isinstance(error, InvalidRequest):
        return EXIT_USAGE
    return EXIT_ERROR


def wrap(text: str, width: int | None = None) -> str:
    """Each line of ``text`` folded to the terminal's width, its indentation kept, when stderr is a
    terminal; a log or a pipe gets each line whole, so it can be searched."""
    if width is None:
        if not sys.stderr.isatty():
            return text
        try:
            width = max(40, os.get_terminal_size(sys.stderr.fileno()).columns)
        except OSError:
            width = 100
    lines = []
    for line in text.splitlines() or [""]:
        indent = line[: len(line) - len(line.lstrip())]
        lines.append(
            textwrap.fill(line.strip(), width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                          break_on_hyphens=False, break_long_words=False) or line
        )  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
