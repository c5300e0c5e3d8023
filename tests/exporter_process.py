"""`jupyter vgpu exporter` processes for tests: one per simulated node, each with its own ledger,
and the URL each says it listens on (tests/test_exporter.py, the cluster tests)."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

JUPYTER_VGPU = [str(Path(sys.executable).parent / "jupyter-vgpu")]


@dataclass
class Node:
    hostname: str
    env: dict[str, str]
    process: subprocess.Popen[str]
    url: str = ""
    #: What it said on stderr so far (read on a thread once :func:`listening` ran).
    said: list[str] = field(default_factory=list)

    def wait_said(self, words: str, timeout: float = 30) -> str:
        """Its stderr once it has said ``words``."""
        deadline = time.monotonic() + timeout
        while words not in (text := "".join(self.said)):
            assert time.monotonic() < deadline, f"the exporter did not say {words!r} in {timeout} s: {text}"
            time.sleep(0.05)
        return text

    @property
    def address(self) -> str:
        """``host:port``, as a Prometheus target."""
        return self.url.removeprefix("http://").removesuffix("/metrics")

    def stop(self) -> int:
        """SIGTERM; its exit code (0: it ended cleanly)."""
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout=30)


def node_env(folder: Path, simulate: str, **extra: str) -> dict[str, str]:
    """A node's environment: its simulated GPUs and a ledger of its own, no broker."""
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_VGPU_BROKER", "JUPYTER_VGPU_CONTEXT_ALLOWANCE")}
    return {**env, "JUPYTER_VGPU_SIMULATE": simulate, "JUPYTER_VGPU_LEDGER": str(folder / "vgpu" / "ledger.sqlite"), **extra}


def start_exporter(
    folder: Path, hostname: str, simulate: str, *, named: bool = True, env: dict[str, str] | None = None, interval: float = 0.2,
    args: Sequence[str] = (), prefix: Sequence[str] = (),
) -> Node:  # fmt: skip
    """An exporter on any free port; ``named=False`` leaves --hostname out (the simulated
    machine's name is the default); ``args``: more options; ``prefix``: what runs it (``setpriv ...
    --`` for another user). Call :func:`listening` before scraping it."""
    env = env if env is not None else node_env(folder, simulate)
    command = [
        *prefix, *JUPYTER_VGPU, "exporter", "--port", "0", "--interval", str(interval),
        *(["--hostname", hostname] if named else []), *args,
    ]  # fmt: skip
    return Node(hostname, env, subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True))


def listening(node: Node, timeout: float = 60) -> Node:
    """Read the exporter's stderr until it says its URL (a thread drains it afterwards)."""
    lines: queue.Queue[str] = queue.Queue()
    assert node.process.stderr is not None
    threading.Thread(target=lambda: [(lines.put(line), node.said.append(line)) for line in node.process.stderr], daemon=True).start()  # type: ignore[union-attr]
    said = []
    deadline = time.monotonic() + timeout
    while not node.url:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"the exporter said no URL in {timeout} s: {said}") from None
        said.append(line)
        if " at http://" in line:
            node.url = line.rsplit(" at ", 1)[1].strip()
    return node


def scrape(url: str) -> dict[str, list[Sample]]:
    """The page as Prometheus reads it: each family's samples, by name."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def job_mapping(folder: Path) -> dict[str, str]:
    """A dcgm-exporter job-mapping folder as dcgm-exporter reads it: each file named by a GPU
    index (``0``, ``1.2``), not the writer's temporary files (``.jupyter-vgpu-*``, renamed over
    them), which may come and go between listing the folder and opening one."""
    return {p.name: p.read_text() for p in sorted(folder.iterdir()) if re.fullmatch(r"\d+(\.\d+)?", p.name)}


def page_with_slice(url: str, timeout: float = 60) -> str:
    """An exporter's page once it shows a slice (its sampler has read the ledger since it was booked)."""
    deadline = time.monotonic() + timeout
    while "jupyter_vgpu_slice_info{" not in (page := urllib.request.urlopen(url, timeout=10).read().decode()):
        assert time.monotonic() < deadline, f"the page at {url} showed no slice in {timeout} s:\n{page}"
        time.sleep(0.1)
    return page


def idle_kernel(env: dict[str, str], *, fraction: float, kernel_id: str) -> str:
    """A kernel's slice on GPU 1 of the node whose environment is ``env`` (its simulated GPUs and
    ledger), held by this process, idle for 10 minutes as its server writes it beside the ledger
    (slices.reports.write_idle): the node's exporter, the same user, reads it. Its slice id."""
    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.ledger.sqlite import SQLiteLedger
    from jupyter_vgpu.slices import Holder, SliceRequest
    from jupyter_vgpu.slices.reports import write_idle

    ledger = SQLiteLedger(env["JUPYTER_VGPU_LEDGER"], Inventory(env["JUPYTER_VGPU_SIMULATE"]))
    try:
        held = ledger.reserve(SliceRequest.parse(fraction=fraction, gpu=1), Holder("kernel", kernel_id, pid=os.getpid()))
        write_idle(ledger.path, held.id, time.time() - 600)
    finally:
        ledger.close()
    return held.id

