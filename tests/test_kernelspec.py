"""`jupyter vgpu kernelspec install | list | remove`: sliced kernels that read well in the picker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")


@pytest.fixture
def jupyter_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated data dir holding a `lab-python` source spec with fields worth keeping."""
    data = tmp_path / "data"
    source = data / "kernels" / "lab-python"
    source.mkdir(parents=True)
    (source / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Lab Python (ipykernel)",
                "language": "python",
                "interrupt_mode": "signal",
                "env": {"MY_SETTING": "1"},
                "metadata": {"debugger": True, "supported_encryption": ["curve"]},
            }
        )
    )
    (source / "logo-64x64.png").write_bytes(b"\x89PNG fake logo")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing-else"))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")  # the user's dir before this environment's
    return data


def vgpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JUPYTER_VGPU, "kernelspec", *args], capture_output=True, text=True, timeout=60)


def ours(data: Path) -> set[str]:
    """Kernelspecs in the test's own data dir (the Python environment may hold others)."""
    return {n for n, p in KernelSpecManager().find_kernel_specs().items() if Path(p).is_relative_to(data)}


def spec(data: Path, name: str) -> dict[str, object]:
    return json.loads((data / "kernels" / name / "kernel.json").read_text())


def test_defaults_install_a_quarter_a_half_and_a_whole_gpu_in_one_command(jupyter_dirs: Path) -> None:
    result = vgpu("install", "--defaults", "--user")
    assert result.returncode == 0, result.stderr
    shown = {name: spec(jupyter_dirs, name)["display_name"] for name in ours(jupyter_dirs) if "vgpu" in name}
    assert shown == {
        "python3-vgpu-1-4": "Python 3 (1/4 GPU)",
        "python3-vgpu-1-2": "Python 3 (1/2 GPU)",
        "python3-vgpu-full": "Python 3 (1 GPU)",
    }


def test_a_sliced_spec_keeps_the_source_spec_and_names_the_provisioner(jupyter_dirs: Path) -> None:
    assert vgpu("install", "-p", "1/4", "--source", "lab-python", "--user").returncode == 0
    data = spec(jupyter_dirs, "lab-python-vgpu-1-4")
    source = spec(jupyter_dirs, "lab-python")
    assert data["display_name"] == "Lab Python (1/4 GPU)"
    assert data["argv"] == source["argv"]
    assert data["env"] == {"MY_SETTING": "1"}
    assert data["interrupt_mode"] == "signal"
    metadata = data["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["supported_encryption"] == ["curve"] and metadata["debugger"] is True
    assert metadata["kernel_provisioner"] == {"provisioner_name": "vgpu-provisioner", "config": {"gpu_fraction": 0.25}}
    assert (jupyter_dirs / "kernels" / "lab-python-vgpu-1-4" / "logo-64x64.png").exists()


@pytest.mark.parametrize(
    ("args", "name", "display", "config"),
    [
        (["-m", "8GiB"], "python3-vgpu-8gib", "Python 3 (8 GiB GPU)", {"gpu_memory": "8GiB"}),
        (["-p", "1", "-n", "2"], "python3-vgpu-full-x2", "Python 3 (2 GPUs)", {"gpu_fraction": 1.0, "gpus": 2}),
        (
            ["-p", "0.5", "--logical-devices", "2"],
            "python3-vgpu-1-2-ld2",
            "Python 3 (1/2 GPU, 2 devices)",
            {"gpu_fraction": 0.5, "logical_devices": 2},
        ),
        (
            ["-p", "25%", "--wait", "30"],
            "python3-vgpu-1-4-wait30",  # beside the default "Python 3 (1/4 GPU)", never over it (issue 25)
            "Python 3 (1/4 GPU, waits 30 s)",
            {"gpu_fraction": 0.25, "wait_timeout": 30.0},
        ),
    ],
)
def test_names_and_display_names_read_well_in_the_picker(
    jupyter_dirs: Path, args: list[str], name: str, display: str, config: dict[str, object]
) -> None:
    result = vgpu("install", *args, "--user")
    assert result.returncode == 0, result.stderr
    data = spec(jupyter_dirs, name)
    assert data["display_name"] == display
    assert data["metadata"]["kernel_provisioner"]["config"] == config  # type: ignore[index]


def test_slurm_installs_a_kernel_started_as_a_slurm_job_with_the_sites_options(jupyter_dirs: Path) -> None:
    result = vgpu("install", "-p", "1/4", "--slurm", "--slurm-arg=--partition=gpu", "--slurm-arg=--time=8:00:00", "--source", "lab-python", "--user")
    assert result.returncode == 0, result.stderr
    installed = spec(jupyter_dirs, "lab-python-vgpu-1-4-slurm")
    assert installed["display_name"] == "Lab Python (1/4 GPU, Slurm)"
    assert installed["metadata"]["kernel_provisioner"]["config"] == {  # type: ignore[index]
        "gpu_fraction": 0.25, "launcher": "slurm", "slurm": {"args": ["--partition=gpu", "--time=8:00:00"]},
    }  # fmt: skip


def test_slurm_restarts_sets_how_many_new_jobs_a_kernel_whose_job_ended_gets(jupyter_dirs: Path) -> None:
    result = vgpu("install", "-p", "1/4", "--slurm", "--slurm-restarts", "2", "--source", "lab-python", "--user")
    assert result.returncode == 0, result.stderr
    config = spec(jupyter_dirs, "lab-python-vgpu-1-4-slurm")["metadata"]["kernel_provisioner"]["config"]  # type: ignore[index]
    assert config == {"gpu_fraction": 0.25, "launcher": "slurm", "slurm": {"restarts": 2}}
    from jupyter_vgpu.launch.launchers import launcher_named
    from jupyter_vgpu.provisioner import VGPUProvisioner

    made = VGPUProvisioner(**config)  # as jupyter_client makes it from the kernelspec
    assert launcher_named("slurm").settings(made).count("restarts") == 2


def test_a_slurm_kernelspec_written_before_its_settings_had_their_own_key_still_starts_the_same(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 47: kernelspecs said ``slurm_args`` and ``slurm_restarts`` at the top of their
    config, and the admin ``c.VGPUProvisioner.slurm_gpu_memory``; each is still the launcher's."""
    from traitlets.config import Config

    from jupyter_vgpu.launch.launchers import LauncherSettings, launcher_named
    from jupyter_vgpu.provisioner import VGPUProvisioner

    config = Config()
    config.VGPUProvisioner.slurm_gpu_memory = "16GiB"
    old = VGPUProvisioner(config=config, launcher="slurm", gpu_fraction=0.25, slurm_args=["--partition=gpu"], slurm_restarts=1)
    new = VGPUProvisioner(config=config, launcher="slurm", gpu_fraction=0.25, slurm={"args": ["--partition=gpu"], "restarts": 1})
    said = LauncherSettings(("--partition=gpu",), {"restarts": 1}, {"gpu_memory": 16 << 30})
    assert launcher_named("slurm").settings(old) == launcher_named("slurm").settings(new) == said
    assert "not recognized" not in caplog.text  # the old admin option is the launcher's, not an unknown one


def test_prefix_installs_under_prefix(jupyter_dirs: Path, tmp_path: Path) -> None:
    result = vgpu("install", "-p", "1/2", "--prefix", str(tmp_path / "env"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "env" / "share" / "jupyter" / "kernels" / "python3-vgpu-1-2" / "kernel.json").exists()


def test_list_shows_only_sliced_specs_and_remove_takes_them_away(jupyter_dirs: Path) -> None:
    vgpu("install", "--defaults", "--user")
    listing = vgpu("list").stdout
    assert "python3-vgpu-1-4" in listing and "Python 3 (1/4 GPU)" in listing
    assert "lab-python" not in listing
    data = json.loads(vgpu("list", "--json").stdout)["kernelspecs"]
    assert {"python3-vgpu-1-4", "python3-vgpu-1-2", "python3-vgpu-full"} <= set(data)
    assert ours(jupyter_dirs) == {"lab-python", "python3-vgpu-1-4", "python3-vgpu-1-2", "python3-vgpu-full"}
    removed = vgpu("remove", "python3-vgpu-1-2")
    assert removed.returncode == 0 and "Removed kernelspec python3-vgpu-1-2" in removed.stdout
    assert vgpu("remove", "python3-vgpu-1-4", "python3-vgpu-full").returncode == 0
    assert ours(jupyter_dirs) == {"lab-python"}


def test_list_keeps_long_names_out_of_the_path_column(jupyter_dirs: Path) -> None:
    long_name = "python3-vgpu-a-kernelspec-name-much-longer-than-the-others"
    long_display = "Python 3 (1/4 GPU, up to 1/2, waits 300 s, and a label as long as a column)"
    assert vgpu("install", "-p", "1/4", "--user").returncode == 0
    assert vgpu("install", "-p", "1/4", "--name", long_name, "--display-name", long_display, "--user").returncode == 0
    said = vgpu("list").stdout.splitlines()
    assert said[0] == "Sliced kernelspecs:"
    table = said[1:4]
    assert [re.split(r" {2,}", line.strip()) for line in table] == [
        ["NAME", "DISPLAY NAME", "PATH"],
        ["python3-vgpu-1-4", "Python 3 (1/4 GPU)", str(jupyter_dirs / "kernels" / "python3-vgpu-1-4")],
        [long_name, long_display, str(jupyter_dirs / "kernels" / long_name)],
    ]  # each cell two spaces or more from the next
    starts = [[m.start() for m in re.finditer(r"(?<=  )\S", line)] for line in table]
    assert starts[0] == starts[1] == starts[2], said  # and the columns line up


def test_list_names_the_launchers_installed_and_why_one_could_not_be_loaded(
    jupyter_dirs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "site" / "vgpu_broken-0.1.dist-info"  # an installed package whose module is gone
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vgpu-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[jupyter_vgpu.launchers]\nbroken = vgpu_gone:Launcher\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(tmp_path / "site"), os.environ.get("PYTHONPATH")))))
    listed = vgpu("list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    said = listed.stdout.splitlines()
    at = said.index("Launchers (where a kernelspec's kernels run; docs/launchers.md):")
    rows = [re.split(r" {2,}", line.strip()) for line in said[at + 1 :]]
    assert rows[0] == ["NAME", "INSTALL WITH", "PACKAGE", "ITS KERNELS RUN AS"]
    assert rows[1] == ["local", "(default)", "jupyter-vgpu", "a process on this host"]
    assert rows[2][:3] == ["slurm", "--slurm", "jupyter-vgpu"] and rows[2][3].startswith("a Slurm job")
    assert rows[3] == ["broken", "-", "vgpu-broken", (
        "launcher 'broken' could not be loaded (ModuleNotFoundError: No module named 'vgpu_gone'); "
        "mend or uninstall the package that registers it."
    )]
    launchers = json.loads(vgpu("list", "--json").stdout)["launchers"]
    assert [(f["name"], f["package"], f["error"] is None) for f in launchers] == [
        ("local", "jupyter-vgpu", True), ("slurm", "jupyter-vgpu", True), ("broken", "vgpu-broken", False),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["install", "--user"], "Say how much GPU"),
        (["install", "-p", "2", "--user"], "-p/--fraction '2' is outside (0, 1]"),
        (["install", "-m", "12XB", "--user"], "-m/--memory '12XB' is not a size"),
        (["install", "-p", "1/4", "--source", "nope", "--user"], "No kernelspec named 'nope' to copy; installed: lab-python"),
        (["install", "-p", "1/4", "--name", "bad name", "--user"], "may use only letters"),
        (["remove", "python3"], "'python3' is not a sliced kernelspec"),
        (["remove"], "Name the kernelspecs to remove"),
        (["install", "-p", "1/4", "--slurm-arg=--partition=gpu", "--user"], "--slurm-arg is for kernels started as Slurm jobs; add --slurm."),
        (["install", "-p", "1/4", "--slurm", "--slurm-arg=--gres=gpu:1", "--user"], "slurm_args '--gres=gpu:1' asks Slurm for GPUs"),
        (["install", "-p", "1/4", "--slurm-restarts", "1", "--user"], "--slurm-restarts is for kernels started as Slurm jobs; add --slurm."),
        (["install", "-p", "1/4", "--slurm", "--slurm-restarts", "-1", "--user"], "--slurm-restarts '-1' is not a whole number of times; use 0 or more (2)."),
    ],
)
def test_mistakes_get_one_sentence(jupyter_dirs: Path, args: list[str], message: str) -> None:
    result = vgpu(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert ours(jupyter_dirs) == {"lab-python"}


@pytest.mark.parametrize("asked", ["1.25GiB", "5GB", "1536MiB", "3.3GiB", "1.1GB"])
def test_a_kernelspec_stores_exactly_the_memory_asked(jupyter_dirs: Path, asked: str) -> None:
    # Issue 20: `-m 1.25GiB` stored "1.2GiB" (51 MiB less), `-m 5GB` stored "4.7GiB" (47 MB more).
    from jupyter_vgpu.provisioner import VGPUProvisioner
    from jupyter_vgpu.units import parse_bytes

    result = vgpu("install", "-m", asked, "--name", "exact", "--user")
    assert result.returncode == 0, result.stderr
    config = spec(jupyter_dirs, "exact")["metadata"]["kernel_provisioner"]["config"]  # type: ignore[index]
    assert parse_bytes(config["gpu_memory"]) == parse_bytes(asked), config
    provisioner = VGPUProvisioner(kernel_id="exact", **config)  # what a kernel start reads
    assert provisioner.request().memory == parse_bytes(asked)


WAITS_ACCEPTED = ["0", "30", "2.5", "31622400"]
WAITS_REFUSED = ["1e8", "-1", "nan", "inf", "soon", "٣", "31622401"]


@pytest.mark.parametrize("seconds", WAITS_ACCEPTED + WAITS_REFUSED)
def test_a_wait_is_accepted_or_refused_alike_by_every_entry_point(
    jupyter_dirs: Path, vgpu_env: dict[str, str], tmp_path: Path, seconds: str
) -> None:
    # Issue 20: `kernelspec install --wait 1e8` installed a kernelspec whose kernel could never
    # start ("wait_timeout 100000000.0 is not allowed; use a number of seconds, 0 or more").
    from jupyter_vgpu.errors import InvalidConfig
    from jupyter_vgpu.hub.policy import Limits
    from jupyter_vgpu.provisioner import InvalidKernelConfig, VGPUProvisioner

    accepted = seconds in WAITS_ACCEPTED
    install = vgpu("install", "-p", "1/4", "--wait", seconds, "--name", "waits", "--user")
    run = subprocess.run([JUPYTER_VGPU, "run", "-q", "-p", "1/8", "--wait", seconds, "--", "true"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    outcomes = {"kernelspec install": install.returncode == 0, "run": run.returncode == 0}
    for name, value in (("kernelspec", seconds), ("kernelspec (number)", _number(seconds))):
        if value is None:
            continue
        try:
            VGPUProvisioner(kernel_id="w", gpu_fraction=0.25, wait_timeout=value).request()
            outcomes[name] = True
        except InvalidKernelConfig as error:
            outcomes[name] = False
            assert "from 0 to 31622400 (366 days)" in str(error), error
    number = _number(seconds)
    if number is not None:
        try:
            Limits.parse({"max_wait": number}, where="policy.default")
            outcomes["policy max_wait"] = True
        except InvalidConfig as error:
            outcomes["policy max_wait"] = False
            assert "from 0 to 31622400 (366 days)" in str(error), error
    assert set(outcomes.values()) == {accepted}, outcomes
    for refused in (install, run):
        if not accepted:
            assert "from 0 to 31622400 (366 days)" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    if accepted:  # and what the kernelspec stored starts a kernel: the provisioner reads it back
        config = spec(jupyter_dirs, "waits")["metadata"]["kernel_provisioner"]["config"]  # type: ignore[index]
        VGPUProvisioner(kernel_id="w", **config).request()
    else:
        assert "waits" not in ours(jupyter_dirs)


def _number(text: str) -> float | None:
    try:
        return float(text) if text.isascii() else None
    except ValueError:
        return None


def test_an_existing_kernelspec_is_never_replaced_without_saying_so(jupyter_dirs: Path) -> None:
    # Issue 25: `install -p 1/2 --wait 60 --name python3-vgpu-1-2` silently replaced the default
    # "Python 3 (1/2 GPU)", and ./scripts/lab's `install --defaults` silently undid it at its next start.
    assert vgpu("install", "--defaults", "--user").returncode == 0
    changed = vgpu("install", "-p", "1/2", "--wait", "60", "--name", "python3-vgpu-1-2", "--user")
    assert changed.returncode == 2 and "A kernelspec named python3-vgpu-1-2 is already installed" in changed.stderr
    assert "add --replace to replace it, or --name to install beside it" in changed.stderr
    config = lambda: spec(jupyter_dirs, "python3-vgpu-1-2")["metadata"]["kernel_provisioner"]["config"]  # type: ignore[index]  # noqa: E731
    assert config() == {"gpu_fraction": 0.5}  # untouched
    replaced = vgpu("install", "-p", "1/2", "--wait", "60", "--name", "python3-vgpu-1-2", "--user", "--replace")
    assert replaced.returncode == 0 and replaced.stdout.startswith("Replaced kernelspec python3-vgpu-1-2"), replaced.stdout
    assert config() == {"gpu_fraction": 0.5, "wait_timeout": 60.0}
    again = vgpu("install", "--defaults", "--user")  # what ./scripts/lab runs at every start
    assert again.returncode == 0 and "Kept your kernelspec python3-vgpu-1-2" in again.stdout, again.stdout
    assert "is already installed" in again.stdout  # the two it did not change
    assert config() == {"gpu_fraction": 0.5, "wait_timeout": 60.0}
