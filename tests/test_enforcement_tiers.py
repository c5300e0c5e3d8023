"""Every registered enforcement tier keeps the plug-in contract (jupyter_vgpu/enforcement/__init__.py
says how to add one): one registry, strongest first, each detecting itself, giving its variables and
saying what it does in the vocabulary every view shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyter_vgpu.enforcement import TIERS, Enforcement, Tier, by_tier, offered_by, tier_of
from jupyter_vgpu.slices.environment import VARIABLES


@dataclass(frozen=True)
class GPU:
    mps: bool = False
    mig_mode: bool | None = False


def test_every_stored_tier_has_exactly_one_plug_in_and_the_weakest_applies_everywhere() -> None:
    assert sorted(t.tier.value for t in TIERS) == sorted(t.value for t in Tier)
    assert all(by_tier(t.tier) is t for t in TIERS)
    assert TIERS[-1].applies([GPU()], 0) and not TIERS[-1].hard  # the fallback: cooperative


@pytest.mark.parametrize("tier", TIERS, ids=lambda t: t.tier.value)
def test_each_tier_describes_itself_and_sets_only_its_declared_variables(tier: Enforcement) -> None:
    assert tier.describe() and tier.describe(("1g.10gb",)) and tier.share_note(0.25) and tier.offered()
    assert tier.tier.describe() == tier.describe()  # the stored value says it through its plug-in
    env = tier.environment((4 << 30, 4 << 30), 0.25)
    assert all(isinstance(v, str) for v in env.values()) and set(env) <= set(tier.variables) | tier.set_here(env)
    assert set(tier.variables) <= set(VARIABLES), "a slice would inherit a stale value of these"
    assert (tier.inside(("GPU-x",), 4 << 30, env) is not None) == tier.hard  # %vgpu says how hardware holds it


def test_placement_gets_the_strongest_tier_that_applies() -> None:
    assert tier_of([GPU(), GPU()], 0) is Tier.COOPERATIVE
    assert tier_of([GPU(mps=True), GPU()], 0) is Tier.COOPERATIVE  # MPS on every GPU of the slice, or none
    assert tier_of([GPU(mps=True), GPU(mps=True)], 0) is Tier.MPS
    assert tier_of([GPU(mig_mode=True)], 1) is Tier.MIG
    assert offered_by(GPU(mig_mode=True)) == "hard (MIG)" and offered_by(GPU(mps=True)) == "hard (MPS)"
    assert by_tier(Tier.MPS).environment((4 << 30,), 0.25) == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }


def test_the_admin_chooses_which_tiers_slices_may_get(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One place decides (MIG > HAMi-core > MPS > cooperative); c.VGPU.tiers / JUPYTER_VGPU_TIERS
    keeps some out, and a name that is no tier is one sentence, nothing reserved."""
    from jupyter_vgpu.errors import InvalidConfig

    monkeypatch.setenv("JUPYTER_VGPU_TIERS", "cooperative")
    assert tier_of([GPU(mps=True)], 0) is Tier.COOPERATIVE
    assert offered_by(GPU(mps=True)) == "cooperative"
    monkeypatch.setenv("JUPYTER_VGPU_TIERS", "mig, mps")
    assert tier_of([GPU(mps=True)], 0) is Tier.MPS
    assert tier_of([GPU(mig_mode=True)], 1) is Tier.MIG
    monkeypatch.setenv("JUPYTER_VGPU_TIERS", "mps,turbo")
    with pytest.raises(InvalidConfig, match=r"^JUPYTER_VGPU_TIERS / c.VGPU.tiers names 'turbo', which is no tier; use some of: mig, mps-partition, hami-core, mps, cooperative\.$"):
        tier_of([GPU()], 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU_")}
    env.update(JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=str(tmp_path / "ledger.sqlite"), JUPYTER_VGPU_TIERS="turbo")
    run = subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/4", "--", "true"], env=env, capture_output=True, text=True)
    assert run.returncode == 1 and "names 'turbo', which is no tier" in run.stderr and "Traceback" not in run.stderr
    del env["JUPYTER_VGPU_TIERS"]
    status = subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "status", "--json"], env=env, capture_output=True, text=True)
    assert json.loads(status.stdout)["slices"] == []


def test_hami_cores_library_is_read_again_only_when_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Placement and every view (the sidebar, every few seconds) ask whether the library is usable:
    the file is read once, and again when the admin replaces or fixes it."""
    from jupyter_vgpu.enforcement import hamicore

    reads: list[str] = []
    read = hamicore._read_problem
    monkeypatch.setattr(hamicore, "_read_problem", lambda path: reads.append(path) or read(path))
    library = tmp_path / "libvgpu.so"
    library.write_bytes(b"not a library")
    for _ in range(5):
        assert "is not a shared library" in (hamicore.library_problem(str(library)) or "")
    assert len(reads) == 1
    from test_hami_core import a_shared_library  # type: ignore[import-not-found]

    library.write_bytes(Path(a_shared_library()).read_bytes())  # fixed in place: a new size and time
    assert hamicore.library_problem(str(library)) is None and len(reads) == 2
    library.unlink()  # gone: said every time, never remembered as usable
    assert "does not exist" in (hamicore.library_problem(str(library)) or "")
    assert "does not exist" in (hamicore.library_problem(str(library)) or "") and len(reads) == 4


def test_framework_fractions_are_of_the_memory_cuda_reports_in_the_slices_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HAMi-core makes CUDA report the slice's limit as the device's memory (FACTS.md: its
    cuMemGetInfo reports the limit), so JAX's fraction is of the slice there, not of the card: a
    fraction of the card would give JAX a quarter of its limit in a 1/4 slice."""
    from test_hami_core import a_shared_library  # type: ignore[import-not-found]

    from jupyter_vgpu.gpus import Inventory
    from jupyter_vgpu.ledger import SQLiteLedger
    from jupyter_vgpu.slices import Holder, SliceRequest
    from jupyter_vgpu.slices.environment import slice_environment

    monkeypatch.delenv("JUPYTER_VGPU_TIERS", raising=False)
    ledger = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory("1x16GiB"), context_allowance=512 << 20)

    def fraction() -> tuple[Tier, str, str]:
        held = ledger.reserve(SliceRequest.parse(0.25), Holder("command", "test"))
        env = slice_environment(held, ledger_path=str(ledger.path))
        ledger.release(held.id)
        return held.tier, env["JUPYTER_VGPU_MEMORY_FRACTION"], env["XLA_PYTHON_CLIENT_MEM_FRACTION"]

    monkeypatch.delenv("JUPYTER_VGPU_HAMI_CORE", raising=False)
    assert fraction() == (Tier.COOPERATIVE, "0.218", "0.218")  # 3.5 GiB of the 16 GiB card
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", a_shared_library())
    assert fraction() == (Tier.HAMI_CORE, "0.875", "0.875")  # 3.5 GiB of the 4 GiB CUDA reports


class Recording(TIERS[-1].__class__):  # type: ignore[misc]
    """The cooperative tier with a life: it records what the ledger tells it and has a hold to join."""

    enters = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.refuse_resize = False

    def granted(self, slice_, where):  # type: ignore[no-untyped-def]
        self.calls.append(("granted", slice_.id))

    def resized(self, slice_, where):  # type: ignore[no-untyped-def]
        self.calls.append(("resized", slice_.memory))
        if self.refuse_resize:
            from jupyter_vgpu.errors import SliceUnavailable

            raise SliceUnavailable("the hold cannot grow")

    def ended(self, slice_, where):  # type: ignore[no-untyped-def]
        self.calls.append(("ended", slice_.id))

    def sweep(self, live, where):  # type: ignore[no-untyped-def]
        self.calls.append(("sweep", sorted(live)))

    def join(self, slice_, pid, where):  # type: ignore[no-untyped-def]
        self.calls.append(("join", (slice_.id, pid, where.hardware is not None)))
        return f"hold-{slice_.id}"

    def enter(self, env, join):  # type: ignore[no-untyped-def]
        self.calls.append(("enter", env.get("JUPYTER_VGPU_SLICE_ID")))
        return join()


def test_the_ledger_lives_a_slice_through_its_tiers_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tier with state is one module: the ledger tells it each step of a slice's life (granted,
    resized, ended, swept) and joins a process to its hold, naming no tier; a process of the slice
    enters the hold as it starts, once (its children inherit the outcome)."""
    from jupyter_vgpu import enforcement
    from jupyter_vgpu.errors import NotPermitted, SliceUnavailable
    from jupyter_vgpu.ledger import SQLiteLedger, open_ledger
    from jupyter_vgpu.ledger.join import enter_here
    from jupyter_vgpu.slices import Actor, Holder, SliceRequest
    from jupyter_vgpu.slices.environment import slice_environment

    recording = Recording()
    monkeypatch.setattr(enforcement, "TIERS", (*TIERS[:-1], recording))
    monkeypatch.delenv("JUPYTER_VGPU_TIERS", raising=False)
    monkeypatch.delenv("JUPYTER_VGPU_BROKER", raising=False)
    monkeypatch.setenv("JUPYTER_VGPU_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", "1x16GiB")
    ledger = open_ledger()
    assert isinstance(ledger, SQLiteLedger)
    held = ledger.reserve(SliceRequest.parse(0.25), Holder("command", "test"))
    assert recording.calls == [("granted", held.id)]
    ledger.resize(held.id, SliceRequest.parse(0.5))
    assert recording.calls[-1] == ("resized", (8 << 30,))
    recording.refuse_resize = True
    with pytest.raises(SliceUnavailable, match="the hold cannot grow"):
        ledger.resize(held.id, SliceRequest.parse(0.75))
    assert ledger.get(held.id).memory == (8 << 30,)  # the tier's refusal undid the resize
    assert ledger.join_hold(held.id, os.getpid()) == f"hold-{held.id}"
    assert recording.calls[-1] == ("join", (held.id, os.getpid(), True))
    with pytest.raises(NotPermitted):
        ledger.acting_for(Actor(user="mallory", uid=4242)).join_hold(held.id, os.getpid())
    assert recording.calls[-1][0] == "join"  # another user's ask never reached the tier

    env = dict(slice_environment(held, ledger_path=str(ledger.path)))
    assert env["JUPYTER_VGPU_ENTER"] == "cooperative"
    before = len(recording.calls)
    assert enter_here(env) is None and "JUPYTER_VGPU_ENTER" not in env  # tried once: children do not
    assert recording.calls[before:] == [("enter", held.id), ("join", (held.id, os.getpid(), True))]
    assert enter_here(env) is None and len(recording.calls) == before + 2

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = ledger.reserve(SliceRequest.parse(0.25), Holder("command", "gone", pid=gone.pid))
    del recording.calls[:]
    assert [s.id for s in ledger.reap()] == [dead.id]
    assert recording.calls == [("ended", dead.id), ("sweep", [held.id])]
    ledger.release(held.id)
    assert recording.calls[-1] == ("ended", held.id)
    ledger.close()


def test_hami_cores_budget_files_go_with_their_slice_and_orphans_with_the_sweep(tmp_path: Path) -> None:
    from jupyter_vgpu.enforcement.base import Where
    from jupyter_vgpu.enforcement.hamicore import HAMiCore, cache_path

    @dataclass(frozen=True)
    class Held:
        id: str
        gpus: tuple[str, ...] = ("GPU-1",)
        memory: tuple[int, ...] = (4 << 30,)

    mine, other, orphan, young = (Held(f"{n:012x}") for n in (0xA, 0xB, 0xC, 0xD))
    files = {s.id: cache_path(tmp_path, s.id, s.memory) for s in (mine, other, orphan, young)}
    for path in files.values():
        path.write_bytes(b"")
    unrelated = tmp_path / f"{orphan.id}.report.json"
    unrelated.write_text("{}")
    old = os.stat(files[orphan.id]).st_mtime - 3600
    for sid in (mine.id, other.id, orphan.id):
        os.utime(files[sid], (old, old))
    tier = HAMiCore()
    tier.ended(mine, Where(folder=str(tmp_path)))
    assert not files[mine.id].exists() and files[other.id].exists()
    tier.ended(other, Where())  # a process that does not reach the owner's folder removes nothing
    assert files[other.id].exists()
    tier.sweep([other.id], Where(folder=str(tmp_path)))
    assert files[other.id].exists() and not files[orphan.id].exists()  # the orphan of a crash goes
    assert files[young.id].exists()  # maybe a slice granted after the live ones were read: kept a minute
    assert unrelated.exists()


def test_a_tiers_own_start_up_check_names_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server, `run` and the broker ask every tier what is wrong with its settings; none of them
    names a tier (issue 40)."""
    from jupyter_vgpu.enforcement import setting_problems

    monkeypatch.delenv("JUPYTER_VGPU_HAMI_CORE", raising=False)
    assert setting_problems() == []
    monkeypatch.setenv("JUPYTER_VGPU_HAMI_CORE", "/bin/ls")
    (problem,) = setting_problems()
    assert problem.startswith("JUPYTER_VGPU_HAMI_CORE / c.VGPU.hami_core_library /bin/ls ") and problem.endswith(".")
    assert [t.tier for t in TIERS if t.setting_problem()] == [Tier.HAMI_CORE]
