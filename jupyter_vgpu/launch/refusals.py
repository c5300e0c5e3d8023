"""Refused kernel starts: the log ``GET /api/vgpu/refusals`` answers, whose they are, and the
words of a refusal."""

from __future__ import annotations

import os
import secrets
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from ..units import format_bytes


@dataclass
class KernelStartRequest:
    """The REST request a kernel start is made for: who asked (see :data:`START_REQUEST`), and
    the ids of the refusals the start met."""

    requester: str | None
    refused: list[str] = field(default_factory=list)
    #: Whether the client that sent the request is gone (its connection closed: a page reloaded or
    #: closed): a start waiting in line for it then stops waiting.
    gone: Callable[[], bool] = lambda: False


#: The request whose kernel start runs in this context. The server's kernel-start handlers set it
#: as a request comes in; a refusal the provisioner records then belongs to its requester and is
#: noted on it. Each request runs in its own asyncio task with a copy of the context, so one
#: request never sees another's.
START_REQUEST: ContextVar[KernelStartRequest | None] = ContextVar("jupyter_vgpu_start_request", default=None)

#: ``since``'s default: every refusal, whoever's (the server's own readers, not the REST API).
ANYONE: Final = object()


class RefusalLog:
    """The kernel starts a server refused lately, newest last: what ``GET /api/vgpu/refusals``
    answers, so JupyterLab can lay out the refusal its "Error Starting Kernel" dialog shows as
    text. Bounded: the last ``keep`` refusals, none older than ``max_age`` seconds.

    Each refusal has an id (unguessable; the refused request's reply carries it) and an owner:
    who asked for the start (``None``: no request of a known user did). The REST API shows a
    refusal to its owner only, or to anyone when it has none. Refusals a GPU node made for this
    server (``--gateway-url``) are not in the log; ``claim`` notes whose their ids are."""

    def __init__(self, keep: int = 50, max_age: float = 600.0) -> None:
        self.max_age = max_age
        self.keep = keep
        self._entries: deque[tuple[str | None, dict[str, Any]]] = deque(maxlen=keep)
        self._claims: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()
        #: Refusals since the server started, by reason (its /metrics counts them).
        self.counts: dict[str, int] = {}

    def add(self, entry: dict[str, Any], owner: str | None = None) -> str:
        """Record a refused start that ``owner`` asked for; returns the refusal's id."""
        refusal_id = secrets.token_hex(12)
        reason = str(entry.get("reason") or "unknown")
        with self._lock:
            self._entries.append((owner, {**entry, "id": refusal_id}))
            self.counts[reason] = self.counts.get(reason, 0) + 1
        return refusal_id

    def since(self, t: float, owner: object = ANYONE) -> list[dict[str, Any]]:
        """Refusals after ``t`` (seconds since the epoch), newest first; with ``owner``, only
        those it may see (its own, and those of no one)."""
        oldest = max(t, time.time() - self.max_age)
        with self._lock:
            return [
                e
                for who, e in reversed(self._entries)
                if e["t"] > oldest and (owner is ANYONE or who is None or who == owner)
            ]

    def get(self, refusal_id: str, owner: str | None) -> dict[str, Any] | None:
        """The refusal with this id, when ``owner`` may see it (None otherwise, as for no such id)."""
        oldest = time.time() - self.max_age
        with self._lock:
            for who, entry in self._entries:
                if entry["id"] == refusal_id and entry["t"] > oldest and (who is None or who == owner):
                    return entry
        return None

    def has(self, refusal_id: str) -> bool:
        """Whether this server recorded the refusal (whoever's it is)."""
        with self._lock:
            return any(entry["id"] == refusal_id for _, entry in self._entries)

    def claim(self, refusal_id: str, owner: str | None) -> None:
        """Note that a refusal made elsewhere (a GPU node's) answered ``owner``'s request."""
        with self._lock:
            self._claims[refusal_id] = owner
            while len(self._claims) > self.keep:
                self._claims.popitem(last=False)

    def may_see(self, refusal_id: str, owner: str | None) -> bool:
        """Whether ``owner`` may see the refusal made elsewhere with this id (one it was answered with)."""
        with self._lock:
            if refusal_id not in self._claims:
                return False
            who = self._claims[refusal_id]
        return who is None or who == owner


_refusal_logs: weakref.WeakKeyDictionary[Any, RefusalLog] = weakref.WeakKeyDictionary()
_logs_lock = threading.Lock()


def refusals_of(manager: Any) -> RefusalLog:
    """The refusal log of a (multi) kernel manager: one per Jupyter server."""
    with _logs_lock:
        log = _refusal_logs.get(manager)
        if log is None:
            log = _refusal_logs[manager] = RefusalLog()
        return log


def refusal_tips(detail: dict[str, Any], *, kernels: list[dict[str, str]], wait_timeout: float) -> list[str]:
    """What the person whose kernel start was refused can do, best first."""
    tips = []
    if kernels:
        names = " or ".join(f'"{k["display_name"]}"' for k in kernels[:2])
        tips.append(f"Start {names} instead: {'it fits' if len(kernels[:2]) == 1 else 'they fit'} now.")
    elif isinstance(count := detail.get("fewer_gpus_fit"), int) and count > 0:
        gpus = "1 GPU" if count == 1 else f"{count} GPUs"
        tips.append(f"A kernel of the same share on {gpus} fits now (`jupyter vgpu kernelspec install -n {count}` and its -p or -m).")
    elif detail.get("smaller_fits") and isinstance((detail.get("fits_now") or {}).get("memory"), int):
        most = format_bytes(detail["fits_now"]["memory"])
        tips.append(f"A kernel of at most {most} fits now (`jupyter vgpu kernelspec install -m {most.replace(' ', '')}`).")
    if wait_timeout > 0:
        tips.append(f"Wait longer: this kernel waits {wait_timeout:g} s in line (its wait_timeout).")
    else:
        tips.append(
            "Wait in line: a kernel installed with `jupyter vgpu kernelspec install --wait SECONDS` waits for "
            "its slice, first come, first served."
        )
    tips.append("Or ask the holders above to shut down the kernels they no longer use.")
    return tips


def refusal_text(detail: dict[str, Any], tips: list[str]) -> str:
    """A refused kernel start, as its "Error Starting Kernel" dialog shows it: the summary, a
    line per GPU, then what to do."""
    waited = detail.get("waited")
    summary = str(detail.get("summary", ""))
    said_wait = isinstance(waited, (int, float)) and "waited" not in summary.lower()
    lines = [f"Waited {waited:g} s in line. {summary}" if said_wait else summary]
    lines += [str(line) for line in detail.get("gpu_lines", [])]
    lines.append("What you can do: " + " ".join(tips))
    return "\n".join(line for line in lines if line)


def refusal_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    """A GPU of a refusal for the REST API: its holders by notebook or command, ``yours`` instead
    of a uid."""
    holders = [
        {"label": h.get("label"), "owner": h.get("owner"), "reserved": h.get("reserved"), "yours": h.get("uid") == os.getuid()}
        for h in gpu.get("holders", [])
    ]
    keep = ("index", "name", "free", "total", "foreign", "text")
    return {**{k: gpu.get(k) for k in keep}, "holders": holders}
