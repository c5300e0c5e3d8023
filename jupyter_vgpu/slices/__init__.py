"""Slices layer: requests, the ledger, placement, the reaper and the slice environment.

Names are imported on first use, so that a kernel which only needs ``slices.reports`` or the
request parser does not pay for SQLite, NVML and traitlets at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ..config import VGPU
    from .environment import cpu_environment, slice_environment
    from .ledger import Ledger
    from .occupancy import GPUOccupancy, Occupancy, occupancy_of
    from .placement import place
    from .records import Actor, Holder, Slice, Ticket, Tier, Waiter, summary
    from .request import SliceRequest, parse_share
    from .sqlite_ledger import SQLiteLedger

_WHERE = {
    "cpu_environment": "environment",
    "slice_environment": "environment",
    "Ledger": "ledger",
    "GPUOccupancy": "occupancy",
    "Occupancy": "occupancy",
    "occupancy_of": "occupancy",
    "place": "placement",
    "Actor": "records",
    "Holder": "records",
    "Slice": "records",
    "Ticket": "records",
    "Tier": "records",
    "Waiter": "records",
    "summary": "records",
    "SliceRequest": "request",
    "parse_share": "request",
    "SQLiteLedger": "sqlite_ledger",
}


__getattr__ = lazy_names(__name__, globals(), _WHERE)


def open_ledger(settings: VGPU | None = None, *, read_only_ok: bool = False) -> Ledger:
    """The ledger of these settings (config files and environment when none are given);
    ``read_only_ok``: one in a folder this user can only read is opened for reading.

    With ``JUPYTER_VGPU_BROKER`` set: the node broker's ledger behind that socket instead
    (:class:`~.remote.BrokerLedger`, the same interface; the broker applies the node's quotas).
    """
    import os

    from ..config import load_settings
    from ..gpus import Inventory
    from .remote import ENV_BROKER, BrokerLedger
    from .sqlite_ledger import SQLiteLedger

    settings = settings or load_settings()
    if broker := os.environ.get(ENV_BROKER, "").strip():
        return BrokerLedger(broker, path=settings.resolved_ledger_path)
    return SQLiteLedger(
        settings.resolved_ledger_path,
        Inventory(settings.resolved_simulate),
        context_allowance=settings.context_allowance_bytes,
        poll_interval=settings.poll_interval,
        read_only_ok=read_only_ok,
    )


__all__ = [
    "Actor",
    "GPUOccupancy",
    "Holder",
    "Ledger",
    "Occupancy",
    "SQLiteLedger",
    "Slice",
    "SliceRequest",
    "Ticket",
    "Tier",
    "Waiter",
    "cpu_environment",
    "occupancy_of",
    "open_ledger",
    "parse_share",
    "place",
    "slice_environment",
    "summary",
]
