"""A real kernel that uses more than its slice (simulated usage) gets the admin's action."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_vgpu.ledger import open_ledger
from jupyter_vgpu.slices.reports import read_notices

from .conftest import INTERVAL, GiB, get_json, until, usage

OVER = "8GiB"  # twice the kernel's quarter of the 16 GiB GPU


async def kernel_slice(jp_fetch: Any, kernel_id: str) -> Any:
    return (await get_json(jp_fetch, "api", "vgpu", "kernels", kernel_id))["slice"]


async def events_of(jp_fetch: Any, slice_id: str) -> list[dict[str, Any]]:
    data = await get_json(jp_fetch, "api", "vgpu", "slices")
    return [e for e in data["watchdog"]["events"] if e["slice_id"] == slice_id]


async def settled(jp_fetch: Any, kernel: Any) -> dict[str, Any]:
    """The kernel's slice once the monitor has seen it."""
    view: dict[str, Any] = await until(lambda: kernel_slice(jp_fetch, kernel.id), what="the kernel's slice")
    return view


@pytest.mark.parametrize("vgpu_action", ["warn"])
async def test_warn_logs_and_shows_an_event_and_leaves_the_kernel_alone(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel(path="train.ipynb")
    pid = kernel.pid
    slice_id = (await settled(jp_fetch, kernel))["id"]
    simulation_file(processes=[usage(pid, OVER)])
    view = await until(lambda: _with_events(jp_fetch, kernel.id), what="a watchdog event on the kernel's slice")
    (event,) = view["watchdog"]["events"]
    assert event["action"] == "warn" and event["ok"] is True
    assert event["message"].startswith(
        f"train.ipynb uses 8.0 GiB of GPU memory (simulated), more than the 4.0 GiB its slice {slice_id} reserves, for "
    )
    assert event["message"].endswith(": warned (the admin's over-limit policy only warns; the slice's memory is not enforced).")
    assert (event["path"], event["memory_used"], event["memory_reserved"]) == ("train.ipynb", 8 * GiB, 4 * GiB)
    assert view["state"] == "over"
    (notice,) = read_notices(open_ledger().path, slice_id)  # what the kernel prints into its running cell
    assert (notice["action"], notice["stage"], notice["message"]) == ("warn", "done", event["message"])
    await asyncio.sleep(5 * INTERVAL)
    assert kernel.alive and kernel.pid == pid
    assert len((await kernel_slice(jp_fetch, kernel.id))["watchdog"]["events"]) == 1  # once per episode
    reply, printed = await kernel.run("print(6 * 7)")
    assert reply["status"] == "ok" and printed.strip() == "42"


@pytest.mark.parametrize("vgpu_action", ["interrupt"])
async def test_interrupt_ends_the_running_cell(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    pid = kernel.pid
    slice_id = (await settled(jp_fetch, kernel))["id"]
    client = (await kernel.driver()).client
    msg_id = client.execute("import time; time.sleep(120)")
    await until(lambda: _busy(client), what="the cell to start")
    simulation_file(processes=[usage(pid, OVER)])
    reply = await _reply(client, msg_id, timeout=30)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    (event,) = await events_of(jp_fetch, slice_id)
    assert event["action"] == "interrupt" and event["ok"] is True and "interrupted" in event["message"]
    assert kernel.alive and kernel.pid == pid
    ahead, done = read_notices(open_ledger().path, slice_id)  # said before it happened, and after
    assert (ahead["stage"], done["stage"]) == ("ahead", "done") and ahead["t"] + 1.5 < done["t"]
    assert ahead["message"].endswith(": the server interrupts it in 2 s (the admin's over-limit policy).")


@pytest.mark.parametrize("vgpu_action", ["restart"])
async def test_restart_gives_a_new_process_and_keeps_the_slice(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel()
    old_pid = kernel.pid
    slice_id = (await settled(jp_fetch, kernel))["id"]
    await kernel.run("x = 1")
    simulation_file(processes=[usage(old_pid, OVER)])

    async def restarted() -> bool:
        return kernel.alive and kernel.manager.provisioner.pid not in (None, old_pid)

    await until(restarted, what="the kernel to restart")
    simulation_file(processes=[])  # the old process has ended, so NVML no longer lists it
    kernel.close()
    view = await until(
        lambda: _held_by(jp_fetch, kernel.id, kernel.pid), what="the slice to follow the new kernel process"
    )
    assert view["id"] == slice_id  # and its state is "ok": the new process uses nothing
    assert [e["action"] for e in view["watchdog"]["events"]] == ["restart"]
    reply, _ = await kernel.run("print(x)")
    assert reply["status"] == "error" and reply["ename"] == "NameError"  # a fresh kernel


@pytest.mark.parametrize("vgpu_action", ["shutdown"])
async def test_shutdown_removes_the_kernel_and_frees_its_slice(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel()
    slice_id = (await settled(jp_fetch, kernel))["id"]
    simulation_file(processes=[usage(kernel.pid, OVER)])

    async def gone() -> bool:
        data = await get_json(jp_fetch, "api", "vgpu", "slices")
        return not kernel.alive and all(s["id"] != slice_id for s in data["slices"])

    await until(gone, what="the kernel and its slice to go")
    (event,) = await events_of(jp_fetch, slice_id)
    assert event["action"] == "shutdown" and event["kernel_id"] == kernel.id and "shut down" in event["message"]
    ledger = open_ledger()
    assert ledger.slices() == []
    ledger.close()
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("api", "vgpu", "kernels", kernel.id)
    assert missing.value.code == 404


@pytest.mark.parametrize(("vgpu_action", "vgpu_grace"), [("shutdown", 60.0)])
async def test_nothing_happens_within_the_grace_period(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    slice_id = (await settled(jp_fetch, kernel))["id"]
    simulation_file(processes=[usage(kernel.pid, OVER)])
    await until(lambda: _state(jp_fetch, kernel.id, "over"), what="state 'over'")
    await asyncio.sleep(5 * INTERVAL)
    assert kernel.alive
    assert await events_of(jp_fetch, slice_id) == []


@pytest.mark.parametrize("vgpu_action", ["shutdown"])
async def test_a_small_overshoot_within_the_tolerance_is_allowed(
    jp_fetch: Any, start_kernel: Any, simulation_file: Any
) -> None:
    kernel = await start_kernel()
    slice_id = (await settled(jp_fetch, kernel))["id"]
    simulation_file(processes=[usage(kernel.pid, "4200MiB")])  # 2.5% over 4 GiB; tolerance is 5%
    await until(lambda: _state(jp_fetch, kernel.id, "over"), what="state 'over'")
    await asyncio.sleep(5 * INTERVAL)
    assert kernel.alive
    assert await events_of(jp_fetch, slice_id) == []


@pytest.mark.parametrize("vgpu_action", ["none"])
async def test_action_none_only_shows_the_state(jp_fetch: Any, start_kernel: Any, simulation_file: Any) -> None:
    kernel = await start_kernel()
    await settled(jp_fetch, kernel)
    simulation_file(processes=[usage(kernel.pid, OVER)])
    view = await until(lambda: _state(jp_fetch, kernel.id, "over"), what="state 'over'")
    assert view["tier"] == "cooperative"
    await asyncio.sleep(3 * INTERVAL)
    assert kernel.alive and (await kernel_slice(jp_fetch, kernel.id))["watchdog"]["events"] == []


async def _with_events(jp_fetch: Any, kernel_id: str) -> Any:
    view = await kernel_slice(jp_fetch, kernel_id)
    return view if view and view["watchdog"]["events"] else None


async def _state(jp_fetch: Any, kernel_id: str, state: str) -> Any:
    view = await kernel_slice(jp_fetch, kernel_id)
    return view if view and view["state"] == state else None


async def _held_by(jp_fetch: Any, kernel_id: str, pid: int) -> Any:
    view = await kernel_slice(jp_fetch, kernel_id)
    return view if view and view["pid"] == pid and view["state"] == "ok" else None


async def _busy(client: Any) -> bool:
    while True:
        try:
            msg = await asyncio.to_thread(client.get_iopub_msg, timeout=0.1)
        except Exception:
            return False
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "busy":
            return True


async def _reply(client: Any, msg_id: str, timeout: float) -> dict[str, Any]:
    while True:
        msg: dict[str, Any] = await asyncio.to_thread(client.get_shell_msg, timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg
