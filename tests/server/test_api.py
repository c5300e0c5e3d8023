"""The REST routes: authentication, authorisation, shapes, and answers for unknown ids."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.server.cluster import ROUTES as CLUSTER_ROUTES
from jupyter_vgpu.server.handlers import INDEX_ROUTE, routes
from jupyter_vgpu.slices import Holder, SliceRequest

from .conftest import DISPLAY_NAME, KERNEL, get_json, until


def every_route() -> list[tuple[str, tuple[str, ...]]]:
    """Each method of each route the extension serves, an id in place of each URL parameter."""
    found = []
    for pattern, handler in [INDEX_ROUTE, *routes(), *CLUSTER_ROUTES]:
        parts = tuple(pattern.replace("([^/]+)", "7").replace("/?", "").strip("/").split("/"))
        found += [(method, parts) for method in ("GET", "POST", "PUT", "PATCH", "DELETE") if method.lower() in vars(handler)]
    return found


ROUTES = every_route()
assert len(ROUTES) == 14  # the index, devices, one sample, slices, a slice (GET, DELETE), keep a slice, a kernel, history, refusals, a refusal, a place in line, the cluster, a node's history


@pytest.mark.parametrize(("method", "parts"), ROUTES)
async def test_every_route_refuses_requests_without_a_token(
    jp_fetch: Any, vgpu_server: Any, method: str, parts: tuple[str, ...]
) -> None:
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(*parts, method=method, headers={"Authorization": ""}, **({"body": "{}"} if method in ("POST", "PUT", "PATCH") else {}))
    assert refused.value.code in (401, 403)


class NoGPUForAnyone(Authorizer):
    """Lets users do everything except touch the ``vgpu`` resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "vgpu"


@pytest.mark.parametrize(("method", "parts"), ROUTES)
async def test_every_route_asks_the_authorizer_for_resource_vgpu(
    jp_fetch: Any, jp_server_config: Any, vgpu_server: Any, method: str, parts: tuple[str, ...]
) -> None:
    vgpu_server.web_app.settings["authorizer"] = NoGPUForAnyone(parent=vgpu_server)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(*parts, method=method, **({"body": "{}"} if method in ("POST", "PUT", "PATCH") else {}))
    assert refused.value.code == 403


async def test_api_vgpu_answers_with_every_endpoint_under_the_base_url(jp_fetch: Any, jp_base_url: str, vgpu_server: Any) -> None:
    """README's diagram names /api/vgpu, which answered 404 (issue 33)."""
    for path in (("api", "vgpu"), ("api", "vgpu/")):
        index = await get_json(jp_fetch, *path)
        listed = {(e["method"], e["path"]) for e in index["endpoints"]}
        served = set()
        for method, parts in ROUTES[1:]:
            template = "/".join(parts)
            served.add((method, template))
        shown = {(m, re.sub(r"<[a-z_]+>", "7", p.removeprefix(jp_base_url))) for m, p in listed}
        assert shown == served, (shown, served)
        assert all(p.startswith(jp_base_url + "api/vgpu/") for _, p in listed)
        assert all(e["answers"] for e in index["endpoints"])


async def test_devices_describe_the_simulated_gpu(jp_fetch: Any, vgpu_server: Any) -> None:
    data = await get_json(jp_fetch, "api", "vgpu", "devices")
    assert data["simulated"] is True and data["available"] is True
    (gpu,) = data["devices"]
    assert gpu["name"] == "Simulated A100"
    assert gpu["memory_total"] == 16 * 1024**3
    assert gpu["memory_reserved"] == 0 and gpu["memory_free"] == gpu["memory_total"]
    assert gpu["tier"] == "cooperative" and gpu["watched"] is True


async def test_a_kernel_started_through_the_server_appears_with_its_slice(jp_fetch: Any, start_kernel: Any) -> None:
    kernel = await start_kernel(path="work/train.ipynb")

    async def listed() -> Any:
        data = await get_json(jp_fetch, "api", "vgpu", "slices")
        entry = next((s for s in data["slices"] if s["kernel_id"] == kernel.id), None)
        # The view is the monitor's latest sample (every monitor_interval): one taken between the
        # reservation and the kernel's start still names the server as the holder's process.
        return entry if entry is not None and entry["pid"] == kernel.pid else None

    entry = await until(listed, what="the kernel's slice, held by the kernel's process, in /api/vgpu/slices")
    assert entry["holder_kind"] == "kernel"
    assert entry["kernel_name"] == KERNEL and entry["kernel_display_name"] == DISPLAY_NAME
    assert entry["path"] == "work/train.ipynb"
    assert entry["fraction"] == 0.25 and entry["request_text"] == "1/4 GPU"
    assert entry["memory_reserved"] == 4 * 1024**3
    assert entry["memory_limit"] == entry["memory_reserved"] - entry["context_allowance"]
    assert entry["pid"] == kernel.pid
    assert (entry["tier"], entry["watched"]) == ("cooperative", True)
    assert entry["share_note"] == "memory only; compute is shared with the GPU's other users"

    one = await get_json(jp_fetch, "api", "vgpu", "kernels", kernel.id)
    assert one["kernel_id"] == kernel.id and one["slice"]["id"] == entry["id"]
    devices = await get_json(jp_fetch, "api", "vgpu", "devices")
    assert devices["devices"][0]["slices"] == [entry["id"]]
    assert devices["devices"][0]["memory_reserved"] == 4 * 1024**3


async def test_one_sample_answers_the_sidebar_the_status_bar_and_the_dashboard_at_once(
    jp_fetch: Any, start_kernel: Any
) -> None:
    """``GET /api/vgpu/sample``: one request per tick of the browser's poll, from one sample."""
    kernel = await start_kernel(path="work/train.ipynb")
    await until(lambda: _kernel_slice(jp_fetch, kernel.id), what="the kernel's slice")

    params = {"since": "", "devices": "", "history": "", "host": kernel.id}
    both = json.loads((await jp_fetch("api", "vgpu", "sample", params=params)).body)

    assert set(both) == {"slices", "devices", "history", "kernelspecs"}
    (mine,) = [s for s in both["slices"]["slices"] if s["kernel_id"] == kernel.id]
    assert mine["path"] == "work/train.ipynb" and mine["history"]  # all the points: no since
    assert mine["host"]["memory_rss"] > 0 and mine["host"]["memory_total"] >= mine["host"]["memory_rss"]
    assert both["devices"]["devices"][0]["slices"] == [mine["id"]]
    assert [s["id"] for s in both["history"]["slices"]] == [mine["id"]]
    taken_at = {both[part]["taken_at"] for part in ("slices", "devices", "history")}
    assert len(taken_at) == 1  # one moment for every view
    # Each part keeps its own since; a part not asked for is not sent, nor a host not named.
    since = mine["history"][-1]["t"]
    later = json.loads((await jp_fetch("api", "vgpu", "sample", params={"since": str(since)})).body)
    assert set(later) == {"slices", "kernelspecs"}  # the kernelspecs' word is always there
    (again,) = [s for s in later["slices"]["slices"] if s["kernel_id"] == kernel.id]
    assert "host" not in again and all(p["t"] > since for p in again["history"])
    with pytest.raises(HTTPClientError) as bad:
        await jp_fetch("api", "vgpu", "sample", params={"history": "yesterday"})
    assert bad.value.code == 400
    assert "history must be a time" in json.loads(bad.value.response.body)["message"]  # type: ignore[union-attr]


async def test_a_kernel_without_a_slice_answers_with_slice_null(jp_fetch: Any, start_kernel: Any) -> None:
    kernel = await start_kernel(name="python3")
    data = await get_json(jp_fetch, "api", "vgpu", "kernels", kernel.id)
    assert data["kernel_id"] == kernel.id and data["slice"] is None
    assert data["host"]["memory_rss"] > 0  # its host CPU and RAM are still known


async def test_an_unknown_kernel_is_404_with_a_message(jp_fetch: Any, vgpu_server: Any) -> None:
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("api", "vgpu", "kernels", "no-such-kernel")
    assert missing.value.code == 404
    assert "no-such-kernel" in json.loads(missing.value.response.body)["message"]


async def test_the_host_use_of_another_servers_kernel_is_null(jp_fetch: Any, vgpu_server: Any) -> None:
    """A kernel slice this server does not run (another server's, or a kernel just shut down):
    its host use is unknown here, not a failure of the whole poll."""
    holder = subprocess.Popen(["sleep", "60"])
    kernel_id = "00000000-0000-0000-0000-00000000beef"
    try:
        ledger = open_ledger()
        ledger.reserve(SliceRequest.parse(fraction=0.25), Holder("kernel", kernel_id, pid=holder.pid))
        await until(lambda: _slice_ids(jp_fetch), what="the other server's kernel's slice")
        reply = json.loads((await jp_fetch("api", "vgpu", "sample", params={"host": kernel_id})).body)
        (theirs,) = [s for s in reply["slices"]["slices"] if s["kernel_id"] == kernel_id]
        assert theirs["host"] is None and theirs["running_here"] is False
        assert (await get_json(jp_fetch, "api", "vgpu", "kernels", kernel_id))["host"] is None
        ledger.close()
    finally:
        holder.kill()
        holder.wait()


async def test_an_unknown_slice_is_404_with_a_message(jp_fetch: Any, vgpu_server: Any) -> None:
    for method in ("GET", "DELETE"):
        with pytest.raises(HTTPClientError) as missing:
            await jp_fetch("api", "vgpu", "slices", "0123456789ab", method=method)
        assert missing.value.code == 404
        assert "0123456789ab" in json.loads(missing.value.response.body)["message"]


async def test_delete_releases_a_command_slice(jp_fetch: Any, vgpu_server: Any) -> None:
    command = subprocess.Popen(["sleep", "60"])
    try:
        ledger = open_ledger()
        held = ledger.reserve(SliceRequest.parse(fraction=0.5), Holder("command", "python eval.py", pid=command.pid))
        listed = await until(lambda: _slice_ids(jp_fetch), what="the command's slice to be listed")
        assert held.id in listed
        response = await jp_fetch("api", "vgpu", "slices", held.id, method="DELETE")
        assert response.code == 204
        assert held.id not in await _slice_ids(jp_fetch)
        assert ledger.slices() == []
        ledger.close()
    finally:
        command.kill()
        command.wait()


async def test_delete_refuses_a_kernel_slice(jp_fetch: Any, start_kernel: Any) -> None:
    kernel = await start_kernel()
    entry = await until(lambda: _kernel_slice(jp_fetch, kernel.id), what="the kernel's slice")
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("api", "vgpu", "slices", entry["id"], method="DELETE")
    assert refused.value.code == 409
    assert "shut the kernel down" in json.loads(refused.value.response.body)["message"]
    assert kernel.alive


async def _slice_ids(jp_fetch: Any) -> list[str]:
    data = await get_json(jp_fetch, "api", "vgpu", "slices")
    return [s["id"] for s in data["slices"]]


async def _kernel_slice(jp_fetch: Any, kernel_id: str) -> Any:
    return (await get_json(jp_fetch, "api", "vgpu", "kernels", kernel_id))["slice"]


@pytest.fixture
def corrupt_ledger(vgpu_env: dict[str, str]) -> str:
    path = Path(vgpu_env["JUPYTER_VGPU_LEDGER"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    return str(path)


async def test_an_unusable_ledger_is_explained_not_a_crash(
    corrupt_ledger: str, jp_fetch: Any, vgpu_server: Any
) -> None:
    for route in ("devices", "slices"):
        data = await get_json(jp_fetch, "api", "vgpu", route)
        assert data["available"] is False
        assert corrupt_ledger in data["message"] and "corrupt" in data["message"]
    status = await get_json(jp_fetch, "api", "status")  # the server itself works
    assert "started" in status
