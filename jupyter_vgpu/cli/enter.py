"""``python -m jupyter_vgpu.cli.enter [-q] -- COMMAND...``: enter the slice's hold (its tier's:
the MPS memory-partitioning tier's cgroup), then become COMMAND (``exec``), so COMMAND and every
process it starts run inside it from their first instruction. ``jupyter vgpu run`` and the
provisioner start a command through this when the slice's tier has a hold
(``JUPYTER_VGPU_ENTER``); ``run`` itself stays outside, so the hold is empty, and goes, when the
command and every process it started have ended (``run`` waits for them all)."""

from __future__ import annotations

import os
import sys

from ..enforcement import Enforcement, Tier, by_tier
from ..ledger.join import enter_here
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
    problem = enter_here()  # where the start-up hook of this Python tried already, it does not try again
    tier = _slice_tier()
    if tier is not None and (problem := problem or tier.not_held(os.environ)) and not quiet:
        print(f"jupyter vgpu: {problem}; the command is held by {tier.held_instead()} only.", file=sys.stderr)
    try:
        os.execvp(args[0], args)
    except OSError as error:  # not found, not executable, not a program (ENOEXEC)
        return cannot_start(args[0], error)
    return 0  # not reached: exec replaced this process


def _slice_tier() -> Enforcement | None:
    """The tier of the slice this process holds (``JUPYTER_VGPU_TIER``), if any."""
    try:
        return by_tier(Tier(os.environ.get("JUPYTER_VGPU_TIER", "")))
    except (ValueError, KeyError):
        return None


if __name__ == "__main__":
    sys.exit(main())
