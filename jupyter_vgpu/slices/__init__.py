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
    from .ledger import Ledger, Slice, Ticket, Waiter, summary
    from .placement import GPUState, place
    from .request import SliceRequest, parse_share

_WHERE = {
    "cpu_environment": "environment",
    "slice_environment": "environment",
    "Ledger": "ledger",
    "Slice": "ledger",
    "Ticket": "ledger",
    "Waiter": "ledger",
    "summary": "ledger",
    "GPUState": "placement",
    "place": "placement",
    "SliceRequest": "request",
    "parse_share": "request",
}


__getattr__ = lazy_names(__name__, globals(), _WHERE)


def open_ledger(settings: VGPU | None = None) -> Ledger:
    """The ledger of these settings (config files and environment when none are given).

    With ``JUPYTER_VGPU_BROKER`` set: the node broker's ledger behind that socket instead
    (:class:`~.remote.BrokerLedger`, the same interface; the broker applies the node's quotas).
    """
    import os

    from ..config import load_settings
    from ..gpus import Inventory
    from .ledger import Ledger
    from .remote import ENV_BROKER, BrokerLedger

    settings = settings or load_settings()
    if broker := os.environ.get(ENV_BROKER, "").strip():
        return BrokerLedger(broker, path=settings.resolved_ledger_path)
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
