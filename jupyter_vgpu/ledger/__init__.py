"""The book: who holds which slice, and who waits in line (DESIGN.md, "Ledger contract").

:class:`~.contract.Ledger` is the contract; it has two implementations, the SQLite file
(:class:`~.sqlite.SQLiteLedger`: the user's own, or the node's that the broker keeps) and the
client of the node broker (:class:`~.broker_client.BrokerLedger`). :func:`open_ledger` gives the
one a process should use; callers never know which. The file underneath is split along its ideas:
:mod:`.schema` (tables, upgrades, building a new file), :mod:`.connection` (one connection per
file and process, with split detection), :mod:`.turn` (the writers' turn and who holds it) and
:mod:`.file` (transactions, damage, clear, reset). The slice model the book records lives in
:mod:`jupyter_vgpu.slices`, which knows nothing of SQLite or sockets.

Names are imported on first use, so that a process that only needs one of them does not pay for
SQLite, sockets and NVML at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ..config import VGPU
    from .broker_client import BrokerLedger
    from .contract import Ledger
    from .sqlite import SQLiteLedger

_WHERE = {"Ledger": "contract", "SQLiteLedger": "sqlite", "BrokerLedger": "broker_client"}

__getattr__ = lazy_names(__name__, globals(), _WHERE)


def open_ledger(settings: VGPU | None = None, *, read_only_ok: bool = False) -> Ledger:
    """The ledger of these settings (config files and environment when none are given);
    ``read_only_ok``: one in a folder this user can only read is opened for reading.

    With ``JUPYTER_VGPU_BROKER`` set: the node broker's ledger behind that socket instead
    (:class:`~.broker_client.BrokerLedger`, the same interface; the broker applies the node's quotas).
    """
    import os

    from ..config import load_settings
    from ..gpus import Inventory
    from ..gpus.simulated_use import use_folder
    from .broker_client import ENV_BROKER, BrokerLedger
    from .sqlite import SQLiteLedger

    settings = settings or load_settings()
    if broker := os.environ.get(ENV_BROKER, "").strip():
        return BrokerLedger(broker, path=settings.resolved_ledger_path)
    return SQLiteLedger(
        settings.resolved_ledger_path,
        # on simulated GPUs, the use its processes' frameworks say they hold (gpus.simulated_use)
        Inventory(settings.resolved_simulate, use_folder=use_folder(settings.resolved_ledger_path.parent)),
        context_allowance=settings.context_allowance_bytes,
        poll_interval=settings.poll_interval,
        read_only_ok=read_only_ok,
    )


__all__ = ["BrokerLedger", "Ledger", "SQLiteLedger", "open_ledger"]
