"""A real JupyterHub (real configurable-http-proxy from npm, LocalProcessSpawner as two system users)
with the broker as a managed service: quotas on real kernels, and the admin page, with the whole
cluster from a real Prometheus that scrapes the broker's own metrics page (configure's metrics_port).

Authentication is JupyterHub's DummyAuthenticator (tokens are made through the REST API); the
servers run as the real system users, so their uids differ and the broker tells them apart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from jupyter_process import free_port
from prometheus_process import PrometheusProcess, start_prometheus

from .conftest import Users, wait_until, world_dir

pytestmark = [pytest.mark.hub, pytest.mark.slow]

HERE = Path(__file__).parent
CHP = HERE / "node_modules" / ".bin" / "configurable-http-proxy"


def _proxy_command() -> str:
    if CHP.exists():
        return str(CHP)
    if found := shutil.which("configurable-http-proxy"):
        return found
    if shutil.which("npm") is None:
        pytest.skip("configurable-http-proxy is not installed and npm is not available to install it")
    result = subprocess.run(
        ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(HERE), "configurable-http-proxy@^5"],
        capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0 or not CHP.exists():
        pytest.skip(f"could not npm install configurable-http-proxy: {result.stderr[-500:]}")
    return str(CHP)


CONFIG = """
import sys
from jupyter_vgpu.hub import configure

c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {{{alice!r}, {bob!r}}}
c.Authenticator.admin_users = {{"hubadmin"}}
c.JupyterHub.services = [{{"name": "tester", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["tester"]}}]
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.environment = {{"JUPYTER_PATH": "{share}"}}
c.Spawner.start_timeout = 60
c.Spawner.http_timeout = 60

c.VGPUPolicy.default = {{"max_per_kernel": "1/2"}}
c.VGPUPolicy.groups = {{{students!r}: {{"max_per_kernel": "1/4", "max_total": "1/2"}}}}
c.VGPUPolicy.prometheus_url = "{prometheus}"
configure(
    c, __file__, socket_path="{sockets}/broker.sock", ledger_path="{state}/ledger.sqlite", admin_port={admin_port},
    metrics_port={metrics_port},
)
"""


def _kernelspec(share: Path, name: str, fraction: str) -> None:
    folder = share / "kernels" / name
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({fraction} GPU)",
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": {"gpu_fraction": fraction}}},
    }))
    folder.chmod(0o755)


@dataclass
class Hub:
    url: str
    token: str  # the tester service's (admin role)
    users: Users
    log: Path
    prometheus: PrometheusProcess

    def api(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"token {token or self.token}"}
        return requests.request(method, f"{self.url}/hub/api/{path}", headers=headers, timeout=60, **kwargs)

    def user_token(self, name: str) -> str:
        answer = self.api("POST", f"users/{name}/tokens", json={"note": "test"})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["token"])

    def start_server(self, name: str) -> None:
        answer = self.api("POST", f"users/{name}/server")
        assert answer.status_code in (201, 202), answer.text

        def ready() -> bool:
            model = self.api("GET", f"users/{name}").json()
            return bool(model.get("servers", {}).get("", {}).get("ready"))

        wait_until(ready, timeout=90, what=f"{name}'s server ready")

    def start_kernel(self, name: str, token: str, kernelspec: str) -> requests.Response:
        return requests.post(
            f"{self.url}/user/{name}/api/kernels", json={"name": kernelspec},
            headers={"Authorization": f"token {token}"}, timeout=90,
        )


@pytest.fixture(scope="module")
def hub(system_users: Users) -> Iterator[Hub]:
    chp = _proxy_command()
    state = Path(tempfile.mkdtemp(prefix="vgpu-hub-"))
    sockets = world_dir("vgpu-hub-sock-")
    share = world_dir("vgpu-hub-share-")
    for name, fraction in (("quarter", "1/4"), ("half", "1/2")):
        _kernelspec(share, name, fraction)
    port, token = free_port(), uuid.uuid4().hex
    prometheus = start_prometheus(state / "prometheus")
    metrics_port = free_port()
    prometheus.scrape("hub-node", [f"127.0.0.1:{metrics_port}"])  # the broker's page, once it listens
    config = state / "jupyterhub_config.py"
    config.write_text(CONFIG.format(
        port=port, hub_port=free_port(), proxy_api_port=free_port(), admin_port=free_port(), chp=chp,
        prometheus=prometheus.url, metrics_port=metrics_port,
        state=state, sockets=sockets, share=share, token=token, alice=system_users.alice.name,
        bob=system_users.bob.name, students=system_users.students,
    ))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU")}
    env["JUPYTER_VGPU_SIMULATE"] = "1x16GiB"
    log = state / "hub.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "jupyterhub"), "-f", str(config)],
            cwd=state, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    handle = Hub(f"http://127.0.0.1:{port}", token, system_users, log, prometheus)
    try:
        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"JupyterHub exited:\n{log.read_text()[-4000:]}")
            try:
                return handle.api("GET", "services/vgpu").status_code == 200 and (sockets / "broker.sock").exists()
            except requests.RequestException:
                return False

        wait_until(up, timeout=90, what="JupyterHub and the broker service up")
        for user in (system_users.alice, system_users.bob):
            handle.start_server(user.name)
        yield handle
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        prometheus.stop()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)
        shutil.rmtree(share, ignore_errors=True)


def test_kernels_get_slices_within_quota_and_the_admin_page_lists_them(hub: Hub) -> None:
    alice, bob = hub.users.alice.name, hub.users.bob.name
    alice_token, bob_token = hub.user_token(alice), hub.user_token(bob)
    hub.api("POST", "users/hubadmin")  # admin users exist once they are named; make sure
    admin_token = hub.user_token("hubadmin")

    started = hub.start_kernel(alice, alice_token, "quarter")
    # (a CI run once met the broker's socket gone here, not reproduced: the hub's log, with the
    # broker's own output, says why if it happens again)
    assert started.status_code == 201, started.text + "\n--- hub log ---\n" + "\n".join(hub.log.read_text(errors="replace").splitlines()[-80:])
    refused = hub.start_kernel(alice, alice_token, "half")
    assert refused.status_code == 403  # a policy refusal, not a server error
    assert f"{alice}: at most 1/4 GPU per kernel (group {hub.users.students}); asked for 1/2 GPU." in refused.json()["message"]
    bobs = hub.start_kernel(bob, bob_token, "half")
    assert bobs.status_code == 201, bobs.text

    page = f"{hub.url}/services/vgpu/api/slices"
    listed = requests.get(page, headers={"Authorization": f"token {admin_token}"}, timeout=60)
    assert listed.status_code == 200, listed.text
    rows = {row["owner"]: row for row in listed.json()["slices"]}
    assert set(rows) == {alice, bob}
    assert rows[alice]["holder"] == started.json()["id"] and rows[alice]["request_text"] == "1/4 GPU"
    assert rows[bob]["holder"] == bobs.json()["id"] and rows[bob]["memory_reserved"] == 8 << 30
    assert listed.json()["simulated"] is True

    forbidden = requests.get(page, headers={"Authorization": f"token {alice_token}"}, timeout=60)
    assert forbidden.status_code == 403

    # The whole cluster, as the broker's page reaches Prometheus: every slice named, the top users.
    cluster_page = f"{hub.url}/services/vgpu/api/cluster"
    found: Any = None

    def both_in_cluster() -> bool:
        nonlocal found
        answer = requests.get(cluster_page, headers={"Authorization": f"token {admin_token}"}, timeout=60)
        assert answer.status_code == 200, answer.text
        found = answer.json()
        # each kernel's idle time too: its server tells the broker, whose page Prometheus scrapes (issue 48, item 3)
        return sorted(s["user"] for s in found["slices"]) == sorted([alice, bob]) and all(s["idle_seconds"] is not None for s in found["slices"])

    wait_until(both_in_cluster, timeout=60, what="alice's and bob's slices, and their kernels' idle times, in the admin page's cluster")
    gzipped = requests.get(cluster_page, headers={"Authorization": f"token {admin_token}", "Accept-Encoding": "gzip"}, timeout=60)
    assert gzipped.headers.get("Content-Encoding") == "gzip" and gzipped.json()["nodes"] == found["nodes"]  # as a browser gets it
    (node,) = found["nodes"]
    assert not node["stale"] and [g["booked"] for g in node["gpus"]] == [12 << 30]
    named = {s["user"]: s for s in found["slices"]}
    assert named[alice]["kernel_id"] == started.json()["id"] and named[bob]["gpus"][0]["request"] == 8 << 30
    assert [u["user"] for u in found["top_users"]] == [bob, alice] and found["top_users"][0]["booked"] == 8 << 30
    assert {u["user"] for u in found["top_unused"]} == {alice, bob}
    assert requests.get(cluster_page, headers={"Authorization": f"token {alice_token}"}, timeout=60).status_code == 403
    html_page = requests.get(f"{hub.url}/services/vgpu/", headers={"Authorization": f"token {admin_token}"}, timeout=60)
    assert "Top users by memory booked but unused" in html_page.text and "<th>Idle</th>" in html_page.text

    # the admin shuts alice's kernel down: through her own server, which frees the slice
    done = requests.post(f"{page}/{rows[alice]['id']}/shutdown", headers={"Authorization": f"token {admin_token}"}, timeout=60)
    assert done.status_code == 200, done.text
    assert done.json()["how"] == "server"
    kernels = requests.get(f"{hub.url}/user/{alice}/api/kernels", headers={"Authorization": f"token {alice_token}"}, timeout=60)
    assert started.json()["id"] not in [k["id"] for k in kernels.json()]

    def alice_gone() -> bool:
        answer = requests.get(page, headers={"Authorization": f"token {admin_token}"}, timeout=60).json()
        return [r["owner"] for r in answer["slices"]] == [bob]

    wait_until(alice_gone, timeout=30, what="alice's slice freed")
    # and releases bob's slice (his kernel keeps running, without a slice)
    released = requests.delete(f"{page}/{rows[bob]['id']}", headers={"Authorization": f"token {admin_token}"}, timeout=60)
    assert released.status_code == 200 and released.json()["owner"] == bob


CHROMIUM = Path(os.environ.get("JUPYTER_VGPU_CHROMIUM", "/usr/bin/chromium"))


@pytest.mark.browser
def test_an_admin_sees_the_whole_cluster_on_the_admin_page_in_a_browser(hub: Hub) -> None:
    """The hub admin logs in, opens the GPU service's page, and sees the cluster from Prometheus:
    the node, alice's kernel's slice named, and the top users."""
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    alice = hub.users.alice.name
    started = hub.start_kernel(alice, hub.user_token(alice), "quarter")
    assert started.status_code == 201, started.text
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"], headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{hub.url}/hub/login?next=/services/vgpu/")
                page.fill("#username_input", "hubadmin")
                page.fill("#password_input", "any")
                page.click("#login_submit")
                page.wait_for_url(f"{hub.url}/services/vgpu/", timeout=60_000)
                cluster = page.locator("#cluster")
                expect(cluster).to_be_visible(timeout=60_000)
                # This kernel's slice (the page reads the cluster every 10 s, the broker the node every 5 s)
                row = page.locator("#cluster-slices tr", has_text=f"kernel {started.json()['id'][:8]}")
                expect(row).to_contain_text("4.0 GiB", timeout=60_000)  # its request, a quarter of 16 GiB
                expect(row.locator("td").first).to_have_text(alice)
                # its kernel's idle time, as her server told the broker ("busy" while it runs a cell)
                expect(row.locator("td").nth(8)).to_have_text(re.compile(r"^(busy|\d+ s|\d+ min)$"), timeout=60_000)
                expect(page.locator("#nodes tr")).to_have_count(1)
                expect(page.locator("#cluster-slices tr", has_text=alice)).to_have_count(1, timeout=60_000)  # the earlier test's is gone
                expect(page.locator("#top tr", has_text=alice).locator("td").nth(1)).to_have_text("4.0 GiB")
                expect(page.locator("#cluster-source")).to_have_text(f"from {hub.prometheus.url}")
                artifacts = Path(__file__).resolve().parents[2] / "artifacts" / "ui"
                artifacts.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(artifacts / "hub-admin-cluster.png"), full_page=True)
            finally:
                browser.close()
    finally:
        requests.delete(
            f"{hub.url}/user/{alice}/api/kernels/{started.json()['id']}", headers={"Authorization": f"token {hub.user_token(alice)}"}, timeout=60
        )
