"""What the ledger holds (slices, places in line) and who asks (holders, actors)."""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..enforcement import Tier as Tier  # stored with each slice; defined with the tiers' plug-ins
from ..enforcement import by_tier
from ..errors import InvalidRequest
from ..units import format_bytes, shorten
from .ids import is_slice_id as is_slice_id  # the records' rule, defined where a kernel start reads it
from .request import SliceRequest

#: What holds a slice: a kernel (its id) or a command (its command line). The UI's
#: ``HolderKind`` type (labextension/src/store/types.ts) lists the same values.
HolderKind = Literal["kernel", "command"]
HOLDER_KINDS: tuple[HolderKind, ...] = ("kernel", "command")

#: How another user's holder reads to whoever may not see it: no notebook path, command line or pid.
HIDDEN_HOLDER: dict[str, str] = {"kernel": "another user's kernel", "command": "another user's command"}

#: Bounds on what a holder may carry: a broker stores it for every user of the node.
MAX_HOLDER_TEXT = 4096
MAX_TOKEN = 64
MAX_LABELS = 32
#: A label a GPU node gives a kernel a gateway client started: its ``path`` is the notebook's path
#: on the client's machine, which the client's views map into its own root and the node's own
#: views show by name only (the node does not know that machine's folders).
GATEWAY_CLIENT = "gateway_client"


@dataclass(frozen=True)
class Holder:
    """Who a slice (or a place in line) is for, and the process whose life keeps it.

    ``pid`` None means the process that asks (a broker reads it from the socket's credentials).
    """

    kind: HolderKind
    name: str  # the kernel id, or the command line
    pid: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: A process that keeps the slice while ``pid`` is gone: the Jupyter server, which restarts a
    #: kernel that died (a kernel killed with SIGKILL keeps its slice until the server gives up).
    keeper: int | None = None
    #: The client's name for this one request: asking again with it (after an answer was lost)
    #: finds the slice or place in line the first asking got, instead of a second one.
    token: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in HOLDER_KINDS:
            raise InvalidRequest(f"holder kind {shorten(self.kind)} is not allowed; use one of: {', '.join(HOLDER_KINDS)}.")
        if not isinstance(self.name, str) or len(self.name) > MAX_HOLDER_TEXT:
            raise InvalidRequest(f"A holder's name must be text of at most {MAX_HOLDER_TEXT} characters.")
        for pid in (self.pid, self.keeper):
            if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31):
                raise InvalidRequest(f"pid {shorten(pid)} is not a process id.")
        if self.token is not None and not (
            isinstance(self.token, str)
            and 0 < len(self.token) <= MAX_TOKEN
            and self.token.isascii()
            and self.token.replace("-", "").replace("_", "").isalnum()
        ):
            raise InvalidRequest(
                f"token {shorten(self.token)} is not a request token (up to {MAX_TOKEN} letters, digits, - or _)."
            )
        object.__setattr__(self, "labels", clean_labels(self.labels))

    @classmethod
    def kernel(
        cls,
        kernel_id: str,
        *,
        pid: int | None = None,
        labels: Mapping[str, str] | None = None,
        keeper: int | None = None,
        token: str | None = None,
    ) -> Holder:
        return cls("kernel", kernel_id, pid, labels or {}, keeper, token)

    @classmethod
    def command(cls, command_line: str, *, pid: int | None = None, labels: Mapping[str, str] | None = None) -> Holder:
        return cls("command", command_line, pid, labels or {})


def notebook_path(path: Any, root: str | None = None) -> str | None:
    """A notebook's path as the views show it: relative to the server's root and normalised the way
    jupyter_server's contents API resolves it (``a/../b//c.ipynb`` is ``b/c.ipynb``, a leading ``/``
    is the root). A client sends it, so None for one that leaves the root: an absolute file system
    path outside ``root``, or ``../x.ipynb``."""
    if not isinstance(path, str) or not path:
        return None
    text = os.path.relpath(path, root) if os.path.isabs(path) and root is not None else path
    normal = os.path.normpath(text.lstrip("/"))
    if normal in (".", "..") or normal.startswith("../"):
        return None
    return normal


#: A slice's label saying what its holder asked for where that is not its request: a kernel whose
#: launcher's engine gave it a share, of which its slice is the whole ("1/4 GPU: 8 of 32 shards").
ASKED_LABEL = "asked"


def clean_labels(labels: Any, *, removable: bool = False) -> dict[str, Any]:
    """Labels as text (None too, with ``removable``, meaning "remove it"), bounded in number and size."""
    if not isinstance(labels, Mapping):
        raise InvalidRequest("Labels must be a mapping of names to text.")
    if len(labels) > MAX_LABELS:
        raise InvalidRequest(f"At most {MAX_LABELS} labels; got {len(labels)}.")
    result: dict[str, Any] = {}
    for key, value in labels.items():
        if value is None and removable:
            result[str(key)] = None
            continue
        if not isinstance(key, str) or not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InvalidRequest(f"Label {shorten(key)} must be text.")
        text = str(value)
        if len(key) > 256 or len(text) > MAX_HOLDER_TEXT:
            raise InvalidRequest(f"Label {shorten(key)} is too long (names 256, values {MAX_HOLDER_TEXT} characters).")
        result[key] = text
    return result


@dataclass(frozen=True)
class Actor:
    """Who acts on the ledger: the user whose slices and places in line they may change.

    A user's own ledger acts for the process's user; the broker acts for each caller in turn,
    as its peer credentials say. Admins (root, or a hub admin at the broker) may change any.
    """

    user: str
    uid: int
    admin: bool = False

    @classmethod
    def this_process(cls) -> Actor:
        uid = os.getuid()
        try:
            user = getpass.getuser()
        except Exception:
            user = str(uid)
        return cls(user, uid, admin=uid == 0)

    def may_change(self, owner_uid: int) -> bool:
        return self.admin or owner_uid == self.uid


@dataclass(frozen=True)
class Slice:
    """A reservation: ``memory`` bytes on each of ``gpus`` (UUIDs), context allowance included."""

    id: str
    owner: str
    uid: int
    holder_kind: HolderKind
    holder: str  # kernel id, or the command line
    pid: int | None
    pid_start: float | None
    gpus: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    memory: tuple[int, ...]  # bytes reserved on each GPU, same order as gpus
    memory_total: tuple[int, ...]  # each GPU's capacity
    context_allowance: int
    logical_devices: int
    request: SliceRequest
    labels: dict[str, str] = field(default_factory=dict)
    created: float = 0.0
    tier: Tier = Tier.COOPERATIVE  # the enforcement chosen at reservation
    mig_devices: tuple[str, ...] = ()  # MIG-... UUID per GPU (same order as gpus) for a MIG slice
    mig_profiles: tuple[str, ...] = ()  # e.g. "1g.10gb", same order
    keeper_pid: int | None = None  # a process that keeps the slice while the holder restarts (the server)
    keeper_start: float | None = None
    pid_stamp: str | None = None  # the holder's boot id and start tick: who it is, whatever the clock does
    keeper_stamp: str | None = None
    hidden: bool = False  # shown to another user: holder, labels and pids left out (:meth:`seen_by`)
    #: What the placing process decided for the tier beyond the GPUs (``Enforcement.setup``:
    #: HAMi-core's library), sent by a broker with each slice; empty: this process's own settings.
    tier_setup: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("mig_devices", "mig_profiles"):  # lists from a JSON round trip
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.tier, Tier):
            object.__setattr__(self, "tier", Tier(self.tier))

    @property
    def visible_devices(self) -> tuple[str, ...]:
        """What ``CUDA_VISIBLE_DEVICES`` names: the MIG devices of a MIG slice, else the GPUs."""
        return self.mig_devices if self.tier is Tier.MIG and self.mig_devices else self.gpus

    @property
    def device_memory(self) -> tuple[int, ...]:
        """Each visible device's total memory as CUDA reports it to the slice's processes (a MIG
        device's own size; under HAMi-core, the slice's limit): what frameworks' fractions are of."""
        tier = by_tier(self.tier)
        return tuple(tier.cuda_total(reserved, total) for reserved, total in zip(self.memory, self.memory_total))

    @property
    def tier_text(self) -> str:
        """``hard (MIG 1g.10gb)``, ``hard (MPS)`` or ``cooperative``: the tier set at reservation."""
        return self.tier.describe(self.mig_profiles)

    @property
    def share_note(self) -> str:
        """What the slice reserves, in words (its tier's plug-in says it)."""
        return by_tier(self.tier).share_note(self.fraction)

    @property
    def memory_per_gpu(self) -> int:
        return min(self.memory) if self.memory else 0

    @property
    def memory_limit(self) -> int:
        """What frameworks may allocate per GPU: the slice minus the context allowance."""
        return max(0, self.memory_per_gpu - self.context_allowance)

    @property
    def memory_burst_limit(self) -> int | None:
        """What frameworks may grow to per GPU in an elastic slice: its limit (on the smallest of its
        GPUs, never more than a GPU) minus the context allowance; None without a limit. Only a
        slice of a tier that bursts does (cooperative, HAMi-core, MPS memory partitioning, whose caps
        are set at the limit); MIG and MPS's pinned limit hold its processes at the reservation,
        so there frameworks get :attr:`memory_limit` as before."""
        if not self.request.elastic or not by_tier(self.tier).bursts or not self.memory_total:
            return None
        limits = [self.request.limit_on(total) or 0 for total in self.memory_total]
        burst = max(min(limits), self.memory_per_gpu)
        return max(0, burst - self.context_allowance)

    @property
    def memory_allowed(self) -> tuple[int, ...]:
        """What the slice may use on each of its GPUs before it is over its limit: an elastic
        cooperative slice's limit (it bursts there, its request booked), else what it reserves."""
        if self.memory_burst_limit is None:
            return self.memory
        return tuple(max(reserved, self.request.limit_on(total) or 0) for reserved, total in zip(self.memory, self.memory_total))

    @property
    def fraction(self) -> float:
        """The share of each GPU this slice holds (of the smallest, for mixed GPUs)."""
        if not self.memory:
            return 0.0
        return min(m / t for m, t in zip(self.memory, self.memory_total))

    def seen_by(self, actor: Actor) -> Slice:
        """The slice as ``actor`` may see it: another user's without its holder (notebook path,
        command line), labels or pids. Every message built from it is then safe to show them."""
        if actor.may_change(self.uid):
            return self
        return replace(
            self,
            holder=HIDDEN_HOLDER[self.holder_kind],
            labels={},
            pid=None,
            pid_start=None,
            keeper_pid=None,
            keeper_start=None,
            pid_stamp=None,
            keeper_stamp=None,
            hidden=True,
        )

    def describe_holder(self) -> str:
        """Who holds it, as a person knows it: the notebook, else the kernel, else the command."""
        if self.hidden:
            return HIDDEN_HOLDER[self.holder_kind]
        if self.holder_kind == "kernel":
            if path := self.labels.get("path"):
                if self.labels.get(GATEWAY_CLIENT) and os.path.isabs(path):
                    return f"{os.path.basename(path)} (a gateway client's)"
                return path
            name = self.labels.get("kernel_display_name") or self.labels.get("kernel_name")
            return f"kernel {self.holder[:8]}" + (f" ({name})" if name else "")
        return self.holder if len(self.holder) <= 80 else self.holder[:77] + "..."

    def to_dict(self) -> dict[str, Any]:
        """The slice's fields in the vocabulary every JSON view shares (docs/rest.md, "SLICE")."""
        return {
            "id": self.id,
            "owner": self.owner,
            "uid": self.uid,
            "holder_kind": self.holder_kind,
            "holder": self.holder,
            "pid": self.pid,
            "gpus": list(self.gpus),
            "gpu_indices": list(self.gpu_indices),
            "fraction": self.fraction,
            "request": self.request.to_dict(),
            "request_text": self.labels.get(ASKED_LABEL) or self.request.describe(),
            "memory_reserved": self.memory_per_gpu,
            "memory_reserved_total": sum(self.memory),
            "memory_reserved_by_gpu": dict(zip(self.gpus, self.memory)),
            "context_allowance": self.context_allowance,
            "memory_limit": self.memory_limit,
            "memory_burst_limit": self.memory_burst_limit,
            "logical_devices": self.logical_devices,
            "tier": self.tier_text,
            "tier_kind": self.tier.value,
            "share_note": self.share_note,
            "visible_devices": list(self.visible_devices),
            "mig_devices": list(self.mig_devices),
            "mig_profiles": list(self.mig_profiles),
            "labels": dict(self.labels),
            "created": self.created,
        }


@dataclass
class Ticket:
    """A place in line for a request that waits; ``token`` is its request token, if it had one
    (asking for the place again with it, after a lost answer, finds the slice it was granted)."""

    number: int
    request: SliceRequest
    last_reason: str = ""
    token: str | None = None


@dataclass(frozen=True)
class Waiter:
    ticket: int
    position: int
    owner: str
    uid: int
    holder_kind: HolderKind
    holder: str
    pid: int | None
    request: SliceRequest
    labels: dict[str, str]
    created: float
    #: The GPUs its user's policy lets it use (UUIDs; None: any), as the broker knows them: what
    #: the idle reclaim asks before freeing a slice for it. Not in :meth:`to_dict` (REST).
    allowed_gpus: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ticket": self.ticket,
            "position": self.position,
            "owner": self.owner,
            "uid": self.uid,
            "holder_kind": self.holder_kind,
            "holder": self.holder,
            "pid": self.pid,
            "request": self.request.to_dict(),
            "request_text": self.request.describe(),
            "labels": dict(self.labels),
            "created": self.created,
            "waiting_seconds": max(0.0, time.time() - self.created),
        }


def summary(slice_: Slice) -> str:
    """``slice 1a2b3c4d5e6f: 4.0 GiB on GPU 0 (1/4 GPU)``: its GPUs named once (a pinned request's
    GPU is the slice's)."""
    gpus = ", ".join(str(i) for i in slice_.gpu_indices)
    return f"slice {slice_.id}: {format_bytes(slice_.memory_per_gpu)} on GPU {gpus} ({slice_.request.describe(pin=False)})"
