"""dcgm-exporter's HPC job mapping files (``--dcgm-job-mapping-dir``): what each GPU's file holds
(MIG GPU instances included), written only when it changes and never half, emptied rather than
removed, and a folder or file that is not ours handled safely. The exporter process and a real
Prometheus joining dcgm-exporter's figures with our slices: tests/test_grafana.py."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from exporter_process import job_mapping

from jupyter_vgpu.errors import InvalidRequest
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.metrics.jobmap import JobMapping, job_files
from jupyter_vgpu.metrics.node import NodePage
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.units import MiB

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")
A100_MIG = {
    "name": "NVIDIA A100-SXM4-40GB",
    "memory": "40GiB",
    "mig": [{"profile": "2g.20gb", "memory": "19.5GiB"}, {"profile": "1g.10gb", "memory": "9.75GiB"}],
}


def files(folder: Path) -> dict[str, str]:
    """As dcgm-exporter reads the folder. (Run 33: listing every name met the writer's temporary
    file, renamed away before it was opened.)"""
    return job_mapping(folder)


def every_file(folder: Path) -> dict[str, str]:
    """Every name in the folder (where no writer runs)."""
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def test_each_gpus_file_names_its_slices_and_a_mig_slice_its_gpu_instance_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_VGPU_MPS", "off")
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"node": "node-m", "devices": [A100_MIG, {"name": "Simulated GPU", "memory": "16GiB"}]}))
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(str(spec)), context_allowance=300 * MiB, poll_interval=0.05)
    try:
        mig = ledger.reserve(SliceRequest.parse(memory="1GiB", gpu="0"), Holder("command", "small"))
        whole = ledger.reserve(SliceRequest.parse(0.25, gpu="1"), Holder("command", "quarter"))
        other = ledger.reserve(SliceRequest.parse(0.25, gpu="1"), Holder("command", "another quarter"))
        snapshot = ledger.inventory.snapshot()
        instances = {d.uuid: d.gpu_instance_id for d in snapshot.gpus[0].mig_devices}
        taken = instances[mig.mig_devices[0]]
        free = next(gi for uuid, gi in instances.items() if uuid != mig.mig_devices[0])
        assert job_files(snapshot, ledger.slices()) == {
            "0": (mig.id,), f"0.{taken}": (mig.id,), f"0.{free}": (), "1": (whole.id, other.id),
        }  # fmt: skip
        assert job_files(snapshot, []) == {"0": (), f"0.{taken}": (), f"0.{free}": (), "1": ()}
    finally:
        ledger.close()


def test_files_change_only_when_their_slices_do_and_are_emptied_never_removed(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "dcgm-job-map"
    mapping = JobMapping(folder)
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o755"  # created, readable by dcgm-exporter
    mapping.write({"0": ("aaaaaaaaaaaa",), "1": ()})
    assert files(folder) == {"0": "aaaaaaaaaaaa\n", "1": ""}
    assert oct((folder / "0").stat().st_mode & 0o777) == "0o644"
    before = {name: (folder / name).stat().st_ino for name in ("0", "1")}
    mapping.write({"0": ("aaaaaaaaaaaa",), "1": ()})  # unchanged: nothing written
    assert {name: (folder / name).stat().st_ino for name in ("0", "1")} == before
    mapping.write({"0": ("aaaaaaaaaaaa", "bbbbbbbbbbbb"), "1": ("bbbbbbbbbbbb",)})
    assert files(folder) == {"0": "aaaaaaaaaaaa\nbbbbbbbbbbbb\n", "1": "bbbbbbbbbbbb\n"}
    assert (folder / "0").stat().st_ino != before["0"]  # a new file renamed over the old: never half written
    mapping.write({"0": ()})  # a file the reading leaves out (a MIG instance gone) is emptied too
    assert files(folder) == {"0": "", "1": ""}
    mapping.write({"0": ("cccccccccccc",), "1": ()})
    mapping.close()
    assert files(folder) == {"0": "", "1": ""}  # the page stopped: no ended slice keeps labelling DCGM's figures


def test_a_new_run_empties_files_an_earlier_one_left_and_its_half_written_ones(tmp_path: Path) -> None:
    folder = tmp_path / "map"
    folder.mkdir(mode=0o755)
    (folder / "3").write_text("old-slice\n")  # a GPU this node no longer has
    (folder / ".jupyter-vgpu-0-1a2b3c4d").write_text("half")
    os.utime(folder / ".jupyter-vgpu-0-1a2b3c4d", (time.time() - 600, time.time() - 600))
    (folder / ".jupyter-vgpu-1-5e6f7a8b").write_text("being written by another exporter now: left")
    (folder / "README").write_text("not a GPU's file: left alone\n")
    mapping = JobMapping(folder)
    mapping.write({"0": ("aaaaaaaaaaaa",)})
    assert every_file(folder) == {
        ".jupyter-vgpu-1-5e6f7a8b": "being written by another exporter now: left", "0": "aaaaaaaaaaaa\n", "3": "",
        "README": "not a GPU's file: left alone\n",
    }  # fmt: skip
    mapping.close()


def test_a_link_in_place_of_a_file_is_replaced_never_followed(tmp_path: Path) -> None:
    folder, target = tmp_path / "map", tmp_path / "elsewhere"
    folder.mkdir(mode=0o755)
    target.write_text("precious\n")
    (folder / "0").symlink_to(target)
    mapping = JobMapping(folder)
    mapping.write({"0": ("aaaaaaaaaaaa",)})
    assert target.read_text() == "precious\n" and not (folder / "0").is_symlink()
    assert (folder / "0").read_text() == "aaaaaaaaaaaa\n"
    mapping.close()


def test_a_folder_in_place_of_a_file_is_said_once_and_the_others_are_written(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "map"
    (folder / "1").mkdir(parents=True)
    os.chmod(folder, 0o755)
    mapping = JobMapping(folder)
    with caplog.at_level(logging.WARNING, logger="jupyter_vgpu.exporter"):
        mapping.write({"0": ("aaaaaaaaaaaa",), "1": ("bbbbbbbbbbbb",)})
        mapping.write({"0": ("aaaaaaaaaaaa",), "1": ("bbbbbbbbbbbb",)})
    assert (folder / "0").read_text() == "aaaaaaaaaaaa\n" and (folder / "1").is_dir()
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"jupyter-vgpu: {folder / '1'} cannot be written (Is a directory); dcgm-exporter's figures of that GPU keep its last job ids."
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["0", "1"]  # no temporary file left behind
    mapping.close()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        ("link", "it is a link; give --dcgm-job-mapping-dir the folder itself"),
        ("file", "it is not a folder; give --dcgm-job-mapping-dir a folder"),
        ("shared", "other users may write to it (mode 777); give --dcgm-job-mapping-dir a folder of uid {uid} that nobody else can write to (mode 755)"),
        ("foreign", "it belongs to uid 65534; give --dcgm-job-mapping-dir a folder of uid {uid} that nobody else can write to (mode 755)"),
    ],
)  # fmt: skip
def test_a_folder_that_is_not_ours_alone_is_one_sentence(tmp_path: Path, make: str, why: str) -> None:
    folder = tmp_path / "map"
    if make == "link":
        (tmp_path / "real").mkdir()
        folder.symlink_to(tmp_path / "real")
    elif make == "file":
        folder.write_text("")
    else:
        folder.mkdir()
        if make == "shared":
            os.chmod(folder, 0o777)
        elif os.geteuid() != 0:
            pytest.skip("giving a folder to another uid needs root")
        else:
            os.chown(folder, 65534, 65534)
    with pytest.raises(InvalidRequest) as raised:
        JobMapping(folder)
    assert str(raised.value) == f"The exporter cannot write dcgm-exporter's job mapping in {folder}: {why.format(uid=os.geteuid())}."


def test_the_exporter_refuses_such_a_folder_before_it_listens(tmp_path: Path, vgpu_env: dict[str, str]) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "map").symlink_to(tmp_path / "real")
    result = subprocess.run(
        [JUPYTER_VGPU, "exporter", "--port", "0", "--dcgm-job-mapping-dir", str(tmp_path / "map")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"jupyter vgpu: The exporter cannot write dcgm-exporter's job mapping in {tmp_path / 'map'}: it is a link; "
        "give --dcgm-job-mapping-dir the folder itself.\n"
    )
    result = subprocess.run([JUPYTER_VGPU, "exporter", "--dcgm-job-mapping-dir", ""], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "jupyter vgpu exporter: error: argument --dcgm-job-mapping-dir: --dcgm-job-mapping-dir '' is not a folder's path"


def test_the_brokers_page_writes_them_from_its_ledger_until_it_stops(tmp_path: Path) -> None:
    """The page the broker serves (``--metrics-dcgm-job-mapping-dir``) is the exporter's: a
    :class:`NodePage` over the broker's ledger, here opened in this process."""
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("2x16GiB@hub-node"), context_allowance=0, poll_interval=0.05)
    folder = tmp_path / "map"
    page = NodePage(
        ledger, address="127.0.0.1", port=0, interval=0.1, name="broker", who="The broker's metrics page", options="--metrics-",
        job_mapping_dir=str(folder),
    )  # fmt: skip
    try:
        page.start()
        deadline = time.monotonic() + 30
        while files(folder) != {"0": "", "1": ""}:
            assert time.monotonic() < deadline, files(folder)
            time.sleep(0.05)
        held = ledger.reserve(SliceRequest.parse(0.25, gpu="1"), Holder("command", "held"))
        while files(folder) != {"0": "", "1": f"{held.id}\n"}:
            assert time.monotonic() < deadline, files(folder)
            time.sleep(0.05)
        with urllib.request.urlopen(page.server.url(), timeout=10) as reply:
            assert f'slice="{held.id}"'.encode() in reply.read()
    finally:
        page.stop()
        ledger.close()
    assert files(folder) == {"0": "", "1": ""}
    with pytest.raises(InvalidRequest, match=r"^The broker's metrics page cannot write .*: it is not a folder; give --metrics-dcgm-job-mapping-dir a folder\.$"):
        NodePage(ledger, address="127.0.0.1", port=0, name="broker", who="The broker's metrics page", options="--metrics-", job_mapping_dir=str(folder / "0"))


def test_a_page_that_cannot_listen_leaves_the_files_as_they_are(tmp_path: Path) -> None:
    """Another exporter may hold the port and write the folder: one that does not start touches neither."""
    folder = tmp_path / "map"
    folder.mkdir(mode=0o755)
    (folder / "0").write_text("aaaaaaaaaaaa\n")
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"), context_allowance=0, poll_interval=0.05)
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with pytest.raises(InvalidRequest, match="another program uses it"):
                NodePage(ledger, address="127.0.0.1", port=taken.getsockname()[1], job_mapping_dir=str(folder))
    finally:
        ledger.close()
    assert files(folder) == {"0": "aaaaaaaaaaaa\n"}
