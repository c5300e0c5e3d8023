"""Slices layer: requests, the ledger, placement, the reaper and the slice environment."""

from __future__ import annotations

from ..config import VGPU, load_settings
from ..gpus import Inventory
from .environment import cpu_environment, slice_environment
from .ledger import Ledger, Slice, Ticket, Waiter, summary
from .placement import GPUState, place
from .request import SliceRequest, parse_share


def open_ledger(settings: VGPU | None = None) -> Ledger:
    """The ledger of these settings (config files and environment when none are given)."""
    settings = settings or load_settings()
    return Ledger(
        settings.resolved_ledger_path,
        Inventory(settings.resolved_simulate),
        context_allowance=settings.context_allowance_bytes,
        poll_interval=settings.poll_interval,
    )


__all__ = [
    "GPUState",
    "Ledger",
    "Slice",
    "SliceRequest",
    "Ticket",
    "Waiter",
    "cpu_environment",
    "open_ledger",
    "parse_share",
    "place",
    "slice_environment",
    "summary",
]
