"""What the benchmarks share: a percentile of timings, and a free port on loopback. Each benchmark
runs as a script (``python benchmarks/NAME.py``), so this folder is on its import path."""

from __future__ import annotations

import socket


def percentile(values: list[float], share: float) -> float:
    """The value at ``share`` (0.95: p95) of the sorted values, the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
