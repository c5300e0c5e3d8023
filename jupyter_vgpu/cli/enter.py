"""``python -m jupyter_vgpu.cli.enter [-q] -- COMMAND...``: join the slice's memory partition,
then become COMMAND (``exec``), so COMMAND and every process it starts run inside the slice's
cgroup from their first instruction (the MPS memory-partitioning tier). ``jupyter vgpu run``
starts its command through this when the slice has a partition; ``run`` itself stays outside, so
the cgroup is empty, and goes, when the command and every process it started have ended (``run``
waits for them all)."""

from __future__ import annotations

import os
import sys

from ..enforcement import Tier, by_tier
from ..ledger.join import join_here
from .run import cannot_start


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    quiet = bool(args) and args[0] == "-q"
    if quiet:
        args = args[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("jupyter vgpu: no command to run.", file=sys.stderr)
        return 2
    problem = join_here()  # the start-up hook of this Python tried already where it is installed: not again
    if problem and not quiet:
        held = by_tier(Tier.MPS_PARTITION).held_instead()
        print(f"jupyter vgpu: {problem}; the command is held by {held} only.", file=sys.stderr)
    try:
        os.execvp(args[0], args)
    except OSError as error:  # not found, not executable, not a program (ENOEXEC)
        return cannot_start(args[0], error)
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
