"""Refused kernel starts: the log ``GET /api/vgpu/refusals`` answers, and the words of a refusal."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from typing import Any

from ..units import format_bytes


class RefusalLog:
    """The kernel starts a server refused lately, newest last: what ``GET /api/vgpu/refusals``
    answers, so JupyterLab can lay out the refusal its "Error Starting Kernel" dialog shows as
    text. Bounded: the last ``keep`` refusals, none older than ``max_age`` seconds."""

    def __init__(self, keep: int = 50, max_age: float = 600.0) -> None:
        self.max_age = max_age
        self._entries: deque[dict[str, Any]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def since(self, t: float) -> list[dict[str, Any]]:
        """Refusals after ``t`` (seconds since the epoch), newest first."""
        oldest = max(t, time.time() - self.max_age)
        with self._lock:
            return [e for e in reversed(self._entries) if e["t"] > oldest]


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
    lines = [f"Waited {waited:g} s in line. {summary}" if isinstance(waited, (int, float)) else summary]
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
