"""A Slurm node's exporter finds every job's ledger on the node (jupyter_vgpu/launch/slurm/jobs.py),
checked here with two other uids than root's: ``nobody``'s job, and ``daemon`` as the other user
who plants a folder where nobody's job would look first and a ledger that speaks for him. The
jobs' processes and ledgers are real; what ``scontrol listpids`` would answer is given (the Slurm
test cluster runs the whole path: tests/slurm/test_node_exporter.py)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.launch.slurm.jobs import SlurmJobs, acting_as, jobs_on_node
from jupyter_vgpu.ledger.sqlite import SQLiteLedger
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.records import Actor

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to act as two other uids")

NOBODY, DAEMON = pwd.getpwnam("nobody"), pwd.getpwnam("daemon")
JOB = "4242"


class GivenJobs(SlurmJobs):
    """The node's jobs as ``scontrol listpids`` would list them."""

    def __init__(self, jobs: dict[str, list[int]]) -> None:
        super().__init__("node1")
        self.given = jobs

    def jobs(self) -> dict[str, list[int]]:
        return self.given


@pytest.fixture
def job() -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A process of nobody's Slurm job on this node, with the job's environment, and its TMPDIR: a
    folder like a node's /tmp (pytest's own are root's alone, so nobody could not reach one)."""
    with tempfile.TemporaryDirectory(prefix="vgpu-slurmjobs-") as folder:
        tmp = Path(folder)
        tmp.chmod(0o1777)
        yield from _job(tmp)


def _job(tmp: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp), "SLURM_JOB_ID": JOB, "SLURM_CLUSTER_NAME": "vgputest"}
    process = subprocess.Popen(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups", "sleep", "600"], env=env)
    try:
        yield process, tmp
    finally:
        process.kill()
        process.wait()


def ledger_of(folder: Path, owner: pwd.struct_passwd, *books: tuple[pwd.struct_passwd, int, float]) -> None:
    """A ledger in ``folder`` (made 0700, ``owner``'s), with a slice for each (user, holder pid, fraction)."""
    folder.mkdir(mode=0o700)
    ledger = SQLiteLedger(folder / "ledger.sqlite", Inventory("2x16GiB"))
    try:
        for user, pid, fraction in books:
            as_user = ledger.acting_for(Actor(user.pw_name, user.pw_uid))
            as_user.reserve(SliceRequest.parse(fraction=fraction, gpu=0), Holder("command", "sleep 600", pid=pid))
    finally:
        ledger.close()
    for path in [folder, *folder.iterdir()]:
        os.chown(path, owner.pw_uid, owner.pw_gid)


def test_each_jobs_ledgers_are_read_as_its_user_and_nobody_else_can_speak_for_it(job: tuple[subprocess.Popen[bytes], Path]) -> None:
    process, tmp = job
    # daemon took the name nobody's job would use first: the job's processes use the next one
    # (jobfolder.user_base), and so does the exporter; daemon's folder is never read.
    planted = tmp / f"jupyter-vgpu-{NOBODY.pw_uid}"
    planted.mkdir(mode=0o700)
    ledger_of(planted / f"job-vgputest-{JOB}", DAEMON, (NOBODY, process.pid, 0.5))
    os.chown(planted, DAEMON.pw_uid, DAEMON.pw_gid)
    base = tmp / f"jupyter-vgpu-{NOBODY.pw_uid}.1"
    base.mkdir(mode=0o700)
    os.chown(base, NOBODY.pw_uid, NOBODY.pw_gid)
    # nobody's job's ledger: his own slice, and one whose record says it is daemon's
    ledger_of(base / f"job-vgputest-{JOB}", NOBODY, (NOBODY, process.pid, 0.25), (DAEMON, process.pid, 0.125))
    # one of the job's kernels, its ledger in a folder of its own start
    ledger_of(base / f"kernel-vgputest-{JOB}-abc123", NOBODY, (NOBODY, process.pid, 0.0625))
    # a link in nobody's folder, to a ledger elsewhere: not his folder, never followed
    ledger_of(tmp / "elsewhere", NOBODY, (NOBODY, process.pid, 0.75))
    (base / f"kernel-vgputest-{JOB}-link").symlink_to(tmp / "elsewhere")
    before = {path: path.stat().st_uid for path in base.rglob("*")}

    seen = GivenJobs({JOB: [process.pid]})()

    assert sorted((s.owner, s.uid, s.memory) for s in seen) == [
        ("nobody", NOBODY.pw_uid, (1024**3,)),  # the kernel's 1/16 of 16 GiB
        ("nobody", NOBODY.pw_uid, (4 * 1024**3,)),  # the job's 1/4
    ]
    # Read as nobody: whatever SQLite left in his folders is his, never root's.
    after = {path: path.stat().st_uid for path in base.rglob("*") if not path.is_symlink()}
    assert set(after.values()) == {NOBODY.pw_uid}, after
    assert set(before) <= set(after) | {base / f"kernel-vgputest-{JOB}-link"}
    assert os.geteuid() == 0 and os.getegid() == 0  # root again once read


def test_a_job_that_ended_or_names_no_folder_shows_nothing(job: tuple[subprocess.Popen[bytes], Path]) -> None:
    process, tmp = job
    assert GivenJobs({JOB: [process.pid]})() == []  # no folder yet: none is made
    assert not list(tmp.iterdir())
    assert GivenJobs({JOB: [2**22 + 12345]})() == []  # its processes have gone


def test_acting_as_another_user_and_back() -> None:
    with acting_as(NOBODY.pw_uid, NOBODY.pw_gid):
        assert (os.geteuid(), os.getegid(), os.getgroups()) == (NOBODY.pw_uid, NOBODY.pw_gid, [NOBODY.pw_gid])
        with pytest.raises(PermissionError):
            open("/etc/shadow").close()
    assert (os.geteuid(), os.getegid()) == (0, 0)


def test_a_node_without_slurm_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(Exception) as raised:
        jobs_on_node("node1")
    assert str(raised.value) == "The Slurm jobs on node1 cannot be listed: scontrol is not installed here (slurm-client)."
