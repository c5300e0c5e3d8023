"""What a slice's holders left in the user's reports folder goes when the slice has ended, even when
no one was left to remove it (hardening round five, L-5: a server SIGKILLed with its kernels)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from jupyter_vgpu.config import VGPU
from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.server.monitor import UsageMonitor
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.reports import add_notice, report_dir, write_report


def test_the_reports_of_a_slice_whose_holders_were_killed_go_with_its_slice(tmp_path: Path) -> None:
    ledger = open_ledger(VGPU(ledger_path=str(tmp_path / "ledger.sqlite"), simulate="1x16GiB"))
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    monitor = UsageMonitor(ledger, interval=1.0)
    try:
        dead = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.kernel("k-killed", pid=kernel.pid))
        live = ledger.reserve_now(SliceRequest.parse("1/4"), Holder.command("train"))
        for s in (dead, live):
            write_report(ledger.path, s.id, {"frameworks": {}})
            add_notice(ledger.path, s.id, {"kind": "idle", "stage": "ahead", "message": "..."})
        folder = report_dir(ledger.path)
        long_ago = time.time() - 3600
        for path in folder.iterdir():
            os.utime(path, (long_ago, long_ago))
        kernel.kill()  # and its server with it: nobody removes its reports
        kernel.wait()
        newer = folder / "0123456789ab.json"  # a slice booked after the book was read may have written one
        newer.write_text("{}")

        assert monitor.collect().message is None  # the first tick reaps
        assert [s.id for s in ledger.slices()] == [live.id]
        left = sorted(p.name for p in folder.iterdir())
        assert not [name for name in left if name.startswith(dead.id)], left
        assert f"{live.id}.json" in left and f"{live.id}.notices.json" in left and newer.name in left, left
    finally:
        kernel.kill()
        monitor.executor.shutdown(wait=False)
        ledger.close()
