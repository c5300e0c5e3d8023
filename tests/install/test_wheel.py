"""What users install is what we test: README.md's "Install" section, run as written on a fresh
copy of the checkout, in a fresh venv.

Its commands are read from README.md, not copied here: each line of the section's bash block runs
in a clean copy of the checkout (tracked files only, as a fresh clone has them) with the new venv
first on PATH, so `python -m build` builds the sdist and the wheel from it the way a release does
(the labextension with Node). Its last line, `jupyter lab`, starts as written (this test's config
gives it a port and a token) and must serve JupyterLab with the GPU API. Then every command a user
meets first runs from outside the source tree, in Jupyter dirs of its own, on simulated GPUs,
without extras and then with `[hub]`. A wheel that misses a file (the labextension, the server
config) or a dependency, or a README line that does not work, fails here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jupyter_process import KERNEL_NAME, TOKEN, JupyterProcess, free_port, isolated_env, start_jupyter

pytestmark = [pytest.mark.install, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: Whichever way jupyter-vgpu was installed, the message names the [hub] extra's own packages, which
#: pip finds on the index (the extra itself would need jupyter-vgpu on the index too).
HUB_MESSAGE = re.compile(r"needs jupyterhub, which is not installed: pip install ((?:'[^']+' ?)+) \(jupyter-vgpu's \[hub\] extra\)\.$")


def told_to_install(stderr: str) -> list[str]:
    """The requirements the one-sentence "needs jupyterhub" message tells the user to install."""
    found = HUB_MESSAGE.search(stderr.strip())
    assert found, stderr
    return shlex.split(found.group(1))


@dataclass
class Installed:
    """A fresh venv holding the wheel, and a workspace outside the source tree."""

    venv: Path
    wheel: Path
    work: Path
    env: dict[str, str]
    timings: dict[str, float]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=self.work, env=env or self.env, capture_output=True, text=True, timeout=timeout
        )

    def jupyter(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin("jupyter"), *args, timeout=timeout)

    def pip_install(self, *requirements: str) -> None:
        started = time.monotonic()
        result = self.run(self.bin("python"), "-m", "pip", "install", "-q", *requirements, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        self.timings[f"pip install {' '.join(Path(r).name for r in requirements)}"] = time.monotonic() - started


def _checkout_copy(target: Path) -> Path:
    """The files git tracks (and new ones it does not ignore), as a clean clone would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def install_lines(readme: Path = REPO / "README.md") -> list[str]:
    """The command lines of README.md's "Install" section: the lines of its bash block, comments
    and blank lines left out (a line's own trailing comment is bash's to skip)."""
    text = readme.read_text()
    start = text.index("\n## Install\n")
    section = text[start : text.index("\n## ", start + 1)]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "README.md's Install section has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to build the wheel from")
    tmp = tmp_path_factory.mktemp("wheel")
    timings: dict[str, float] = {}
    source = _checkout_copy(tmp / "checkout")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, timeout=300)
    timings["python -m venv"] = time.monotonic() - started
    work = tmp / "work"
    work.mkdir()
    env = isolated_env(work, JUPYTER_VGPU_SIMULATE="1x16GiB")
    env["PATH"] = f"{tmp / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    *commands, serve = install_lines()
    assert serve == "jupyter lab", f"README's install section should end by starting JupyterLab, not {serve!r}"
    for line in commands:  # as a user pastes them, in the clone
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", line], cwd=source, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, f"README's `{line}` failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        timings[line.split("  #")[0].strip()] = time.monotonic() - started
    (wheel,) = (source / "dist").glob("jupyter_vgpu-*.whl")
    result = Installed(tmp / "venv", wheel, work, env, timings)
    _serve_as_written(result, serve)
    yield result
    sizes = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items())
    print(f"\nwheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB; {sizes}")


def _serve_as_written(installed: Installed, line: str) -> None:
    """README's last line (`jupyter lab`), typed as written; its port, its token and (as root)
    allow_root come from the user's Jupyter config, as they would on a machine of one's own."""
    port = free_port()
    config = Path(installed.env["JUPYTER_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    server_config = {"port": port, "port_retries": 0, "open_browser": False, "allow_root": os.geteuid() == 0}
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": server_config, "IdentityProvider": {"token": TOKEN}})
    )
    root = installed.work / "lab-root"
    root.mkdir()
    log = installed.work / "jupyter-lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=root, env=installed.env, stdout=out, stderr=subprocess.STDOUT)
    server = JupyterProcess(process, f"http://localhost:{port}/", root, installed.env, log)
    try:
        server.wait_ready(timeout=120)
        status, page = server.api("GET", "lab")
        assert status == 200 and "jupyter-vgpu" in page, "JupyterLab does not load the labextension"
        status, devices = server.api("GET", "api/vgpu/devices")
        assert status == 200 and devices["simulated"] is True, devices
    finally:
        assert server.stop(signal.SIGTERM, timeout=15) is not None, server.log_tail()
        (config / "jupyter_server_config.json").unlink()


def test_the_wheel_ships_the_labextension_and_the_server_config(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    data = "jupyter_vgpu-{v}.data/data/".format(v=installed.wheel.name.split("-")[1])
    assert f"{data}etc/jupyter/jupyter_server_config.d/jupyter_vgpu.json" in names
    assert f"{data}share/jupyter/labextensions/jupyter-vgpu/package.json" in names
    assert any(n.startswith(f"{data}share/jupyter/labextensions/jupyter-vgpu/static/remoteEntry.") for n in names)
    assert not any("node_modules" in n or n.endswith(".ts") for n in names)
    assert "jupyter_vgpu_startup.pth" in names  # at the root: site-packages, where `site` runs it


def test_the_source_tree_is_not_what_runs(installed: Installed) -> None:
    where = installed.run(installed.bin("python"), "-c", "import jupyter_vgpu; print(jupyter_vgpu.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(installed.venv)), where.stdout


def _check_commands(installed: Installed) -> None:
    status = installed.jupyter("vgpu", "status")
    assert status.returncode == 0, status.stderr
    assert "SIMULATED GPUs" in status.stdout and "No slices" in status.stdout

    specs = installed.jupyter("vgpu", "kernelspec", "install", "--defaults", "--user")
    assert specs.returncode == 0, specs.stderr
    listed = json.loads(installed.jupyter("kernelspec", "list", "--json").stdout)["kernelspecs"]
    assert KERNEL_NAME in listed and listed[KERNEL_NAME]["resource_dir"].startswith(installed.env["JUPYTER_DATA_DIR"])

    inside = installed.jupyter(
        "vgpu", "run", "-p", "0.25", "--", "python", "-c",
        "import os, sys; print(os.environ['JUPYTER_VGPU_FRACTION'], os.environ['CUDA_VISIBLE_DEVICES'][:4], "
        "'jupyter_vgpu.kernel.startup' in sys.modules)",
    )  # fmt: skip
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["0.25", "GPU-", "True"]  # the start-up hook waits for a framework import
    plain = installed.run(installed.bin("python"), "-c", "import sys; print([m for m in sys.modules if 'vgpu' in m])")
    assert plain.stdout.strip() == "[]", plain.stdout + plain.stderr  # nothing for a process without a slice

    labextensions = installed.jupyter("labextension", "list")
    lines = _plain(labextensions.stdout + labextensions.stderr)
    assert labextensions.returncode == 0, lines
    version = installed.wheel.name.split("-")[1]
    assert any(line.startswith(f"jupyter-vgpu v{version} enabled OK") for line in lines), lines

    server_extensions = installed.jupyter("server", "extension", "list")
    lines = _plain(server_extensions.stdout + server_extensions.stderr)
    assert "jupyter_vgpu enabled" in lines and f"jupyter_vgpu {version} OK" in lines, lines


def _plain(text: str) -> list[str]:
    """Output lines without colour codes and indentation."""
    return [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in text.splitlines()]


KERNEL_SCRIPT = """
import json, sys
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name=sys.argv[1], startup_timeout=120)
texts = []
def keep(message):
    content = message["content"]
    if message["msg_type"] == "stream":
        texts.append(content["text"])
    elif message["msg_type"] in ("display_data", "execute_result"):
        texts.append(content["data"].get("text/plain", ""))
try:
    reply = kc.execute_interactive("%vgpu", output_hook=keep, timeout=60)
    print(json.dumps({"status": reply["content"]["status"], "text": "".join(texts)}))
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
"""


def _check_sliced_kernel(installed: Installed) -> None:
    result = installed.run(installed.bin("python"), "-c", KERNEL_SCRIPT, KERNEL_NAME, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == "ok", answer
    assert "jupyter-vgpu · slice" in answer["text"] and "[simulated GPUs]" in answer["text"], answer["text"]
    assert "1/4 GPU" in answer["text"], answer["text"]


def _check_server(installed: Installed, tmp: Path) -> None:
    server = start_jupyter(tmp, python=installed.bin("python"), env=installed.env)
    try:
        status, devices = server.api("GET", "api/vgpu/devices")
        assert status == 200, devices
        assert devices["simulated"] is True and devices["available"] is True
        status, page = server.api("GET", "lab")
        assert status == 200 and "jupyter-vgpu" in page, "JupyterLab does not load the labextension"
    finally:
        assert server.stop(signal.SIGTERM, timeout=15) is not None, server.log_tail()


def test_without_extras_every_command_works_from_the_installed_wheel(installed: Installed) -> None:
    _check_commands(installed)
    _check_sliced_kernel(installed)
    _check_server(installed, installed.work / "server-plain")


def test_without_the_hub_extra_the_broker_names_the_extra(installed: Installed) -> None:
    helped = installed.jupyter("vgpu", "--help")
    assert helped.returncode == 0 and "broker" in helped.stdout, helped.stderr
    broker = installed.jupyter("vgpu", "broker", "--socket", str(installed.work / "broker.sock"))
    assert broker.returncode != 0
    assert sorted(told_to_install(broker.stderr)) == ["jupyterhub-kubespawner>=7", "jupyterhub>=5"], broker.stderr
    assert "Traceback" not in broker.stderr
    imported = installed.run(installed.bin("python"), "-c", "import jupyter_vgpu.hub")
    assert imported.returncode != 0 and told_to_install(imported.stderr), imported.stderr


def test_with_the_hub_extra_the_broker_serves_and_everything_else_still_works(installed: Installed) -> None:
    imported = installed.run(installed.bin("python"), "-c", "import jupyter_vgpu.hub")
    if imported.returncode != 0:  # as a user does: what the message says, into the wheel's venv
        installed.pip_install(*told_to_install(imported.stderr))
    sock = installed.work / "broker.sock"
    log = (installed.work / "broker.log").open("w")
    broker = subprocess.Popen(
        [installed.bin("jupyter"), "vgpu", "broker", "--socket", str(sock), "--ledger", str(installed.work / "node.sqlite")],
        cwd=installed.work, env=installed.env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _listening(sock):
            assert broker.poll() is None, (installed.work / "broker.log").read_text()
            assert time.monotonic() < deadline, "the broker did not listen within 60 s"
            time.sleep(0.2)
        env = {**installed.env, "JUPYTER_VGPU_BROKER": str(sock)}
        status = installed.run(installed.bin("jupyter"), "vgpu", "status", env=env)
        assert status.returncode == 0, status.stderr
        # status folds its lines to the terminal's width, and cuts a path longer than a line
        assert f"nodebrokerat{sock}" in "".join(status.stdout.split()), status.stdout
        imported = installed.run(installed.bin("python"), "-c", "import jupyter_vgpu.hub; print('ok')")
        assert imported.stdout.strip() == "ok", imported.stderr
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=15)
        log.close()
    _check_commands(installed)
    _check_sliced_kernel(installed)
    _check_server(installed, installed.work / "server-hub")


def _listening(path: Path) -> bool:
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def test_a_plain_kernel_of_the_environment_answers_vgpu(installed: Installed) -> None:
    config = installed.venv / "etc" / "ipython" / "ipython_kernel_config.json"
    assert json.loads(config.read_text()) == {"InteractiveShellApp": {"extra_extensions": ["jupyter_vgpu.kernel.hint"]}}
    result = installed.run(installed.bin("python"), "-c", KERNEL_SCRIPT, "python3", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == "ok", answer  # not "UsageError: Line magic function `%vgpu` not found"
    assert "This kernel has no GPU slice" in answer["text"], answer["text"]
    assert '"Python 3 (1/4 GPU)" in the launcher or the kernel picker' in answer["text"], answer["text"]
