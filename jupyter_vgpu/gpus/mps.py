"""Is an MPS control daemon serving the GPUs? Detected the way the CUDA driver finds it.

A CUDA client connects to the control daemon through the pipe directory
(``CUDA_MPS_PIPE_DIRECTORY``, default ``/tmp/nvidia-mps``): when the daemon's ``control`` pipe
is there and ``nvidia-cuda-mps-control`` runs, every CUDA process that starts becomes an MPS
client and obeys ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``. ``JUPYTER_VGPU_MPS`` overrides the
detection: ``auto`` (default), ``on`` (tests, or a daemon this process cannot see, e.g. in
another mount namespace) or ``off`` (never hand out MPS limits).

MPS is taken to serve every GPU that is not in MIG mode: the daemon's own
``CUDA_VISIBLE_DEVICES`` is in its environment, which only root can read.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..errors import InvalidConfig
from ..units import shorten

ENV_MPS = "JUPYTER_VGPU_MPS"
MODES = ("auto", "on", "off")
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
CONTROL_DAEMON = "nvidia-cuda-mps-control"
#: The per-user server the control daemon starts; NVML lists it as a compute process.
SERVER_PROCESS = "nvidia-cuda-mps-server"

#: Seconds a detection result is reused: a daemon starts or stops rarely, a monitor ticks often.
CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class MPSStatus:
    """Whether MPS serves the (non-MIG) GPUs, and why we think so, in words."""

    active: bool
    reason: str
    pipe_directory: str


def mps_mode(env: dict[str, str] | None = None) -> str:
    """``JUPYTER_VGPU_MPS`` validated (``auto`` when unset)."""
    source = os.environ if env is None else env
    value = source.get(ENV_MPS, "").strip().lower() or "auto"
    if value not in MODES:
        raise InvalidConfig(f"{ENV_MPS}={shorten(source.get(ENV_MPS))} is not allowed; use one of: {', '.join(MODES)}.")
    return value


def pipe_directory() -> str:
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "").strip() or DEFAULT_PIPE_DIRECTORY


def detect() -> MPSStatus:
    """Look for the daemon now (no caching; see :class:`MPSDetector`)."""
    directory = pipe_directory()
    mode = mps_mode()
    if mode == "on":
        return MPSStatus(True, f"{ENV_MPS}=on", directory)
    if mode == "off":
        return MPSStatus(False, f"{ENV_MPS}=off", directory)
    control = Path(directory) / "control"
    if not control.exists():
        return MPSStatus(False, f"no MPS control pipe at {control}", directory)
    if not _daemon_running(Path(directory)):
        return MPSStatus(False, f"{control} exists but no {CONTROL_DAEMON} runs", directory)
    return MPSStatus(True, f"{CONTROL_DAEMON} serves {directory}", directory)


def _daemon_running(directory: Path) -> bool:
    # The daemon writes its pid next to its pipes; a scan of all processes is the fallback.
    try:
        pid = int((directory / f"{CONTROL_DAEMON}.pid").read_text().strip())
        return psutil.Process(pid).name() == CONTROL_DAEMON
    except (OSError, ValueError, psutil.Error):
        pass
    return any(proc.info.get("name") == CONTROL_DAEMON for proc in psutil.process_iter(["name"]))


class MPSDetector:
    """:func:`detect`, remembered for :data:`CACHE_SECONDS` (and re-run when the mode changes)."""

    def __init__(self) -> None:
        self._cached: tuple[float, str, MPSStatus] | None = None

    def status(self) -> MPSStatus:
        key = os.environ.get(ENV_MPS, "") + "\0" + pipe_directory()
        now = time.monotonic()
        if self._cached is not None and self._cached[1] == key and now - self._cached[0] < CACHE_SECONDS:
            return self._cached[2]
        status = detect()
        self._cached = (now, key, status)
        return status
