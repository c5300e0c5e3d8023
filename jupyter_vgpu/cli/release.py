"""``jupyter vgpu release`` (free a slice by id) and ``gc`` (free dead holders' slices; move a
damaged ledger aside)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ..config import VGPU, load_settings
from ..errors import InvalidRequest, NotPermitted, SliceNotFound
from ..ledger import open_ledger
from ..ledger.broker_client import ENV_BROKER
from ..ledger.file import LedgerFile
from ..slices import Slice
from ..units import shorten


def add_release_parser(commands: Any) -> None:
    parser = commands.add_parser("release", help="free a slice by id (your own; root: any)")
    parser.add_argument("slice_id", metavar="SLICE_ID")
    parser.set_defaults(handler=release)


def add_gc_parser(commands: Any) -> None:
    parser = commands.add_parser("gc", help="free slices whose processes are gone")
    parser.add_argument(
        "--reset-ledger",
        action="store_true",
        help="move a damaged ledger aside (kept as <file>.corrupt-<time>) and start a fresh one",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --reset-ledger: also reset a healthy ledger, once no running process holds a slice in it",
    )
    parser.set_defaults(handler=gc)


#: The shortest id prefix ``release`` takes (the ledger matches a prefix of 6 characters or more).
MIN_ID_PREFIX = 6


def release(args: argparse.Namespace) -> int:
    given = str(args.slice_id).strip()
    if len(given) < MIN_ID_PREFIX:
        raise InvalidRequest(
            f"A slice id has 12 characters; give at least {MIN_ID_PREFIX} of them ({shorten(given)} has {len(given)}). "
            "`jupyter vgpu status` lists them."
        )
    ledger = open_ledger(load_settings())
    try:
        freed: Slice = ledger.release(given)
    except SliceNotFound as error:
        raise InvalidRequest(str(error)) from None  # a mistake in the command line: exit 2
    note = ""
    if freed.holder_kind == "kernel":
        note = " The kernel keeps running; its GPU memory now counts as used outside slices."
    print(f"Released slice {freed.id} ({freed.describe_holder()}, {freed.request.describe()}).{note}")
    return 0


def gc(args: argparse.Namespace) -> int:
    settings = load_settings()
    if args.force and not args.reset_ledger:
        raise InvalidRequest("--force goes with --reset-ledger; plain `jupyter vgpu gc` frees only dead holders' slices.")
    if args.reset_ledger:
        return reset_ledger(settings.resolved_ledger_path, force=args.force, settings=settings)
    ledger = open_ledger(settings)
    freed = ledger.reap()
    for s in freed:
        print(f"Freed slice {s.id} ({s.describe_holder()}): its process {s.pid} is gone.")
    print(f"{len(freed)} slice{'s' if len(freed) != 1 else ''} freed; {len(ledger.slices())} in use.")
    return 0


def reset_ledger(path: Path, *, force: bool, settings: VGPU) -> int:
    """Move a damaged ledger aside; empty a healthy one (in place, so every process that has it
    open sees it) only with ``force`` and no live holder."""
    if os.environ.get(ENV_BROKER, "").strip():
        raise NotPermitted(f"Slices are kept by the node broker ({ENV_BROKER}); only its admin can reset that ledger.")
    damage = LedgerFile.damage(path)
    if damage is None and not path.exists():
        print(f"No ledger at {path}; nothing to reset.")
        return 0
    if damage is None:
        if not force:
            raise InvalidRequest(
                f"The ledger {path} is healthy; --reset-ledger moves only a damaged ledger aside. "
                "`jupyter vgpu gc` frees the slices of processes that have ended; add --force to start afresh anyway."
            )
        copy = LedgerFile.clear(path)
        print(f"Emptied the ledger {path}; what it held is kept in {copy}.")
    else:
        moved = LedgerFile.reset(path)
        print(f"Moved the ledger to {moved}; a fresh one starts at {path}.")
    open_ledger(settings).close()
    return 0
