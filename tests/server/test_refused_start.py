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

from .conftest import counted

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
    jp_fetch: Any, vgpu_server: Any, full_gpus: Any, route: str, body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    code, reply = await refusal(jp_fetch, route, body)
    # the server log: one line for the refusal (jupyter_client logs its traceback), no traceback
    assert "Traceback" not in caplog.text, caplog.text
    said = [r.getMessage() for r in caplog.records if "kernel start refused" in r.getMessage()]
    assert said == ["jupyter-vgpu: kernel start refused (503): No room for 1 GPU (16.0 GiB) now: every GPU is full."], caplog.text

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
    # /metrics counts the refusal by its reason (issue 48)
    assert await counted(jp_fetch, "jupyter_vgpu_refusals_total", reason=refused["reason"]) == 1, refused["reason"]


async def login_cookie(jp_fetch: Any) -> dict[str, str]:
    """The headers of a browser-like client: the login cookie jupyter_server gives a request that
    shows its token (each such cookie is another user; without one, every request is anonymous)."""
    response = await jp_fetch("api", "vgpu", "devices")
    cookies = [c.split(";", 1)[0] for c in response.headers.get_list("Set-Cookie")]
    assert cookies, "jupyter_server set no login cookie"
    return {"Cookie": "; ".join(cookies)}


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("sessions", {"path": "train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": WHOLE}}),
        ("kernels", {"name": WHOLE}),
    ],
)
async def test_a_refused_start_names_its_refusal_which_only_its_user_can_read(
    jp_fetch: Any, vgpu_server: Any, full_gpus: Any, route: str, body: dict[str, Any]
) -> None:
    alice, bob = await login_cookie(jp_fetch), await login_cookie(jp_fetch)
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", route, method="POST", body=json.dumps(body), headers=dict(alice))
    assert caught.value.response is not None
    reply = json.loads(caught.value.response.body)
    refusal_id = reply["refusal_id"]
    assert caught.value.response.headers["X-Jupyter-VGPU-Refusal"] == refusal_id  # read where the body is gone

    refusal = json.loads((await jp_fetch("api", "vgpu", "refusals", refusal_id, headers=dict(alice))).body)
    assert refusal["id"] == refusal_id and refusal["message"] == reply["message"]
    assert (refusal["status"], refusal["reason"], refusal["asked"]) == (503, "full", "1 GPU")
    assert [g["index"] for g in refusal["gpus"]] == [0, 1]
    mine = json.loads((await jp_fetch("api", "vgpu", "refusals", headers=dict(alice))).body)["refusals"]
    assert [r["id"] for r in mine] == [refusal_id]

    # Another user (another login), and a request that shows the token alone: no such refusal.
    for other in (bob, {}):
        with pytest.raises(HTTPClientError) as hidden:
            await jp_fetch("api", "vgpu", "refusals", refusal_id, headers=dict(other))
        assert hidden.value.code == 404
        assert "No refused kernel start of yours" in json.loads(hidden.value.response.body)["message"]  # type: ignore[union-attr]
        theirs = json.loads((await jp_fetch("api", "vgpu", "refusals", headers=dict(other))).body)["refusals"]
        assert theirs == []
    with pytest.raises(HTTPClientError) as unknown:
        await jp_fetch("api", "vgpu", "refusals", "0" * 24, headers=dict(alice))
    assert unknown.value.code == 404


async def test_a_refused_kernel_change_is_answered_like_a_refused_start(
    jp_fetch: Any, vgpu_server: Any, full_gpus: Any
) -> None:
    """``PATCH /api/sessions/<id>`` (JupyterLab's "Change Kernel"): jupyter_server answers a failed
    change with 501 and the error's repr; the refusal's status, sentence and id replace that."""
    alice = await login_cookie(jp_fetch)
    body = {"path": "plain.ipynb", "type": "notebook", "name": "plain.ipynb", "kernel": {"name": "python3"}}
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=json.dumps(body), headers=dict(alice))).body)
    try:
        with pytest.raises(HTTPClientError) as caught:
            change = json.dumps({"kernel": {"name": WHOLE}})
            await jp_fetch("api", "sessions", session["id"], method="PATCH", body=change, headers=dict(alice))
        assert caught.value.code == 503
        reply = json.loads(caught.value.response.body)  # type: ignore[union-attr]
        assert reply["message"].splitlines()[0] == "No room for 1 GPU (16.0 GiB) now: every GPU is full."
        refusal = json.loads((await jp_fetch("api", "vgpu", "refusals", reply["refusal_id"], headers=dict(alice))).body)
        assert refusal["path"] == "plain.ipynb" and refusal["message"] == reply["message"]
        assert [s.holder_kind for s in full_gpus.slices()] == ["command", "command"]  # nothing reserved
    finally:
        await jp_fetch("api", "sessions", session["id"], method="DELETE")
