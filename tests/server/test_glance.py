"""What the UI shows at a glance besides the GPUs (issue 33): the machine's CPU and memory with
the GPUs, a slice that lived seconds as an event in the dashboard's history, and a word when the
kernelspecs change so that JupyterLab reads them again at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, SliceRequest

from .conftest import get_json, until


async def test_the_gpus_reply_carries_the_machines_cpu_and_memory(jp_fetch: Any, vgpu_server: Any) -> None:
    host = (await get_json(jp_fetch, "api", "vgpu", "devices"))["host"]
    assert host["memory_total"] > host["memory_used"] > 0
    assert host["cpu_count"] >= 1
    sample = json.loads((await jp_fetch("api", "vgpu", "sample", params={"since": "", "devices": ""})).body)
    host = sample["devices"]["host"]
    assert isinstance(host["cpu_percent"], float) and 0 <= host["cpu_percent"] <= 100  # read before: a figure now
    assert host["memory_total"] > host["memory_used"] > 0


async def test_a_command_slice_that_lived_seconds_stays_in_the_dashboards_history(
    jp_fetch: Any, vgpu_server: Any
) -> None:
    command = subprocess.Popen(["sleep", "60"])
    ledger = open_ledger()
    try:
        held = ledger.reserve(SliceRequest.parse(fraction=0.5), Holder("command", "python eval.py", pid=command.pid))

        async def history() -> Any:
            return await get_json(jp_fetch, "api", "vgpu", "history")

        async def live() -> bool:
            return held.id in [s["id"] for s in (await history())["slices"]]

        await until(live, what="the command's slice in the history")
        ledger.release(held.id)

        async def ended() -> Any:
            return next((e for e in (await history())["ended"] if e["id"] == held.id), None)

        event = await until(ended, what="the command's slice to be kept as ended")
    finally:
        ledger.close()
        command.kill()
        command.wait()
    assert event["command"] == "python eval.py" and event["holder_kind"] == "command"
    assert event["request_text"] == "1/2 GPU" and event["gpu_indices"] == [0]
    assert event["created"] <= event["last_seen"] <= event["ended"]
    assert event["ended"] - event["created"] < 30
    reply = await get_json(jp_fetch, "api", "vgpu", "history")
    assert held.id not in [s["id"] for s in reply["slices"]]  # no longer a live slice's chart


async def test_the_sample_says_when_a_kernelspec_is_installed(jp_fetch: Any, vgpu_server: Any, jp_data_dir: Path) -> None:
    async def stamp() -> str:
        return str(json.loads((await jp_fetch("api", "vgpu", "sample", params={"since": ""})).body)["kernelspecs"])

    before = await stamp()
    assert before == await stamp()  # nothing changed: the same word
    spec = jp_data_dir / "kernels" / "python3-vgpu-1-2"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (1/2 GPU)", "language": "python"}))
    after = await stamp()
    assert after != before
    assert await stamp() == after
