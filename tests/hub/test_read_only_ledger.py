"""A user's ledger in a folder they can only read (a home mounted read-only, a folder an admin
locked): ``jupyter vgpu status`` shows its slices, read with SQLite alone; nothing can be
reserved there, and where there is no ledger, one sentence says why none can be made. Run as a
system user: root ignores folder permissions."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import JUPYTER_VGPU, PYTHON, User, Users, world_dir

pytestmark = pytest.mark.hub

#: Run as the user: book a 1/4 GPU for process argv[1] (one of theirs), then close the ledger.
BOOK_FOR = """
import sys
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.ledger import open_ledger
ledger = open_ledger()
print(ledger.reserve(SliceRequest.parse("1/4"), Holder("command", "sleep 120", int(sys.argv[1]))).id)
ledger.close()
"""


@pytest.fixture
def locked_folder(system_users: Users) -> Iterator[Path]:
    """alice's ledger folder (0700, hers), made read-only (0500) by the test."""
    top = world_dir("vgpu-ro-")
    folder = top / "vgpu"
    folder.mkdir()
    os.chown(folder, system_users.alice.uid, system_users.alice.gid)
    folder.chmod(0o700)
    try:
        yield folder
    finally:
        folder.chmod(0o700)
        shutil.rmtree(top, ignore_errors=True)


def vgpu(user: User, ledger: Path, *args: str):  # type: ignore[no-untyped-def]
    return user.run(JUPYTER_VGPU, *args, env=user.env(JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=str(ledger)))


def test_status_shows_the_slices_of_a_ledger_in_a_folder_the_user_can_only_read(system_users: Users, locked_folder: Path) -> None:
    alice = system_users.alice
    ledger = locked_folder / "ledger.sqlite"
    env = alice.env(JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=str(ledger))
    sleeper = alice.popen("sleep", "120")
    try:
        booked = alice.run(PYTHON, "-c", BOOK_FOR, str(sleeper.pid), env=env)
        assert booked.returncode == 0, booked.stderr
        slice_id = booked.stdout.strip()
        assert not Path(f"{ledger}-wal").exists()  # nobody has it open: the file alone holds the book
        locked_folder.chmod(0o500)
        shown = vgpu(alice, ledger, "status")
        assert shown.returncode == 0, shown.stderr
        flat = " ".join(shown.stdout.split())  # status folds its lines to the terminal's width
        assert f"slices kept by: ledger {ledger} (read-only here: its folder is not yours to write)" in flat
        assert slice_id in shown.stdout and "sleep 120" in shown.stdout
        data = vgpu(alice, ledger, "status", "--json")
        assert data.returncode == 0, data.stderr
        parsed = json.loads(data.stdout)
        assert parsed["read_only"] is True and [s["id"] for s in parsed["slices"]] == [slice_id]
        refused = vgpu(alice, ledger, "run", "-p", "1/4", "--", "true")
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert refused.stderr == (
            f"jupyter vgpu: The ledger {ledger} is in a folder you can only read ({locked_folder}): `jupyter vgpu "
            "status` shows its slices, but nothing can be reserved or released there. Point JUPYTER_VGPU_LEDGER (or "
            "c.VGPU.ledger_path) at a file in a folder you can write to.\n"
        )
        assert sorted(p.name for p in locked_folder.iterdir()) == ["ledger.sqlite", "ledger.sqlite.lock"]  # nothing made
    finally:
        sleeper.kill()
        sleeper.wait()


def test_where_no_ledger_exists_in_a_read_only_folder_status_says_so_in_one_sentence(
    system_users: Users, locked_folder: Path
) -> None:
    locked_folder.chmod(0o500)
    ledger = locked_folder / "ledger.sqlite"
    shown = vgpu(system_users.alice, ledger, "status")
    assert shown.returncode != 0
    assert shown.stderr == (
        f"jupyter vgpu: There is no ledger at {ledger}, and none can be made: its folder {locked_folder} is read-only "
        "for you. Point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a file in a folder you can write to.\n"
    )
