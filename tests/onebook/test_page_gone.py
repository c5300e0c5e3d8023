"""A page that reloads or closes while its kernel waits in line (issue 41, major 1): the browser
drops the start's connection, and the wait ends there: nothing is booked when room comes, no
kernel starts under the session's temporary name, and the notebook cannot end up with two
slices. A start whose page stays gets its kernel. A real server, a raw HTTP client that goes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from jupyter_process import JupyterProcess, isolated_env, start_jupyter, wait_for, write_sliced_kernelspec

from .views import JUPYTER_VGPU, file_view, run

WAITS = "python3-vgpu-waits"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterProcess]:
    env = isolated_env(tmp_path, JUPYTER_VGPU_SIMULATE="1x16GiB")
    write_sliced_kernelspec(tmp_path / "data", {"gpu_fraction": 1, "wait_timeout": 120}, name=WAITS,
                            display_name="Python 3 (1 GPU, waits 120 s)")  # fmt: skip
    running = start_jupyter(tmp_path, env=env, args=["--VGPUServer.monitor_interval=0.2"])
    yield running
    running.stop(signal.SIGTERM, timeout=20) or running.stop(signal.SIGKILL)


def ask_for_a_kernel(server: JupyterProcess, path: str) -> socket.socket:
    """What JupyterLab sends when a notebook opens (a session under a temporary path), on a
    connection of its own, whose answer is not read yet."""
    url = urlsplit(server.url)
    body = json.dumps({"path": path, "type": "notebook", "name": "", "kernel": {"name": WAITS}}).encode()
    client = socket.create_connection((url.hostname, url.port), timeout=30)
    client.sendall(
        f"POST {url.path}api/sessions HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: token {server.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    return client


def waiting(env: dict[str, str]) -> list[dict[str, object]]:
    done = subprocess.run([JUPYTER_VGPU, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["waiting"])


def test_a_page_that_goes_while_its_kernel_waits_in_line_books_nothing(server: JupyterProcess) -> None:
    env = server.env
    ledger = Path(env["JUPYTER_VGPU_LEDGER"])
    hog = subprocess.Popen([JUPYTER_VGPU, "run", "-q", "-p", "1", "--", "sleep", "300"], env=env)
    try:
        wait_for(lambda: len(file_view(ledger)[0]) == 1 or None, "the GPU held whole")
        page = ask_for_a_kernel(server, "7d2bfb1c-0d58-4dbf-bd5e-2c0cbb2a77a2")
        wait_for(lambda: waiting(env) or None, "the start in line")
        page.close()  # F5: the browser drops the request it no longer waits for
        wait_for(lambda: "stopped waiting in line for 1 GPU: the page that asked for it is gone" in server.log_text() or None,
                 "the server to notice", timeout=30)  # fmt: skip
        assert waiting(env) == []
    finally:
        hog.send_signal(signal.SIGTERM)
        hog.wait(30)
    # room now: nothing takes it for the page that went, under a UUID or otherwise
    assert run(env, "-p", "1/4", "--", "true").returncode == 0
    assert file_view(ledger)[0] == set()
    assert server.api("GET", "api/sessions") == (200, [])
    assert server.api("GET", "api/kernels") == (200, [])


def test_a_page_that_stays_gets_its_kernel_when_room_comes(server: JupyterProcess) -> None:
    env = server.env
    hog = subprocess.Popen([JUPYTER_VGPU, "run", "-q", "-p", "1", "--", "sleep", "300"], env=env)
    page = None
    try:
        wait_for(lambda: len(file_view(Path(env["JUPYTER_VGPU_LEDGER"]))[0]) == 1 or None, "the GPU held whole")
        page = ask_for_a_kernel(server, "train.ipynb")
        wait_for(lambda: waiting(env) or None, "the start in line")
        hog.send_signal(signal.SIGTERM)
        hog.wait(30)
        answer = page.recv(65536).decode()
        assert answer.startswith("HTTP/1.1 201 "), answer
        (session,) = server.api("GET", "api/sessions")[1]
        assert session["path"] == "train.ipynb"
        server.api("DELETE", f"api/sessions/{session['id']}")
    finally:
        if hog.poll() is None:
            hog.kill()
        if page is not None:
            page.close()
