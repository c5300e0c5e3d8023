"""What a process holding a slice says about itself, for the server to read.

A kernel writes a small JSON report next to the ledger (``<ledger dir>/reports/<slice id>.json``):
which frameworks it configured and how, and the GPU memory its frameworks say they hold. The
server uses it to show what was applied, and as the usage figure when NVML's pids cannot be
matched (containers), marked "reported" rather than "measured".

Report shape::

    {"slice_id": "...", "pid": 1234, "updated": 1700000000.0,
     "frameworks": {"tensorflow": {"status": "applied", "detail": "2 logical GPUs of 1.8 GiB"}},
     "memory_used": 123456 | null,      # bytes the frameworks report holding, all GPUs
     "peak_memory_used": 234567 | null}
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def report_dir(ledger_path: str | Path) -> Path:
    return Path(ledger_path).parent / "reports"


def report_path(ledger_path: str | Path, slice_id: str) -> Path:
    return report_dir(ledger_path) / f"{slice_id}.json"


def write_report(ledger_path: str | Path, slice_id: str, report: dict[str, Any]) -> None:
    """Atomically replace the slice's report (readers never see half a file)."""
    target = report_path(ledger_path, slice_id)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {"slice_id": slice_id, "pid": os.getpid(), "updated": time.time(), **report}
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{slice_id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_report(ledger_path: str | Path, slice_id: str) -> dict[str, Any] | None:
    """The slice's last report, or None if there is none (or it cannot be read)."""
    try:
        data = json.loads(report_path(ledger_path, slice_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_report(ledger_path: str | Path, slice_id: str) -> None:
    report_path(ledger_path, slice_id).unlink(missing_ok=True)
