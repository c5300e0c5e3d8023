"""Every launcher keeps the contract (jupyter_vgpu/launch/launchers.py), the built-ins and one
another package registers through the entry point group (tests/fixtures/faraway): and the
faraway launcher's kernels show in the server's REST API and `jupyter vgpu status`, and its
kernelspecs install, with no change to server/ or cli/ (issue 40). The sidebar's card:
tests/ui/test_other_launcher.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_process import JupyterProcess, isolated_env, start_jupyter, wait_for

from jupyter_vgpu.launch import launchers
from jupyter_vgpu.launch.elsewhere import Elsewhere

FARAWAY = Path(__file__).parent / "fixtures" / "faraway"
JUPYTER_VGPU = str(Path(sys.executable).with_name("jupyter-vgpu"))


@pytest.fixture
def with_faraway(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(FARAWAY))
    monkeypatch.setattr(launchers, "_made", {})
    yield


def test_every_launcher_keeps_the_contract(with_faraway: None, tmp_path: Path) -> None:
    every = {launcher.name: launcher for launcher in launchers.every()}
    assert list(every) == ["local", "slurm", "faraway"]
    env = {"FARAWAY_STATE": str(tmp_path / "state.json")}
    for launcher in every.values():
        assert launcher.description
        rows = launcher.rows(env)
        assert isinstance(rows, list) and all(isinstance(r, Elsewhere) for r in rows)
        found, problem = launcher.user_rows(env)
        assert isinstance(found, list) and (problem is None or problem.endswith("."))
        assert launcher.check_options([]) == []
        if launcher.books_elsewhere:  # its kernels are seen through its own words
            assert launcher.title and launcher.runs and launcher.option and launcher.label, launcher.name
        reader = launcher.node_jobs("node1")  # what a node's exporter --jobs reads beside its ledger
        assert reader is None or callable(reader), launcher.name
    # Only Slurm's jobs book in ledgers of their own on a node (tests/slurm/test_node_exporter.py)
    assert [name for name, launcher in every.items() if launcher.node_jobs("node1") is not None] == ["slurm"]
    assert every["local"].title == "" and every["local"].rows(env) == []
    with pytest.raises(Exception, match="launcher local takes no options; got '--x'"):
        every["local"].check_options(["--x"])


def test_a_launcher_checks_its_own_settings_each_in_one_sentence(with_faraway: None) -> None:
    every = {launcher.name: launcher for launcher in launchers.every()}
    far = every["faraway"]
    assert far.check_settings({"args": ["--far-x=1"], "retries": 2}) == launchers.LauncherSettings(("--far-x=1",), {"retries": 2})
    assert far.check_settings({}).count("retries") == 0
    refused = {
        "faraway option 'x' is not one; use --far-<name>=<value>.": {"args": ["x"]},
        "faraway_args '--far-x=1' is not allowed; use a list of text, one faraway option each.": {"args": "--far-x=1"},
        "faraway_retries -1 is not allowed; use a whole number, 0 or more.": {"retries": -1},
        "faraway_retries True is not allowed; use a whole number, 0 or more.": {"retries": True},
        "launcher faraway has no setting 'tries'; use args, retries.": {"tries": 1},
        "faraway ['x'] is not allowed; use a mapping of its settings, such as {}.": ["x"],
    }
    for said, given in refused.items():
        with pytest.raises(Exception, match=f"^{re.escape(said)}$"):
            far.check_settings(given)  # type: ignore[arg-type]
    with pytest.raises(Exception, match=r"^launcher local has no setting 'args'; it takes none\.$"):
        every["local"].check_settings({"args": []})


def test_a_restarted_server_has_the_launcher_end_what_a_server_that_has_gone_left(with_faraway: None, tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"kernels": {"k-gone": {"host": "far1", "server": int(gone.stdout)}, "k-here": {"host": "far1", "server": os.getpid()}}, "line": []}))
    far = launchers.launcher_named("faraway")
    assert far.clean_up({"FARAWAY_STATE": str(state)}) == ["ended faraway kernel k-gone, whose server has gone"]
    assert list(json.loads(state.read_text())["kernels"]) == ["k-here"]
    assert far.clean_up({"FARAWAY_STATE": str(state)}) == []


async def test_a_row_id_is_left_to_its_own_launcher(with_faraway: None) -> None:
    every = {launcher.name: launcher for launcher in launchers.every()}
    assert await every["local"].leave_line("faraway-1", {}) is None
    assert await every["slurm"].leave_line("faraway-1", {}) is None
    assert await every["faraway"].leave_line("slurm-12", {}) is None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JupyterProcess]:
    env = isolated_env(
        tmp_path, JUPYTER_VGPU_SIMULATE="1x16GiB", PYTHONPATH=os.pathsep.join(filter(None, (str(FARAWAY), os.environ.get("PYTHONPATH")))), FARAWAY_STATE=str(tmp_path / "faraway.json"),
    )  # fmt: skip
    installed = subprocess.run(
        [JUPYTER_VGPU, "kernelspec", "install", "-p", "1/4", "--faraway", "--faraway-arg=--far-zone=b", "--faraway-retries", "2", "--user"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    running = start_jupyter(tmp_path, env=env, args=["--VGPUServer.monitor_interval=0.2"])
    yield running
    running.stop(signal.SIGTERM, timeout=20) or running.stop(signal.SIGKILL)


def test_a_new_launchers_kernelspec_installs_with_its_own_option(server: JupyterProcess) -> None:
    env = server.env
    spec = json.loads((Path(env["JUPYTER_DATA_DIR"]) / "kernels" / "python3-vgpu-1-4-faraway" / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (1/4 GPU, far)"
    config = spec["metadata"]["kernel_provisioner"]["config"]
    assert (config["launcher"], config["faraway"]) == ("faraway", {"args": ["--far-zone=b"], "retries": 2})  # under its own key
    bad = subprocess.run([JUPYTER_VGPU, "kernelspec", "install", "-p", "1/2", "--faraway", "--faraway-arg=zone", "--user"],
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode != 0 and bad.stderr.strip() == "jupyter vgpu: faraway option 'zone' is not one; use --far-<name>=<value>."
    lonely = subprocess.run([JUPYTER_VGPU, "kernelspec", "install", "-p", "1/2", "--faraway-arg=--far-x=1", "--user"],
                            env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert lonely.stderr.strip() == "jupyter vgpu: --faraway-arg is for kernels started as Faraway hosts; add --faraway."


def test_a_new_launchers_kernels_show_in_rest_and_status_with_its_words(server: JupyterProcess) -> None:
    env = server.env
    status, kernel = server.api("POST", "api/kernels", {"name": "python3-vgpu-1-4-faraway"}, timeout=90)
    assert status == 201, kernel
    state = Path(env["FARAWAY_STATE"])
    line = json.loads(state.read_text())
    line["line"] = [{"kernel_id": "0f0f0f0f-aaaa", "path": "queued.ipynb"}]
    state.write_text(json.dumps(line))

    def sample() -> dict | None:  # type: ignore[type-arg]
        code, reply = server.api("GET", "api/vgpu/sample")
        assert code == 200, reply
        slices = reply["slices"]
        return slices if any(s.get("elsewhere") for s in slices["slices"]) and slices["waiting"] else None

    slices = wait_for(sample, "the faraway rows in the sample")
    (row,) = [s for s in slices["slices"] if s["kernel_id"] == kernel["id"]]
    assert row["elsewhere"] == {
        "launcher": "faraway", "title": "Faraway hosts", "id": f"faraway-{kernel['id'][:8]}", "state": "running",
        "state_title": "The engine runs it on far1", "where": ["Faraway host far1", "slot 3", "2 of 8 slots"],
        "name": "Faraway host far1", "reason": None, "reason_text": None, "place_text": None,
        "note": "Memory through faraway host far1 (fenced by its engine)", "ended": None, "cancel": False,
        "engine": "Faraway", "line": "the faraway line", "ref": kernel["id"][:8], "notice": None,
        "simulated": False,
    }  # fmt: skip
    assert (row["share_note"], row["memory_reserved"], row["memory_used"], row["state"]) == (
        "Memory through faraway host far1 (fenced by its engine)", 4 << 30, 1 << 30, "ok",
    )  # fmt: skip
    assert row["gpus"] == ["faraway:far1:3"] and row["faraway_host"] == "far1" and row["running_here"]
    (waiting,) = slices["waiting"]
    assert (waiting["ticket"], waiting["position"], waiting["elsewhere"]["reason_text"]) == ("faraway-0f0f0f0f", 1, "every faraway host is busy")
    assert slices["launchers"] == [{
        "name": "faraway", "title": "Faraway hosts", "runs": "Its GPU kernels run on faraway hosts, where the engine places them",
        "kernelspecs": ["Python 3 (1/4 GPU, far)"],
    }]  # fmt: skip
    code, one = server.api("GET", f"api/vgpu/kernels/{kernel['id']}")
    assert code == 200 and one["slice"]["elsewhere"]["launcher"] == "faraway" and one["host"] is None

    shown = subprocess.run([JUPYTER_VGPU, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())  # status folds long lines at the terminal's width
    assert (
        f"Faraway hosts: Faraway host far1: running GPU 3 2 of 8 slots notebook far.ipynb kernel {kernel['id']} used 1.0 GiB* "
        "Faraway host ?: pending GPU 3 2 of 8 slots notebook queued.ipynb kernel 0f0f0f0f-aaaa used 1.0 GiB*"
    ) in said, shown.stdout

    assert server.api("DELETE", "api/vgpu/waiting/faraway-0f0f0f0f")[0] == 204  # its launcher takes it out of its line
    assert json.loads(state.read_text())["line"] == []
    code, said = server.api("DELETE", "api/vgpu/waiting/faraway-0f0f0f0f")
    assert (code, said["message"]) == (404, "No kernel of this server waits in the faraway line as faraway-0f0f0f0f.")
    assert server.api("DELETE", f"api/kernels/{kernel['id']}", timeout=60)[0] == 204
    assert json.loads(state.read_text())["kernels"] == {}
    assert os.environ.get("FARAWAY_STATE") is None  # the test's own process was left alone
