"""The node broker serving the node's Prometheus page (``--metrics-port``): the exporter's page, from
the broker's own ledger, so a hub node needs no second process. Two real users hold slices through a
real broker; the page is scraped over HTTP and read with prometheus_client's own parser."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from jupyter_vgpu.gpus import Inventory

from .conftest import JUPYTER_VGPU, BrokerProcess, User, Users, wait_until

pytestmark = pytest.mark.hub

SIMULATE = "2x16GiB@hub-node"
GiB = 1024**3


def page_url(broker: BrokerProcess, timeout: float = 30) -> str:
    """The URL the broker says on stderr (its log here) for its page."""
    found: list[str] = []

    def said() -> bool:
        found.extend(re.findall(r"jupyter-vgpu broker: the GPUs and slices of hub-node at (http://\S+)", broker.log.read_text()))
        return bool(found)

    try:
        wait_until(said, timeout, what="the broker's page URL in its log")
    except AssertionError as error:
        raise AssertionError(f"{error}:\n{broker.log.read_text()}") from None
    return found[0]


def scrape(url: str) -> dict[str, list[Sample]]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def hold(user: User, broker: BrokerProcess) -> subprocess.Popen[str]:
    """``user`` holds 1/4 GPU through the broker with ``jupyter vgpu run ... -- cat``, until its stdin closes."""
    command = user.command(JUPYTER_VGPU, "run", "-q", "-p", "1/4", "--", "cat")
    env = user.env(JUPYTER_VGPU_BROKER=str(broker.socket))
    return subprocess.Popen(command, env=env, cwd="/", text=True, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize(
    "broker", [{"simulate": SIMULATE, "extra": ["--metrics-port", "0", "--metrics-interval", "0.1"]}], indirect=True, ids=["page"]
)
def test_the_broker_serves_every_users_slices_until_they_end(system_users: Users, broker: BrokerProcess) -> None:
    alice, bob = system_users.alice, system_users.bob
    url = page_url(broker)
    holders = {alice.name: hold(alice, broker), bob.name: hold(bob, broker)}
    try:
        page: dict[str, list[Sample]] = {}

        def both_seen() -> bool:
            page.update(scrape(url))
            return len(page["jupyter_vgpu_slice_info"]) == 2

        wait_until(both_seen, 30, what="both users' slices on the broker's page")
        slices = {s.labels["user"]: s.labels for s in page["jupyter_vgpu_slice_info"]}
        for user in (alice.name, bob.name):
            assert slices[user] == {
                "slice": slices[user]["slice"], "hostname": "hub-node", "user": user, "kernel_id": "",
                "holder": "cat", "launcher": "local", "tier": "cooperative",
            }  # fmt: skip
        uuids = [gpu.uuid for gpu in Inventory(SIMULATE).snapshot().gpus]
        assert sorted((s.labels["gpu"], s.labels["UUID"], s.labels["hostname"], s.value) for s in page["jupyter_vgpu_gpu_info"]) == [
            ("0", uuids[0], "hub-node", 1), ("1", uuids[1], "hub-node", 1),
        ]  # fmt: skip
        requests = {s.labels["slice"]: s.value for s in page["jupyter_vgpu_slice_gpu_request_bytes"]}
        assert requests == {slices[alice.name]["slice"]: 4 * GiB, slices[bob.name]["slice"]: 4 * GiB}
        assert [s.value for s in page["jupyter_vgpu_node_up"]] == [1]

        gone = holders.pop(alice.name)
        assert gone.stdin is not None
        gone.stdin.close()  # cat ends, `run` gives its slice back
        assert gone.wait(timeout=30) == 0, gone.stderr.read() if gone.stderr else ""

        def only_bobs() -> bool:
            page.update(scrape(url))
            return [s.labels["user"] for s in page["jupyter_vgpu_slice_info"]] == [bob.name]

        wait_until(only_bobs, 30, what="alice's slice gone from the broker's page, bob's still there")
    finally:
        for holder in holders.values():
            holder.kill()
            holder.wait()
    assert broker.process is not None
    broker.process.terminate()
    assert broker.process.wait(timeout=30) == 0, broker.log.read_text()  # its page and sampler stop with it
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
    assert "Traceback" not in broker.log.read_text()


def test_a_bad_metrics_port_is_one_sentence() -> None:
    result = subprocess.run([JUPYTER_VGPU, "broker", "--metrics-port", "http"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "jupyter vgpu broker: error: argument --metrics-port: --metrics-port 'http' is not a port number from 0 to 65535 (0: any free port)"
    )


def test_the_pages_other_options_without_its_port_are_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_vgpu.cli import main

    assert main(["broker", "--metrics-interval", "2", "--metrics-hostname", "hub-node"]) == 2
    assert capsys.readouterr().err == (
        "jupyter vgpu: The broker serves no Prometheus page without --metrics-port, so --metrics-hostname and "
        "--metrics-interval would do nothing: give --metrics-port too (0: any free port).\n"
    )


def test_a_taken_metrics_port_starts_nothing(tmp_path: Path) -> None:
    folder = tmp_path
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU")}
    env["JUPYTER_VGPU_SIMULATE"] = SIMULATE
    argv = [JUPYTER_VGPU, "broker", "--socket", str(folder / "broker.sock"), "--ledger", str(folder / "ledger.sqlite")]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*argv, "--metrics-port", str(port)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"jupyter vgpu: The broker's metrics page cannot listen on port {port} on 127.0.0.1: another program uses it; "
        "give another --metrics-port (0: any free port).\n"
    )
    assert not (folder / "broker.sock").exists()  # nobody was ever told to come


def test_the_job_mapping_without_the_page_is_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_vgpu.cli import main

    assert main(["broker", "--metrics-dcgm-job-mapping-dir", "/run/dcgm-job-map"]) == 2
    assert capsys.readouterr().err == (
        "jupyter vgpu: The broker serves no Prometheus page without --metrics-port, so --metrics-dcgm-job-mapping-dir "
        "would do nothing: give --metrics-port too (0: any free port).\n"
    )
