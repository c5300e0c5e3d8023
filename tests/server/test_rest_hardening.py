"""A hostile kernelspec or REST caller against a real server: one sentence back, nothing taken."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_process import write_sliced_kernelspec
from tornado.httpclient import HTTPClientError

from jupyter_vgpu.ledger import open_ledger


def write_spec(jp_data_dir: Path, name: str, config: Any) -> str:
    write_sliced_kernelspec(jp_data_dir, config, name=name, display_name=f"Python 3 ({name})")
    return name


async def refused_start(jp_fetch: Any, name: str) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": name}))
    body = json.loads(caught.value.response.body)  # type: ignore[union-attr]
    return caught.value.code, body["message"]


BAD_CONFIGS = {
    "typo": ({"gpu_fracton": 0.25}, "kernel_provisioner config key 'gpu_fracton' is not allowed; use gpu_fraction, gpu_memory"),
    "digits": ({"gpu_memory": "9" * 400}, "gpu_memory '9999999999999999999...9999999999999999999' (400 characters) is not a size"),
    "no_gpu": ({"no_gpu": "explode"}, "no_gpu 'explode' is not allowed; use one of: cpu, fail."),
    "placement": ({"placement": 5}, "placement 5 is not allowed; use one of: binpack, spread."),
    "string": ("1/4", "kernel_provisioner config must be a mapping of settings such as {\"gpu_fraction\": 0.25}, not '1/4'."),
    "list": ([0.25], "kernel_provisioner config must be a mapping"),
    "gpus": ({"gpus": 10**400}, "gpus 10000000000000000000...00000000000000000000 (401 characters) is not allowed"),
    "wait": ({"wait_timeout": "forever"}, "wait_timeout 'forever' is not allowed; use a number of seconds from 0 to 31622400 (366 days)."),
    # a percent sign once, as written (tornado's HTTPError.log_message doubles it for its own logging)
    "percent": ({"gpu_fraction": "125%"}, "gpu_fraction '125%' is outside (0, 1]; use a share of a GPU in (0, 1], written 0.25, 1/4 or 25%."),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
async def test_a_bad_kernelspec_config_is_one_sentence_and_reserves_nothing(
    case: str, jp_fetch: Any, jp_data_dir: Path, vgpu_server: Any
) -> None:
    config, words = BAD_CONFIGS[case]
    code, message = await refused_start(jp_fetch, write_spec(jp_data_dir, f"bad-{case}", config))
    assert code == 400, message
    assert words in message
    assert "Traceback" not in message and "Unhandled error" not in message
    assert open_ledger().slices() == []


async def test_a_kernelspec_cannot_name_another_kernels_slice(
    jp_fetch: Any, jp_data_dir: Path, start_kernel: Any
) -> None:
    victim = await start_kernel()
    (held,) = open_ledger().slices()
    code, message = await refused_start(jp_fetch, write_spec(jp_data_dir, "thief", {"slice_id": held.id}))
    assert code == 400 and "kernel_provisioner config key 'slice_id' is not allowed" in message
    (still,) = open_ledger().slices()
    assert still.id == held.id and still.holder == victim.id


@pytest.mark.parametrize("slice_id", ["%25%2593e2", "%25%25%25%25%25%25", "______", "%25"])
async def test_delete_matches_slice_ids_exactly(jp_fetch: Any, vgpu_server: Any, slice_id: str) -> None:
    import subprocess

    holder = subprocess.Popen(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/4", "--", "sleep", "60"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stderr is not None and "slice" in holder.stderr.readline()
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("api", "vgpu", "slices", slice_id, method="DELETE")
        assert caught.value.code == 404
        assert len(open_ledger().slices()) == 1
    finally:
        holder.terminate()
        holder.wait()


@pytest.mark.parametrize("since", ["abc", "1e999", "-inf", "nan", "9" * 400])
async def test_a_bad_since_is_a_400_or_ignored_never_a_500(jp_fetch: Any, vgpu_server: Any, since: str) -> None:
    try:
        response = await jp_fetch("api", "vgpu", "slices", params={"since": since})
        assert "slices" in json.loads(response.body)
    except HTTPClientError as error:
        assert error.code == 400, error


@pytest.mark.parametrize(
    ("path", "name", "shown"),
    [
        ("a/../b//c.ipynb", "a/../b//c.ipynb", "b/c.ipynb"),  # normalised as jupyter_server opens it
        ("/top.ipynb", "top.ipynb", "top.ipynb"),  # an API path's leading / is the root
        ("x/y.ipynb", "/etc/passwd", "x/y.ipynb"),  # a name outside the root is not the notebook's path
    ],
)
async def test_a_notebook_path_a_client_sends_is_shown_normalised_and_inside_the_root(
    jp_fetch: Any, jp_data_dir: Path, vgpu_server: Any, path: str, name: str, shown: str
) -> None:
    from .conftest import get_json, until

    spec = write_spec(jp_data_dir, "paths", {"gpu_fraction": 0.25})
    body = {"path": path, "name": name, "type": "notebook", "kernel": {"name": spec}}
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))).body)
    kernel_id = session["kernel"]["id"]
    try:

        async def row() -> Any:
            slices = (await get_json(jp_fetch, "api", "vgpu", "slices"))["slices"]
            return next((s for s in slices if s["kernel_id"] == kernel_id), None)

        seen = await until(row, what="the kernel's slice in the view")
        assert seen["path"] == shown
        assert seen["labels"].get("path") in (shown, None), seen["labels"]  # what the ledger keeps, for other views
        assert (await get_json(jp_fetch, "api", "vgpu", "kernels", kernel_id))["slice"]["path"] == shown
    finally:
        await jp_fetch("api", "sessions", session["id"], method="DELETE")
