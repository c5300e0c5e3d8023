"""The slice model: requests, records, occupancy, placement, refusals, usage and the slice
environment. No SQLite and no sockets: the book that records slices is :mod:`jupyter_vgpu.ledger`.

Names are imported on first use, so that a kernel which only needs ``slices.reports`` or the
request parser does not pay for SQLite, NVML and traitlets at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .environment import cpu_environment, slice_environment
    from .occupancy import GPUOccupancy, Occupancy, occupancy_of
    from .placement import place
    from .records import Actor, Holder, Slice, Ticket, Tier, Waiter, summary
    from .request import SliceRequest, parse_share

_WHERE = {
    "cpu_environment": "environment",
    "slice_environment": "environment",
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
}


__getattr__ = lazy_names(__name__, globals(), _WHERE)


__all__ = [
    "Actor",
    "GPUOccupancy",
    "Holder",
    "Occupancy",
    "Slice",
    "SliceRequest",
    "Ticket",
    "Tier",
    "Waiter",
    "cpu_environment",
    "occupancy_of",
    "parse_share",
    "place",
    "slice_environment",
    "summary",
]
