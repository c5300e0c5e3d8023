"""``%vgpu monitor`` on ipykernel 7: widget updates come from the kernel's event loop, and stop."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_vgpu.slices import Slice

from .harness import Kernel, Outcome, Workspace, module_kernel


@pytest.fixture(scope="module")
def sliced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Slice, Kernel]]:
    yield from module_kernel(tmp_path_factory, "monitor", fraction=0.25)


@pytest.fixture
def kernel(sliced: tuple[Workspace, Slice, Kernel]) -> Iterator[Kernel]:
    workspace, _, kernel = sliced
    workspace.set_usage([{"gpu": 0, "pid": kernel.pid, "memory": "1GiB", "utilization": 30}])
    yield kernel
    kernel.run("%vgpu monitor stop")


def models(outcome: Outcome) -> dict[str, str]:
    """comm id -> widget model name, from the comm_open messages of the monitor cell."""
    return {
        m["content"]["comm_id"]: m["content"]["data"]["state"]["_model_name"]
        for m in outcome.messages
        if m["msg_type"] == "comm_open"
    }


def updates(messages: list[dict[str, Any]], comms: dict[str, str], model: str) -> list[dict[str, Any]]:
    """The state changes sent to widgets of one model (e.g. ``HTMLModel``)."""
    return [
        m["content"]["data"]["state"]
        for m in messages
        if m["msg_type"] == "comm_msg"
        and m["content"]["data"].get("method") == "update"
        and comms.get(m["content"]["comm_id"]) == model
    ]


def html_values(messages: list[dict[str, Any]], comms: dict[str, str]) -> list[str]:
    """Every value sent to the view's HTML widgets (its header and its chart), in order."""
    return [u["value"] for u in updates(messages, comms, "HTMLModel") if "value" in u]


def charts(messages: list[dict[str, Any]], comms: dict[str, str]) -> list[str]:
    return [value for value in html_values(messages, comms) if "<svg" in value]


def test_monitor_shows_a_widget_and_updates_it_while_the_kernel_is_idle(
    sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel
) -> None:
    workspace, _, _ = sliced
    started = kernel.run("%vgpu monitor --interval 0.25")
    assert started.ok, started.stderr
    [bundle] = started.displays
    assert "application/vnd.jupyter.widget-view+json" in bundle
    comms = models(started)
    assert {"HTMLModel", "ButtonModel"} <= set(comms.values())

    workspace.set_usage([{"gpu": 0, "pid": kernel.pid, "memory": "2GiB", "utilization": 70}])
    later = kernel.listen(2.5)
    lines = [re.search(r"GPU 0 memory [^<]*", chart) for chart in charts(later, comms)]
    assert any(re.fullmatch(r"GPU 0 memory 2\.0 GiB of 4\.0 GiB reserved · peak \d\.0 GiB · util 70%", m.group()) for m in lines if m)
    assert any("updated" in value for value in html_values(later, comms))
    # every update belongs to the monitor cell: driven from the loop, not a thread
    assert {m["parent_header"].get("msg_id") for m in later if m["msg_type"] == "comm_msg"} == {
        started.reply["parent_header"]["msg_id"]
    }


def test_monitor_charts_the_history_with_the_reservation_and_utilisation(
    sliced: tuple[Workspace, Slice, Kernel], kernel: Kernel
) -> None:
    workspace, _, _ = sliced
    started = kernel.run("%vgpu monitor --interval 0.25")
    comms = models(started)
    kernel.listen(1.0)
    workspace.set_usage([{"gpu": 0, "pid": kernel.pid, "memory": "3GiB", "utilization": 90}])
    chart = charts(kernel.listen(2.0), comms)[-1]
    used = re.search(r'<polyline class="used" points="([^"]+)"', chart)
    assert used, chart
    heights = {point.split(",")[1] for point in used.group(1).split()}
    assert len(used.group(1).split()) > 1 and len(heights) > 1  # 1 GiB, then 3 GiB
    assert re.search(r'<line class="reserved" [^>]*stroke-dasharray', chart)
    assert ">reserved 4.0 GiB</text>" in chart
    assert '<polyline class="util"' in chart and ">util 100%</text>" in chart
    assert ">now</text>" in chart and ">\u221210 min</text>" in chart
    assert "GPU 0 memory 3.0 GiB of 4.0 GiB reserved" in chart and "white-space:normal" in chart


def test_monitor_stop_ends_every_update(kernel: Kernel) -> None:
    started = kernel.run("%vgpu monitor --interval 0.25")
    comms = models(started)
    assert updates(kernel.listen(1.5), comms, "HTMLModel")
    stopped = kernel.run("%vgpu monitor stop")
    assert stopped.stdout.strip() == "Stopped 1 live view."
    assert any("stopped by %vgpu monitor stop" in u.get("value", "") for u in updates(stopped.messages, comms, "HTMLModel"))
    assert [m for m in kernel.listen(1.5) if m["msg_type"] == "comm_msg"] == []
    assert kernel.run("%vgpu monitor stop").stdout.strip() == "No live view is running."


def test_monitor_stops_by_itself_after_its_minutes(kernel: Kernel) -> None:
    started = kernel.run("%vgpu monitor --interval 0.2 --minutes 0.02")
    comms = models(started)
    headers = [u["value"] for u in updates(kernel.listen(3), comms, "HTMLModel") if "value" in u]
    assert "stopped after 0.02 minutes" in headers[-1]
    assert [m for m in kernel.listen(1) if m["msg_type"] == "comm_msg"] == []


def test_stop_button_stops_the_monitor(kernel: Kernel) -> None:
    started = kernel.run("%vgpu monitor --interval 0.25")
    comms = models(started)
    [button] = [comm for comm, model in comms.items() if model == "ButtonModel"]
    kernel.listen(0.6)
    kernel.send_comm(button, {"method": "custom", "content": {"event": "click"}})
    after_click = kernel.listen(1.0)
    assert any("stopped" in u.get("value", "") for u in updates(after_click, comms, "HTMLModel"))
    assert {"disabled": True} in [{k: v for k, v in u.items() if k == "disabled"} for u in updates(after_click, comms, "ButtonModel")]
    assert [m for m in kernel.listen(1.0) if m["msg_type"] == "comm_msg"] == []


def test_monitor_on_simulated_gpus_says_so_and_can_be_found_by_the_lab(kernel: Kernel) -> None:
    started = kernel.run("%vgpu monitor --interval 0.25")
    states = {
        m["content"]["data"]["state"]["_model_name"]: m["content"]["data"]["state"]
        for m in started.messages
        if m["msg_type"] == "comm_open"
    }
    # JupyterLab's extension finds the view, its header and its Stop button by these classes
    # (after a kernel restart it says so there: tests/ui/test_second_hour.py).
    assert "jp-vgpu-Monitor" in states["VBoxModel"]["_dom_classes"]
    assert "jp-vgpu-Monitor-stop" in states["ButtonModel"]["_dom_classes"]
    messages = started.messages + kernel.listen(1.0)
    headers = [v for v in html_values(messages, models(started)) if "GPU monitor" in v]
    assert headers, [m["content"] for m in messages if m["msg_type"].startswith("comm")]
    assert re.search(r'GPU monitor · <span class="jp-vgpu-Monitor-badge"[^>]*>simulated</span> · ', headers[-1])
    assert '<span class="jp-vgpu-Monitor-when">updated ' in headers[-1]
    stopped = kernel.run("%vgpu monitor stop")
    assert any(
        "jp-vgpu-mod-stopped" in u.get("_dom_classes", ()) for u in updates(stopped.messages, models(started), "VBoxModel")
    )
