"""A kernel start refused for room on a plain server (no gateway): the REST API answers 503 with
the refusal's sentence, as behind a gateway, not 500 with jupyter_server's wrapping (issue 30)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import write_sliced_kernelspec
from tornado.httpclient import HTTPClientError

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices import Holder, SliceRequest

WHOLE = "python3-vgpu-one"
GPUS = [{"name": "Simulated A100", "memory": "16GiB"}, {"name": "Simulated A100", "memory": "16GiB"}]


@pytest.fixture
def full_gpus(simulation_file: Any, jp_data_dir: Path) -> Any:
    """Both simulated GPUs held whole by a command; a 1 GPU kernelspec installed."""
    simulation_file(GPUS)
    write_sliced_kernelspec(jp_data_dir, {"gpus": 1, "gpu_fraction": 1}, name=WHOLE, display_name="Python 3 (1 GPU)")
    ledger = open_ledger()
    held = [ledger.reserve_now(SliceRequest.parse(1), Holder.command("python hog.py", pid=os.getpid())) for _ in GPUS]
    yield ledger
    for one in held:
        ledger.release(one.id)


async def refusal(jp_fetch: Any, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", route, method="POST", body=json.dumps(body))
    assert caught.value.response is not None
    return caught.value.code, json.loads(caught.value.response.body)


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("sessions", {"path": "train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": WHOLE}}),
        ("kernels", {"name": WHOLE}),
    ],
)
async def test_a_start_refused_for_room_is_a_503_with_the_sentence(
    jp_fetch: Any, vgpu_server: Any, full_gpus: Any, route: str, body: dict[str, Any]
) -> None:
    code, reply = await refusal(jp_fetch, route, body)

    assert code == 503, reply
    message = reply["message"]
    assert message.splitlines()[0] == "No room for 1 GPU (16.0 GiB) now: every GPU is full.", message
    assert "traceback" not in reply and "Traceback" not in message and "HTTP 503" not in message
    (refused,) = json.loads((await jp_fetch("api", "vgpu", "refusals")).body)["refusals"]
    assert refused["message"] == message and refused["status"] == 503
    assert [s.holder_kind for s in full_gpus.slices()] == ["command", "command"]  # nothing reserved
    assert full_gpus.waiting() == []
    assert json.loads((await jp_fetch("api", "sessions")).body) == []
    assert json.loads((await jp_fetch("api", "kernels")).body) == []
