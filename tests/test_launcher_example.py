"""The worked example of docs/launchers.md ("Writing one") runs as written: its files and commands
are read from the page, never copied here. It is installed the way the faraway fixture is
(tests/test_launcher_contract.py): what ``pip install .`` leaves in site-packages, without the
build (a module beside a ``<name>-<version>.dist-info`` whose ``entry_points.txt`` is the
pyproject's ``[project.entry-points]`` table, which is what a build backend writes there), on
PYTHONPATH, where importlib.metadata finds the entry point as it finds an installed package's."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from jupyter_process import isolated_env, start_jupyter
from kernels import Kernel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency before 3.11
    import tomli as tomllib

DOC = Path(__file__).parents[1] / "docs" / "launchers.md"
JUPYTER_VGPU = str(Path(sys.executable).with_name("jupyter-vgpu"))


def example_files() -> dict[str, str]:
    """Each code block of the page that follows a line naming its file in backquotes (`x.py`:)."""
    found = re.finditer(r"^`(?P<file>[\w.]+)`[^\n]*\n+```\w*\n(?P<code>.*?)^```", DOC.read_text(), re.M | re.S)
    return {m["file"]: m["code"] for m in found}


def example_commands() -> list[str]:
    """The page's shell block that installs the example, line by line."""
    (block,) = [b for b in re.findall(r"^```sh\n(.*?)^```", DOC.read_text(), re.M | re.S) if "pip install ." in b]
    return block.strip().splitlines()


def install_like_pip(files: dict[str, str], site: Path) -> str:
    """What ``pip install .`` of ``files`` leaves in ``site``: its modules and its dist-info with
    the entry points; returns the package's name."""
    project = tomllib.loads(files["pyproject.toml"])
    meta = project["project"]
    site.mkdir(parents=True)
    for module in project["tool"]["setuptools"]["py-modules"]:
        (site / f"{module}.py").write_text(files[f"{module}.py"])
    info = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    groups = meta["entry-points"]
    (info / "entry_points.txt").write_text(
        "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) for group, entries in groups.items())
    )
    return str(meta["name"])


def jupyter_vgpu(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A command of the page's, as written (``jupyter vgpu ...``), by this environment's jupyter-vgpu."""
    words = shlex.split(command)
    assert words[:2] == ["jupyter", "vgpu"], command
    return subprocess.run([JUPYTER_VGPU, *words[2:]], env=env, capture_output=True, text=True, timeout=60)


def test_the_worked_example_lists_installs_and_starts_kernels_that_get_its_settings(tmp_path: Path) -> None:
    files = example_files()
    assert set(files) == {"vgpu_threads.py", "pyproject.toml"}
    package = install_like_pip(files, tmp_path / "site")
    env = isolated_env(
        tmp_path, JUPYTER_VGPU_SIMULATE="1x16GiB", PYTHONPATH=os.pathsep.join(filter(None, (str(tmp_path / "site"), os.environ.get("PYTHONPATH")))),
    )  # fmt: skip
    for unset in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_PROC_BIND"):
        env.pop(unset, None)  # what the kernel has of these, the launcher gave it
    pip, listing, install = example_commands()
    assert pip == "pip install ."

    listed = jupyter_vgpu(listing, env)
    assert listed.returncode == 0, listed.stderr
    rows = [re.split(r"\s{2,}", line.strip()) for line in listed.stdout.splitlines()]
    assert ["threads", "--threads", package, "a process on this host with its CPU threads capped"] in rows, listed.stdout
    shown = json.loads(jupyter_vgpu(f"{listing} --json", env).stdout)["launchers"]
    assert {"name": "threads", "description": "a process on this host with its CPU threads capped", "option": "--threads",
            "package": "vgpu-threads", "error": None} in shown  # fmt: skip

    installed = jupyter_vgpu(install, env)
    assert installed.returncode == 0, installed.stderr
    assert "Installed kernelspec python3-vgpu-1-4-threads ('Python 3 (1/4 GPU, threads capped)')" in installed.stdout
    spec = json.loads((Path(env["JUPYTER_DATA_DIR"]) / "kernels" / "python3-vgpu-1-4-threads" / "kernel.json").read_text())
    assert spec["metadata"]["kernel_provisioner"]["config"] == {
        "gpu_fraction": 0.25, "launcher": "threads", "threads": {"args": ["OMP_PROC_BIND=close"], "cap": 2},
    }  # fmt: skip
    bad = jupyter_vgpu("jupyter vgpu kernelspec install --user -p 1/2 --threads --threads-arg CUDA_VISIBLE_DEVICES=0", env)
    assert bad.returncode != 0 and bad.stderr == (
        "jupyter vgpu: threads option 'CUDA_VISIBLE_DEVICES=0' is not a thread setting; use NAME=VALUE, such as OMP_PROC_BIND=close.\n"
    )
    lonely = jupyter_vgpu("jupyter vgpu kernelspec install --user -p 1/2 --threads-cap 2", env)
    assert lonely.returncode != 0 and lonely.stderr == (
        "jupyter vgpu: --threads-cap is for kernels started as a process on this host with its CPU threads capped; add --threads.\n"
    )

    server = start_jupyter(tmp_path, env=env)
    try:
        status, kernel = server.api("POST", "api/kernels", {"name": "python3-vgpu-1-4-threads"}, timeout=90)
        assert status == 201, kernel
        driver = Kernel.attach(str(Path(env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{kernel['id']}.json"))
        try:
            seen = driver.eval("{k: __import__('os').environ.get(k) for k in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OMP_PROC_BIND', 'JUPYTER_VGPU_FRACTION')}")
        finally:
            driver.client.stop_channels()
        assert seen == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OMP_PROC_BIND": "close", "JUPYTER_VGPU_FRACTION": "0.25"}
        assert server.api("DELETE", f"api/kernels/{kernel['id']}", timeout=60)[0] == 204
    finally:
        server.stop(signal.SIGTERM, timeout=20) or server.stop(signal.SIGKILL)
