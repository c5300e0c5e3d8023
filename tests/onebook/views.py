"""Every view of the ledger, read side by side: the server's REST API, `jupyter vgpu status
--json` (a command that starts and exits) and the file itself; and the checks a test runs on
them after every step (one set of slices, no GPU booked past its capacity, no deleted ledger
file held open by the server)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_process import JupyterProcess

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


def file_view(ledger: Path) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """The slice ids in the file, and per GPU (reserved, capacity), read with SQLite read-only."""
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=30)
    try:
        ids = {row[0] for row in db.execute("SELECT id FROM slices")}
        booked = {
            uuid: (int(reserved), int(total))
            for uuid, reserved, total in db.execute(
                "SELECT g.uuid, COALESCE(SUM(s.memory), 0), g.memory_total FROM gpus g"
                " LEFT JOIN slice_gpus s ON s.gpu_uuid = g.uuid GROUP BY g.uuid"
            )
        }
    finally:
        db.close()
    return ids, booked


def command_view(env: dict[str, str]) -> set[str]:
    result = subprocess.run([JUPYTER_VGPU, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {s["id"] for s in json.loads(result.stdout)["slices"]}


def server_view(server: JupyterProcess, after: float) -> set[str]:
    """The slices in the server's first sample taken after ``after`` (its monitor ticks fast)."""
    deadline = time.monotonic() + 30
    while True:
        status, reply = server.api("GET", "api/vgpu/slices?since=1e300")
        assert status == 200, reply
        if reply["taken_at"] > after:
            assert reply.get("message") in (None, ""), reply.get("message")
            return {s["id"] for s in reply["slices"]}
        assert time.monotonic() < deadline, "the server's monitor took no sample for 30 s"
        time.sleep(0.05)


def deleted_ledger_files(pid: int, ledger: Path) -> list[str]:
    """Descriptors of ``pid`` on the ledger's files that point at deleted files (a split)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith(str(ledger)) and link.endswith("(deleted)"):
            found.append(link)
    return found


def assert_one_book(server: JupyterProcess, env: dict[str, str], ledger: Path, step: str) -> set[str]:
    """Every view sees the same slices and no GPU is booked past its capacity; returns the ids."""
    after = time.time()
    ids, booked = file_view(ledger)
    over = {uuid: b for uuid, b in booked.items() if b[0] > b[1]}
    assert not over, f"{step}: GPUs booked past their capacity: {over}"
    assert command_view(env) == ids, f"{step}: `jupyter vgpu status` disagrees with the ledger file"
    assert server_view(server, after) == ids, f"{step}: the server's /api/vgpu/slices disagrees with the ledger file"
    assert deleted_ledger_files(server.process.pid, ledger) == [], f"{step}: the server writes a deleted ledger file"
    return ids


def start_kernel(server: JupyterProcess, name: str) -> tuple[int, Any]:
    return server.api("POST", "api/kernels", {"name": name}, timeout=90)


def stop_kernel(server: JupyterProcess, kernel_id: str) -> None:
    status, reply = server.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)
    assert status == 204, reply


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JUPYTER_VGPU, "run", *args], env=env, capture_output=True, text=True, timeout=90)


def wait_for_ids(ledger: Path, count: int, timeout: float = 30) -> set[str]:
    deadline = time.monotonic() + timeout
    while True:
        ids, _ = file_view(ledger)
        if len(ids) == count:
            return ids
        assert time.monotonic() < deadline, f"expected {count} slices in the ledger, found {len(ids)}"
        time.sleep(0.05)
