"""What a user of a real server sees when the GPU is full: a refusal that names the notebooks
holding the GPU and the installed kernels that fit now, a place in line they can see and cancel."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import write_sliced_kernelspec
from tornado.httpclient import HTTPClientError

from jupyter_vgpu.ledger import SQLiteLedger, open_ledger
from jupyter_vgpu.slices import Actor, Holder, SliceRequest

from .conftest import DISPLAY_NAME, KERNEL, get_json, until

USER = Actor.this_process().user


def spec(jp_data_dir: Path, name: str, config: dict[str, Any], display: str) -> str:
    write_sliced_kernelspec(jp_data_dir, config, name=name, display_name=display)
    return name


async def open_notebook(jp_fetch: Any, path: str, kernel: str) -> dict[str, Any]:
    body = {"path": path, "type": "notebook", "name": Path(path).name, "kernel": {"name": kernel}}
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    model: dict[str, Any] = json.loads(response.body)
    return model


async def refused(jp_fetch: Any, path: str, kernel: str) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as caught:
        await open_notebook(jp_fetch, path, kernel)
    return caught.value.code, json.loads(caught.value.response.body)["message"]  # type: ignore[union-attr]


async def test_a_refusal_names_the_notebooks_and_the_kernels_that_fit_now(
    jp_fetch: Any, jp_data_dir: Path, jp_root_dir: Path, vgpu_server: Any
) -> None:
    (jp_root_dir / "analysis").mkdir()  # the notebook's folder (else the server runs it in the root)
    big = spec(jp_data_dir, "vgpu-3-4", {"gpu_fraction": 0.75}, "Python 3 (3/4 GPU)")
    half = spec(jp_data_dir, "vgpu-1-2", {"gpu_fraction": 0.5}, "Python 3 (1/2 GPU)")
    spec(jp_data_dir, "vgpu-2gpus", {"gpu_fraction": 0.25, "gpus": 2}, "Python 3 (2 x 1/4 GPU)")  # one GPU here
    spec(jp_data_dir, "vgpu-slurm", {"gpu_fraction": 0.25, "launcher": "slurm"}, "Python 3 (1/4 GPU, Slurm)")  # not this ledger's to say
    spec(jp_data_dir, "vgpu-broken", {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.125}, "A (1/4, up to 1/8)")  # cannot start
    before = time.time()
    await open_notebook(jp_fetch, "analysis/big.ipynb", big)

    code, message = await refused(jp_fetch, "small.ipynb", half)

    assert code == 503
    lines = message.splitlines()
    assert lines[0] == "No room for 1/2 GPU (8.0 GiB) now: at most 4.0 GiB (about 1/4 GPU) on GPU 0 is free."
    assert lines[1] == f"  GPU 0 (Simulated A100): 4.0 GiB free of 16.0 GiB; reserved by analysis/big.ipynb [{USER}] 12.0 GiB."
    assert lines[2].startswith(f'What you can do: Start "{DISPLAY_NAME}" instead: it fits now. Wait in line:')
    assert len(open_ledger().slices()) == 1  # the refused start holds nothing

    (refusal,) = (await get_json(jp_fetch, "api", "vgpu", "refusals"))["refusals"]
    assert refusal["path"] == "small.ipynb" and refusal["kernel_display_name"] == "Python 3 (1/2 GPU)"
    assert refusal["status"] == 503 and refusal["reason"] == "full" and refusal["t"] > before
    assert refusal["message"] == message and refusal["summary"] == lines[0]
    assert refusal["asked"] == "1/2 GPU" and refusal["fits_now"]["memory"] == 4 * 1024**3
    (gpu,) = refusal["gpus"]
    assert gpu["free"] == 4 * 1024**3 and gpu["total"] == 16 * 1024**3
    assert gpu["holders"] == [{"label": "analysis/big.ipynb", "owner": USER,
                               "reserved": 12 * 1024**3, "yours": True}]  # fmt: skip
    assert refusal["suggested_kernels"] == [{"name": KERNEL, "display_name": DISPLAY_NAME}]
    assert refusal["advice"][0] == f'Start "{DISPLAY_NAME}" instead: it fits now.'

    later = await jp_fetch("api", "vgpu", "refusals", params={"since": str(refusal["t"])})
    assert json.loads(later.body)["refusals"] == []


async def test_a_refusal_on_a_full_gpu_suggests_no_kernel_and_says_how_to_wait(
    jp_fetch: Any, jp_data_dir: Path, vgpu_server: Any
) -> None:
    whole = spec(jp_data_dir, "vgpu-1", {"gpu_fraction": 1}, "Python 3 (1 GPU)")
    await open_notebook(jp_fetch, "first.ipynb", whole)
    code, message = await refused(jp_fetch, "second.ipynb", KERNEL)
    assert code == 503
    assert message.splitlines()[0] == "No room for 1/4 GPU (4.0 GiB) now: every GPU is full."
    assert "Start " not in message and "`jupyter vgpu kernelspec install --wait SECONDS`" in message
    (refusal,) = (await get_json(jp_fetch, "api", "vgpu", "refusals"))["refusals"]
    assert refusal["suggested_kernels"] == [] and refusal["fits_now"]["memory"] is None


async def test_a_refusal_is_kept_while_the_server_runs_no_kernel(jp_fetch: Any, vgpu_server: Any) -> None:
    """The refusal log was looked up through the kernel manager with ``or``, and an empty one is
    falsy: with no kernel running, refusals were filed where nobody reads them (issue 19)."""
    ledger = open_ledger()
    held = ledger.reserve_now(SliceRequest.parse(1), Holder.command("python hog.py", pid=os.getpid()))
    try:
        code, message = await refused(jp_fetch, "lonely.ipynb", KERNEL)
        assert code == 503 and message.startswith("No room for 1/4 GPU")
        (refusal,) = (await get_json(jp_fetch, "api", "vgpu", "refusals"))["refusals"]
        assert refusal["path"] == "lonely.ipynb" and refusal["summary"] == message.splitlines()[0]
    finally:
        ledger.release(held.id)


async def test_a_waiting_notebook_shows_its_place_and_can_cancel(
    jp_fetch: Any, jp_data_dir: Path, vgpu_server: Any
) -> None:
    patient = spec(jp_data_dir, "vgpu-wait", {"gpu_fraction": 1, "wait_timeout": 120}, "Python 3 (1 GPU, waits)")
    await open_notebook(jp_fetch, "holder.ipynb", KERNEL)
    start = asyncio.ensure_future(refused(jp_fetch, "waiter.ipynb", patient))

    async def in_line() -> Any:
        return (await get_json(jp_fetch, "api", "vgpu", "slices"))["waiting"]

    (place,) = await until(in_line, what="the notebook in line")
    assert place["path"] == "waiter.ipynb" and place["kernel_display_name"] == "Python 3 (1 GPU, waits)"
    assert place["yours"] is True and place["position"] == 1 and place["request_text"] == "1 GPU"
    assert place["holder_kind"] == "kernel" and place["kernel_id"]

    response = await jp_fetch("api", "vgpu", "waiting", str(place["ticket"]), method="DELETE")
    assert response.code == 204
    code, message = await asyncio.wait_for(start, 30)
    assert code == 503
    assert message.startswith("Stopped waiting in line for 1 GPU after ")
    assert message.endswith(" s: the place in line was cancelled.")
    assert await in_line() == []
    assert len(open_ledger().slices()) == 1
    refusal = (await get_json(jp_fetch, "api", "vgpu", "refusals"))["refusals"][0]
    assert refusal["reason"] == "cancelled" and refusal["path"] == "waiter.ipynb"

    with pytest.raises(HTTPClientError) as gone:
        await jp_fetch("api", "vgpu", "waiting", str(place["ticket"]), method="DELETE")
    assert gone.value.code == 404


@pytest.mark.parametrize("ticket", ["abc", "1e3", "-1", "9" * 40, "%20", "²", "٣"])
async def test_cancel_takes_exact_ticket_numbers(jp_fetch: Any, vgpu_server: Any, ticket: str) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", "vgpu", "waiting", ticket, method="DELETE")
    assert caught.value.code == 400
    assert "is not a place in line" in json.loads(caught.value.response.body)["message"]  # type: ignore[union-attr]


async def test_another_users_place_in_line_cannot_be_cancelled(jp_fetch: Any, vgpu_server: Any) -> None:
    ledger = open_ledger()
    assert isinstance(ledger, SQLiteLedger)
    ledger.reserve_now(SliceRequest.parse(1), Holder.command("mine", pid=os.getpid()))
    theirs = ledger.acting_for(Actor("mallory", 4242)).enqueue(
        SliceRequest.parse("1/2"), Holder.command("their job", pid=os.getpid())
    )
    await until(lambda: _waiting(jp_fetch), what="their request in the line")
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", "vgpu", "waiting", str(theirs.number), method="DELETE")
    assert caught.value.code == 403
    assert "another user's" in json.loads(caught.value.response.body)["message"]  # type: ignore[union-attr]
    (still,) = ledger.waiting()
    assert still.ticket == theirs.number and (await _waiting(jp_fetch))[0]["yours"] is False


async def _waiting(jp_fetch: Any) -> Any:
    return (await get_json(jp_fetch, "api", "vgpu", "slices"))["waiting"]
