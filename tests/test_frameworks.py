"""Every registered framework keeps the adapter contract (jupyter_vgpu/frameworks/__init__.py says
how to add one): one registry, and nothing else names a framework's variables or module."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_vgpu.frameworks import FRAMEWORKS, by_name
from jupyter_vgpu.frameworks.base import Framework
from jupyter_vgpu.kernel.startup import FRAMEWORK_MODULES
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.environment import VARIABLES, for_installed_frameworks, slice_environment, without_slice

NEWEST = {"jaxlib": "99.0", "torch": "99.0", "tensorflow": "99.0", "cupy": "99.0", "cupy-cuda12x": "99.0"}


def test_names_titles_and_modules_are_unique_and_the_start_up_hook_watches_each() -> None:
    for attribute in ("name", "title", "module"):
        values = [getattr(f, attribute) for f in FRAMEWORKS]
        assert all(values) and len(set(values)) == len(values), (attribute, values)
    assert {f.module for f in FRAMEWORKS} == FRAMEWORK_MODULES


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.name)
def test_each_framework_sets_only_the_variables_it_declares(framework: Framework, tmp_path: object) -> None:
    assert by_name(framework.name) is framework
    env = framework.environment(3 << 30, "0.187")
    assert all(isinstance(v, str) for v in env.values())
    assert set(env) <= set(framework.variables), f"{framework.name} sets variables it does not declare"
    changes = framework.for_installed({**env}, "0.187", NEWEST.get)
    declared_or_users = set(framework.variables) | {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}
    assert set(changes) <= declared_or_users, changes
    assert set(framework.variables) <= set(VARIABLES), "a slice would inherit a stale value of these"
    assert framework.for_installed(env, "0.187", lambda _: None) == {}  # not installed: nothing to change
    assert framework.would_give(3 << 30, "0.187", 2), "%vgpu on simulated GPUs shows what a real GPU would give"


def test_a_slices_environment_is_the_core_variables_plus_each_frameworks(tmp_path: object) -> None:
    from pathlib import Path

    from jupyter_vgpu.gpus import Inventory

    ledger = SQLiteLedger(Path(str(tmp_path)) / "l.sqlite", Inventory("1x16GiB"), context_allowance=0)
    held = ledger.reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    env = slice_environment(held, ledger_path="/tmp/l.sqlite")
    ledger.close()
    for framework in FRAMEWORKS:
        assert framework.environment(held.memory_limit, env["JUPYTER_VGPU_MEMORY_FRACTION"]).items() <= env.items()
    assert env["JUPYTER_VGPU_MEMORY_FRACTION"] == "0.250"
    assert without_slice({**env, "HOME": "/h"}) == {"HOME": "/h", "JUPYTER_VGPU_LEDGER": "/tmp/l.sqlite"}  # where, not what
    assert set(for_installed_frameworks(env, NEWEST.get)) <= set(VARIABLES) | {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}


def test_asked_for_a_burst_back_pytorch_empties_its_cache_only_once_cuda_runs() -> None:
    """PyTorch's caching allocator gives its unused blocks back (issue 42); before CUDA starts there
    is nothing to give, and nothing is called."""
    from types import SimpleNamespace

    emptied: list[bool] = []
    cuda = SimpleNamespace(is_initialized=lambda: False, empty_cache=lambda: emptied.append(True))
    torch = SimpleNamespace(cuda=cuda)
    pytorch = by_name("torch")
    assert pytorch.give_back(torch) is None and not emptied
    cuda.is_initialized = lambda: True
    assert pytorch.give_back(torch) == "PyTorch released its cached GPU memory (memory its tensors hold stays)"
    assert emptied == [True]


def test_installed_version_reads_what_importlib_metadata_reads_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sliced kernel asks at its start which torch and jaxlib are installed: from the
    dist-info folders' names, the answer importlib.metadata gives for every distribution of
    this environment; an .egg-info is left to importlib.metadata; none is None (issue 47)."""
    import importlib.metadata as metadata

    from jupyter_vgpu.slices.environment import installed_version

    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        assert installed_version(name) == metadata.version(name), name
    assert installed_version("no-such-distribution-here") is None
    (tmp_path / "Old_Thing-1.2.egg-info").write_text("Metadata-Version: 2.1\nName: Old-Thing\nVersion: 1.2\n")
    (tmp_path / "new.thing-3.4+cu121.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version("old-thing") == "1.2"
    assert installed_version("New_Thing") == "3.4+cu121"


def test_asked_for_a_burst_back_on_simulated_gpus_a_framework_that_keeps_memory_says_it_is_of_a_real_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 49: "TensorFlow cannot give GPU memory back ... (del and gc free nothing)" is true of a
    real GPU; on simulated GPUs, which count what tensors hold, `del` does give it back."""
    from types import SimpleNamespace
    from typing import Any

    import jupyter_vgpu.frameworks as frameworks

    class Keeps(Framework):
        name, title, module = "keeps", "Keeps", "keeps"
        keeps_until_restart = True

        def configure(self, module: Any, state: Any) -> Any:
            raise NotImplementedError

        def give_back(self, module: Any) -> str | None:
            return "Keeps cannot give GPU memory back before the kernel restarts"

    class Releases(Keeps):
        name, title, module = "releases", "Releases", "releases"
        keeps_until_restart = False

        def give_back(self, module: Any) -> str | None:
            return "Releases released its cached GPU memory"

    monkeypatch.setattr(frameworks, "FRAMEWORKS", (Keeps(), Releases()))

    def state(simulate: str) -> Any:
        return SimpleNamespace(facts=SimpleNamespace(simulate=simulate), imported=lambda module: object())

    assert frameworks.give_back(state("")) == [
        "Keeps cannot give GPU memory back before the kernel restarts", "Releases released its cached GPU memory",
    ]  # fmt: skip
    assert frameworks.give_back(state("1x16GiB")) == [
        "on a real GPU, Keeps cannot give GPU memory back before the kernel restarts",
        "Releases released its cached GPU memory",  # what it did, here too
        frameworks.SIMULATED_GIVE_BACK,
    ]
    assert [f.name for f in FRAMEWORKS if f.keeps_until_restart] == ["tensorflow", "jax"]
