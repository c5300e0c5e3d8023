"""A process of a slice with a memory partition (the MPS memory-partitioning tier) joins the
slice's cgroup as it starts: the start-up hook of every Python process of the slice, and
``jupyter vgpu run`` before it starts its command (so any program is held, and every child).

Joining asks the ledger (:meth:`~.contract.Ledger.join_partition`): a process that may manage
cgroups itself (root) makes the slice's cgroup and moves itself; any other asks the node broker,
which moves the process that asks, and only into a slice of its own user.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from ..enforcement.mpspartition import ENV_JOIN, ENV_PROBLEM, in_partition

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .contract import Ledger


def join_here(env: MutableMapping[str, str] | None = None) -> str | None:
    """Put this process into its slice's cgroup, where the slice has one and the process is not
    in it yet. Returns why it could not (also left in ``JUPYTER_VGPU_PARTITION_PROBLEM``, which its
    children inherit: they do not try again, and ``%vgpu`` says it); None when it is in (or there
    is nothing to join)."""
    env = os.environ if env is None else env
    slice_id = env.get(ENV_JOIN, "")
    if not slice_id or in_partition(slice_id):
        env.pop(ENV_PROBLEM, None)
        return None
    if env.get(ENV_PROBLEM):
        return env[ENV_PROBLEM]  # this process or its parent tried already
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
            ledger.join_partition(slice_id, os.getpid())
        finally:
            ledger.close()
    except VGPUError as error:
        problem = str(error).rstrip(".")
    except OSError as error:
        problem = f"the ledger could not be asked ({error.strerror or error})"
    else:
        if in_partition(slice_id):
            env.pop(ENV_PROBLEM, None)
            return None
        problem = "the process is not in the slice's cgroup after joining it"
    env[ENV_PROBLEM] = problem
    return problem


#: Seconds a joining process waits for the broker (it delays the start of a kernel or command).
ASK_SECONDS = 3.0
