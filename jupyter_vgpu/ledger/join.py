"""A process of a slice enters its tier's hold as it starts (:meth:`~jupyter_vgpu.enforcement.base.Enforcement.enter`:
the MPS memory-partitioning tier's cgroup): the start-up hook of every Python process of the slice,
and ``jupyter vgpu run`` before it starts its command (so any program is held, and every child).

A slice whose tier has such a hold carries ``JUPYTER_VGPU_ENTER`` (the tier's value) in its
environment. The tier decides whether the process is in already and what to do; where the process
cannot enter by itself, it asks the ledger to join it (:meth:`~.contract.Ledger.join_hold`): a
process that keeps the book itself (root) does it, any other asks the node broker, which joins the
process that asks, and only into a slice of its own user. A process tries once and takes the
variable out, so its children inherit the outcome, not the wait.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from ..enforcement.base import ENV_ENTER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .contract import Ledger


def enter_here(env: MutableMapping[str, str] | None = None) -> str | None:
    """Put this process into its slice's hold, where its tier has one. Returns why it could not
    (the tier also leaves the reason in the environment, which children inherit and ``%vgpu``
    says); None when it is in, or there is nothing to enter."""
    env = os.environ if env is None else env
    name = env.pop(ENV_ENTER, "")
    if not name:
        return None
    from ..enforcement import Tier, by_tier

    try:
        tier = by_tier(Tier(name))
    except (ValueError, KeyError):
        return None  # not a tier of this release: nothing here knows its hold
    slice_id = env.get("JUPYTER_VGPU_SLICE_ID", "")
    return tier.enter(env, lambda: _ask_to_join(slice_id))


def _ask_to_join(slice_id: str) -> str | None:
    """Ask the book to join this process to the slice's hold: None, or why it could not."""
    from ..errors import VGPUError
    from . import open_ledger
    from .broker_client import ENV_BROKER, BrokerLedger

    try:
        if broker := os.environ.get(ENV_BROKER, "").strip():
            # a broker that is down delays the start of the process (and so of its tree) this much at most
            ledger: Ledger = BrokerLedger(broker, path="", timeout=ASK_SECONDS)
        else:
            ledger = open_ledger()
        try:
            ledger.join_hold(slice_id, os.getpid())
        finally:
            ledger.close()
    except VGPUError as error:
        return str(error).rstrip(".")
    except OSError as error:
        return f"the ledger could not be asked ({error.strerror or error})"
    return None


#: Seconds a joining process waits for the broker (it delays the start of a kernel or command).
ASK_SECONDS = 3.0
