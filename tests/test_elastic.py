"""Elastic slices (issue 42, its first part): a request that is booked and a limit to burst to.

What a user asks (kernelspec keys, ``--limit``, ``%vgpu resize ... --limit``), what is booked (the
request only), where it goes (the GPU with room for the limit), and what frameworks are told (the
limit, growing on demand)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_vgpu.errors import InvalidRequest, SliceUnavailable
from jupyter_vgpu.frameworks.tensorflow import TensorFlow
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.kernel.resize import new_request, split_resize
from jupyter_vgpu.kernel.state import SliceFacts
from jupyter_vgpu.launch.errors import InvalidKernelConfig
from jupyter_vgpu.ledger import SQLiteLedger
from jupyter_vgpu.provisioner import VGPUProvisioner
from jupyter_vgpu.slices import Holder, SliceRequest
from jupyter_vgpu.slices.environment import VARIABLES, for_installed_frameworks, slice_environment, without_slice
from jupyter_vgpu.slices.request import CLI_NAMES
from jupyter_vgpu.units import GiB, MiB

JUPYTER_VGPU = str(Path(sys.executable).parent / "jupyter-vgpu")
ALLOWANCE = 512 * MiB
#: A request as the ledger stored it before limits existed (a row of an older release).
OLD_ROW = {"fraction": 0.25, "memory": None, "gpus": 1, "gpu": None, "logical_devices": 1, "placement": "binpack", "percent": False}


def one_sentence(text: str) -> bool:
    return text.endswith(".") and "Traceback" not in text and "\n" not in text.strip()


# -- asking --------------------------------------------------------------------------------------


def test_a_fraction_with_a_limit_says_both() -> None:
    assert SliceRequest.parse("1/4", limit="1/2").describe() == "1/4 GPU, up to 1/2"
    assert SliceRequest.parse(memory="4GiB", limit="8GiB").describe() == "4.0 GiB, up to 8.0 GiB"
    assert SliceRequest.parse("33%", limit="66%").describe() == "33% of a GPU, up to 66%"
    assert SliceRequest.parse("1/4", gpus=2, limit="1/2").describe() == "2 x 1/4 GPU, up to 1/2"


def test_a_request_without_a_limit_is_stored_and_said_as_before() -> None:
    request = SliceRequest.parse("1/4")
    assert request.to_dict() == OLD_ROW
    assert request.describe() == "1/4 GPU" and not request.elastic


def test_an_old_row_without_the_limit_fields_still_loads() -> None:
    assert SliceRequest.from_dict(OLD_ROW) == SliceRequest.parse("1/4")


def test_a_limit_goes_through_json_and_back() -> None:
    for request in (SliceRequest.parse("1/4", limit="1/2"), SliceRequest.parse(memory="4GiB", limit="8GiB")):
        assert SliceRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request


def test_a_limit_equal_to_its_request_is_no_limit() -> None:
    assert SliceRequest.parse("1/4", limit="25%") == SliceRequest.parse("1/4")


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        ({"fraction": "1/4", "limit": "1/8"}, "--limit '1/8' is below its request (1/4); use a limit of at least 1/4 and at most 1."),
        ({"fraction": "1/4", "limit": "3/2"}, "--limit '3/2' is above a whole GPU; use a limit of at most 1 (and at least the request)."),
        ({"fraction": "1/4", "limit": "8GiB"}, "--limit '8GiB' is a size but the request is a share of a GPU (1/4); give the limit as a share too, e.g. 1/2."),
        ({"memory": "4GiB", "limit": "1/2"}, "--limit '1/2' is a share of a GPU but the request is memory (4.0 GiB); give the limit as a size too, e.g. 8GiB."),
        ({"fraction": "1", "limit": "8GiB"}, "--limit '8GiB' is a size but the request is a whole GPU, with nothing above it to burst to; leave the limit out."),
        ({"memory": "4GiB", "limit": "2GiB"}, "--limit '2GiB' is below its request (4.0 GiB); use a limit of at least 4GiB."),
        ({"limit": "1/2"}, "--limit '1/2' is a limit with no request to burst from; also set -p/--fraction (what is booked and guaranteed)."),
        # hardening round five, L-4: an empty --limit gave a fixed slice; nan spoke of sizes
        ({"fraction": "1/4", "limit": ""}, "--limit is empty; give the limit to burst to (1/2, 8GiB), or leave it out for a fixed slice."),
        ({"fraction": "1/4", "limit": " "}, "--limit is empty; give the limit to burst to (1/2, 8GiB), or leave it out for a fixed slice."),
        ({"fraction": "1/4", "limit": "nan"}, "--limit 'nan' is outside (0, 1]; use a share of a GPU in (0, 1], written 0.25, 1/4 or 25%."),
        ({"fraction": "1/4", "limit": "inf"}, "--limit 'inf' is above a whole GPU; use a limit of at most 1 (and at least the request)."),
    ],
)
def test_a_limit_that_cannot_go_with_its_request_is_one_sentence(asked: dict[str, str], said: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        SliceRequest.parse(**asked, names=CLI_NAMES)
    assert str(refused.value) == said


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"gpu_fraction": 0.25, "gpu_fraction_limit": 0.125}, "gpu_fraction_limit 0.125 is below its request (1/4)"),
        ({"gpu_fraction": 0.25, "gpu_fraction_limit": "150%"}, "gpu_fraction_limit '150%' is above a whole GPU"),
        ({"gpu_fraction": 0.25, "gpu_memory_limit": "8GiB"}, "gpu_memory_limit 8GiB is a size but the request is a share of a GPU"),
        ({"gpu_memory": "4GiB", "gpu_fraction_limit": 0.5}, "gpu_fraction_limit 0.5 is a share of a GPU but the request is memory"),
        ({"gpu_fraction_limit": 0.5}, "gpu_fraction_limit 0.5 is a limit with no request to burst from; also set gpu_fraction"),
    ],
)
def test_a_kernelspecs_limit_that_is_not_allowed_is_one_sentence(config: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidKernelConfig) as refused:
        VGPUProvisioner(**config).request()
    assert said in str(refused.value) and one_sentence(str(refused.value)), refused.value


def test_a_kernelspecs_limit_is_part_of_its_request() -> None:
    request = VGPUProvisioner(gpu_fraction=0.25, gpu_fraction_limit="1/2").request()
    assert (request.fraction, request.limit_fraction, request.describe()) == (0.25, 0.5, "1/4 GPU, up to 1/2")
    assert VGPUProvisioner(gpu_memory="4GiB", gpu_memory_limit="8GiB").request().limit_memory == 8 * GiB


shares = st.fractions(min_value=Fraction(1, 64), max_value=1).map(float)


@given(request=shares, limit=shares)
def test_any_limit_at_least_its_request_is_allowed_and_any_below_is_one_sentence(request: float, limit: float) -> None:
    if limit >= request:
        parsed = SliceRequest.parse(request, limit_fraction=limit)
        assert parsed.limit_fraction in (None, limit)
        assert SliceRequest.from_dict(parsed.to_dict()) == parsed
    else:
        with pytest.raises(InvalidRequest) as refused:
            SliceRequest.parse(request, limit_fraction=limit)
        assert "is below its request" in str(refused.value) and one_sentence(str(refused.value))


# -- booking and placing -------------------------------------------------------------------------


def ledger(tmp_path: Path, gpus: str = "1x16GiB") -> SQLiteLedger:
    return SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(gpus), context_allowance=ALLOWANCE)


def test_the_ledger_books_the_request_and_keeps_the_limit(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    held = book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder.command("x"))
    assert held.memory == (4 * GiB,)  # the request is what is booked
    assert held.memory_limit == 4 * GiB - ALLOWANCE  # what it meant before
    assert held.memory_burst_limit == 8 * GiB - ALLOWANCE
    assert held.to_dict()["memory_burst_limit"] == 8 * GiB - ALLOWANCE
    (stored,) = book.slices()
    assert stored.request == held.request and stored.request.describe() == "1/4 GPU, up to 1/2"
    book.close()


def test_limits_never_let_requests_add_up_past_a_gpu(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    for _ in range(4):
        book.reserve(SliceRequest.parse("1/4", limit="1"), Holder.command("x"))
    with pytest.raises(SliceUnavailable):
        book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder.command("y"))
    assert sum(s.memory_per_gpu for s in book.slices()) == 16 * GiB
    book.close()


def test_a_slice_without_a_limit_has_no_burst(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    held = book.reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    assert held.memory_burst_limit is None and held.to_dict()["memory_burst_limit"] is None
    book.close()


@pytest.mark.parametrize(
    ("used_gib", "state", "over"),
    [(3, "ok", False), (6, "ok", False), (7.5, "near", False), (8.5, "over", True)],
)
def test_a_burst_within_the_limit_is_not_over_use_and_beyond_it_is(tmp_path: Path, used_gib: float, state: str, over: bool) -> None:
    from jupyter_vgpu.slices.usage import MEASURED, SliceUsage

    book = ledger(tmp_path)
    elastic = book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder.command("x"))
    fixed = book.reserve(SliceRequest.parse("1/4"), Holder.command("y"))
    used = int(used_gib * GiB)

    def usage(held: Any) -> SliceUsage:
        return SliceUsage(held, None, {held.gpus[0]: used}, used, None, MEASURED, None)

    # The elastic slice may use its limit (8 GiB of the 16 GiB GPU): the views and the watchdog
    # see "over" only beyond it; the fixed slice of the same request is over at 4 GiB as before.
    assert (usage(elastic).state, usage(elastic).overshoot() > 0) == (state, over)
    assert (usage(fixed).state == "over") == (used > 4 * GiB) == (usage(fixed).overshoot() > 0)
    assert elastic.memory_allowed == (8 * GiB,) and fixed.memory_allowed == (4 * GiB,)
    book.close()


def test_a_request_kept_out_by_a_burst_is_told_it_is_a_burst_and_whose(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": []}))
    book = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(str(spec)), context_allowance=ALLOWANCE)
    book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder("command", "bursty", pid=os.getpid()))
    # It uses 7 GiB: 3 GiB above its 4 GiB request, within its 8 GiB limit; the burst is not free.
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": os.getpid(), "memory": "7GiB"}]}))
    with pytest.raises(SliceUnavailable) as refused:
        book.reserve(SliceRequest.parse(memory="10GiB"), Holder.command("y"))
    said = str(refused.value)
    assert "9.0 GiB free of 16.0 GiB" in said
    assert "3.0 GiB held above their requests by bursting commands (bursty [" in said and "theirs until they end" in said
    assert refused.value.detail is not None and refused.value.detail["burst_held"] is False  # a command's burst is not given back
    assert "used beyond reservations" not in said  # a burst within its limit is no over-use
    # Beyond its limit, the rest is over-use, said as before.
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": os.getpid(), "memory": "9GiB"}]}))
    with pytest.raises(SliceUnavailable) as refused:
        book.reserve(SliceRequest.parse(memory="10GiB"), Holder.command("y"))
    assert "4.0 GiB held above their requests by bursting commands" in str(refused.value)
    assert "1.0 GiB used beyond reservations" in str(refused.value)
    book.close()


def test_placement_prefers_the_gpu_with_room_for_the_limit(tmp_path: Path) -> None:
    book = ledger(tmp_path, "2x16GiB")
    book.reserve(SliceRequest.parse("5/8", gpu="0"), Holder.command("a"))  # GPU 0: 6 GiB free
    book.reserve(SliceRequest.parse("1/4", gpu="1"), Holder.command("b"))  # GPU 1: 12 GiB free
    fixed = book.reserve(SliceRequest.parse("1/4"), Holder.command("fixed"))
    assert fixed.gpu_indices == (0,)  # binpack: the fullest GPU that fits, as before
    book.release(fixed.id)
    elastic = book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder.command("elastic"))
    assert elastic.gpu_indices == (1,)  # 8 GiB to grow into there; 6 GiB on GPU 0
    book.close()


def test_a_memory_limit_above_every_gpu_is_one_sentence_and_books_nothing(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    with pytest.raises(InvalidRequest) as refused:
        book.reserve(SliceRequest.parse(memory="4GiB", limit="32GiB"), Holder.command("x"))
    assert str(refused.value) == "4.0 GiB, up to 32.0 GiB has a limit above the largest GPU here (16.0 GiB); ask for a limit of at most 16.0 GiB."
    assert book.slices() == []
    book.close()


# -- fitting ---------------------------------------------------------------------------------------


def test_an_elastic_slices_frameworks_get_its_limit_and_the_reservation_keeps_its_names(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    held = book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder.command("x"))
    book.close()
    env = slice_environment(held, ledger_path="/tmp/l.sqlite")
    burst = 8 * GiB - ALLOWANCE
    assert env["JUPYTER_VGPU_MEMORY_LIMIT"] == str(4 * GiB - ALLOWANCE)  # as it meant before
    assert env["JUPYTER_VGPU_MEMORY_FRACTION"] == "0.218"
    assert env["JUPYTER_VGPU_BURST_LIMIT"] == str(burst)
    assert env["JUPYTER_VGPU_BURST_FRACTION"] == "0.468"
    assert env["JUPYTER_VGPU_BURST_SHARE"] == "1/2"
    assert env["CUPY_GPU_MEMORY_LIMIT"] == str(burst)  # CuPy's pool grows to it
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.468" and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    torch = for_installed_frameworks(env, {"torch": "2.10.0"}.get)
    assert torch["PYTORCH_CUDA_ALLOC_CONF"] == "per_process_memory_fraction:0.468"
    assert without_slice(env) == {"JUPYTER_VGPU_LEDGER": "/tmp/l.sqlite"}  # a child slice inherits no stale burst
    assert {"JUPYTER_VGPU_BURST_LIMIT", "JUPYTER_VGPU_BURST_FRACTION", "JUPYTER_VGPU_BURST_SHARE"} <= set(VARIABLES)


def test_a_fixed_slices_environment_has_no_burst(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    held = book.reserve(SliceRequest.parse("1/4"), Holder.command("x"))
    book.close()
    env = slice_environment(held, ledger_path="/tmp/l.sqlite")
    assert not [name for name in env if "BURST" in name]
    assert env["CUPY_GPU_MEMORY_LIMIT"] == env["JUPYTER_VGPU_MEMORY_LIMIT"]


class FakeTensorFlow:
    """What TensorFlow's config API answers on a machine with one GPU (the CPU build sees none)."""

    def __init__(self) -> None:
        self.configured: dict[str, list[Any]] = {}
        gpu = SimpleNamespace(name="/physical_device:GPU:0", device_type="GPU")
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind=None: [gpu] if kind == "GPU" else [],
            LogicalDeviceConfiguration=lambda memory_limit=None: SimpleNamespace(memory_limit=memory_limit),
            set_logical_device_configuration=lambda device, config: self.configured.__setitem__(device.name, config),
        )


def state(facts: SliceFacts) -> Any:
    return SimpleNamespace(facts=facts)


def test_tensorflows_logical_device_gets_the_burst_limit_and_grows_on_demand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    tf = FakeTensorFlow()
    facts = SliceFacts(slice_id="0123456789ab", memory_limit=4 * GiB - ALLOWANCE, burst_limit=8 * GiB - ALLOWANCE)
    record = TensorFlow().configure(tf, state(facts))
    [device] = tf.configured["/physical_device:GPU:0"]
    assert device.memory_limit == (8 * GiB - ALLOWANCE) // MiB
    assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # else its allocator takes the whole limit at once
    assert record.detail == "1 logical GPU of 7.5 GiB on its GPU, growing on demand up to that (TF_FORCE_GPU_ALLOW_GROWTH=true: an elastic slice)"


def test_tensorflow_in_a_fixed_slice_is_configured_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    tf = FakeTensorFlow()
    record = TensorFlow().configure(tf, state(SliceFacts(slice_id="0123456789ab", memory_limit=4 * GiB - ALLOWANCE)))
    [device] = tf.configured["/physical_device:GPU:0"]
    assert device.memory_limit == (4 * GiB - ALLOWANCE) // MiB
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ
    assert record.detail == "1 logical GPU of 3.5 GiB on its GPU"


# -- %vgpu resize ----------------------------------------------------------------------------------


def test_resize_reads_a_size_and_a_limit() -> None:
    assert split_resize("1/4 --limit 1/2") == ("1/4", "1/2")
    assert split_resize("--limit=8GiB") == (None, "8GiB")
    assert split_resize("0.5") == ("0.5", None)


def test_resize_changes_either_the_size_or_the_limit() -> None:
    elastic = SliceRequest.parse("1/4", limit="1/2")
    assert new_request("1/4 --limit 3/4", SliceRequest.parse("1/4")).describe() == "1/4 GPU, up to 3/4"
    assert new_request("--limit 1", elastic).describe() == "1/4 GPU, up to 1 GPU"  # the size stays
    assert new_request("3/8", elastic).describe() == "3/8 GPU, up to 1/2"  # the limit stays
    assert new_request("1/4 --limit none", elastic).describe() == "1/4 GPU"


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("3/4", "%vgpu resize '3/4': the slice's limit (1/2) does not go with 3/4 GPU; add --limit LIMIT, or --limit none for a fixed slice."),
        ("1/4 --limit 1/8", "%vgpu resize '1/4 --limit 1/8': --limit '1/8' is below its request (1/4); use a limit of at least 1/4 and at most 1. For example `%vgpu resize 1/4` or `%vgpu resize 1/4 --limit 1/2`."),
        ("1/4 1/2", "%vgpu resize '1/4 1/2': give one size, then --limit LIMIT if it bursts, e.g. `%vgpu resize 1/4 --limit 1/2`."),
    ],
)
def test_a_resize_that_cannot_be_is_said_in_one_message(typed: str, said: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        new_request(typed, SliceRequest.parse("1/4", limit="1/2"))
    assert str(refused.value) == said


# -- the command line ------------------------------------------------------------------------------


def vgpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JUPYTER_VGPU, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def jupyter_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "data"
    source = data / "kernels" / "python3"
    source.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (source / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (ipykernel)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "nothing-else"))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    return data


def installed(data: Path, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((data / "kernels" / name / "kernel.json").read_text())
    return {"display_name": spec["display_name"], "config": spec["metadata"]["kernel_provisioner"]["config"]}


def test_kernelspec_install_with_a_limit(jupyter_dirs: Path) -> None:
    result = vgpu("kernelspec", "install", "--user", "-p", "1/4", "--limit", "1/2")
    assert result.returncode == 0, result.stderr
    assert installed(jupyter_dirs, "python3-vgpu-1-4-to-1-2") == {
        "display_name": "Python 3 (1/4 GPU, up to 1/2)",
        "config": {"gpu_fraction": 0.25, "gpu_fraction_limit": 0.5},
    }
    result = vgpu("kernelspec", "install", "--user", "-m", "4GiB", "--limit", "8GiB")
    assert result.returncode == 0, result.stderr
    assert installed(jupyter_dirs, "python3-vgpu-4gib-to-8gib") == {
        "display_name": "Python 3 (4 GiB GPU, up to 8 GiB)",  # one way of writing sizes (issue 49)
        "config": {"gpu_memory": "4GiB", "gpu_memory_limit": "8GiB"},
    }
    assert vgpu("kernelspec", "install", "--user", "-p", "1/4").returncode == 0  # beside it, not over it
    assert installed(jupyter_dirs, "python3-vgpu-1-4")["display_name"] == "Python 3 (1/4 GPU)"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("-p", "1/4", "--limit", "1/8"), "--limit '1/8' is below its request (1/4)"),
        (("-p", "1/4", "--limit", "8GiB"), "--limit '8GiB' is a size but the request is a share of a GPU (1/4)"),
        (("-p", "1/4", "--limit", "2"), "--limit '2' is above a whole GPU"),
        (("--defaults", "--limit", "1/2"), "--defaults installs several kernelspecs; it cannot take --name, --display-name or --limit."),
    ],
)
def test_kernelspec_install_with_a_bad_limit_is_one_sentence_and_installs_nothing(jupyter_dirs: Path, args: tuple[str, ...], said: str) -> None:
    result = vgpu("kernelspec", "install", "--user", *args)
    assert result.returncode != 0
    assert said in result.stderr and "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.name for p in (jupyter_dirs / "kernels").iterdir()) == ["python3"]


ENV_SCRIPT = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if 'VGPU' in k or k.startswith(('CUPY', 'XLA'))}))"


def test_run_with_a_limit_books_the_request_and_gives_the_command_the_limit(vgpu_env: dict[str, str]) -> None:
    result = vgpu("run", "-p", "1/4", "--limit", "1/2", "--", sys.executable, "-c", ENV_SCRIPT)
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout)
    assert int(env["JUPYTER_VGPU_MEMORY_RESERVED"]) == 4 * GiB  # booked: the request
    assert int(env["JUPYTER_VGPU_BURST_LIMIT"]) == 8 * GiB - int(env["JUPYTER_VGPU_CONTEXT_ALLOWANCE"])
    assert env["CUPY_GPU_MEMORY_LIMIT"] == env["JUPYTER_VGPU_BURST_LIMIT"]
    assert "on GPU 0 (1/4 GPU, up to 1/2)" in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("-m", "11GiB", "--limit", "1/2"), "jupyter vgpu: --limit '1/2' is a share of a GPU but the request is memory (11.0 GiB); give the limit as a size too, e.g. 22GiB.\n"),
        (("-p", "3/8", "--limit", "8GiB"), "jupyter vgpu: --limit '8GiB' is a size but the request is a share of a GPU (3/8); give the limit as a share too, e.g. 3/4.\n"),
    ],
)
def test_a_limit_of_the_other_kind_is_refused_with_an_example_of_the_requests_kind_above_it(
    vgpu_env: dict[str, str], args: tuple[str, ...], said: str
) -> None:
    """Issue 49: `run -m 11GiB --limit 1/2` suggested "e.g. 8GiB", below the request."""
    result = vgpu("run", *args, "--", "true")
    assert result.returncode != 0 and result.stderr == said


@pytest.mark.parametrize("limit", ["1/8", "8GiB", "3/2", "lots"])
def test_run_with_a_bad_limit_is_one_sentence_and_books_nothing(vgpu_env: dict[str, str], limit: str) -> None:
    result = vgpu("run", "-p", "1/4", "--limit", limit, "--", "true")
    assert result.returncode != 0
    assert f"--limit {limit!r}" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert json.loads(vgpu("status", "--json").stdout)["slices"] == []


def test_a_request_only_kernels_bursts_keep_out_waits_for_them_instead_of_being_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: a request is never refused because of a burst. Kept out only by a kernel's burst, a
    request that asked not to wait joins the line (where the kernel's server asks the burst back);
    one that would not fit even with every burst back is refused at once, as before."""
    from jupyter_vgpu.ledger import contract

    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": []}))
    book = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(str(spec)), context_allowance=ALLOWANCE)
    book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder("kernel", "k-1", pid=os.getpid(), labels={"path": "bursty.ipynb"}))
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": [{"gpu": 0, "pid": os.getpid(), "memory": "7GiB"}]}))
    with pytest.raises(SliceUnavailable) as refused:
        book.reserve_now(SliceRequest.parse(memory="10GiB"), Holder.command("y"))
    detail = refused.value.detail
    assert detail is not None and detail["burst_held"] is True
    assert "bursting kernels (bursty.ipynb [" in str(refused.value) and "given back when a request waits for it" in str(refused.value)
    assert detail["advice"][0].startswith("It fits once bursting kernels give back what they use above their requests")
    monkeypatch.setattr(contract, "BURST_WAIT_SECONDS", 0.5)
    with pytest.raises(SliceUnavailable) as waited:
        book.reserve(SliceRequest.parse(memory="10GiB"), Holder.command("y"))  # wait 0, yet it waits
    assert str(waited.value).startswith("Waited 0.5 s in line. No room for 10.0 GiB now"), str(waited.value)
    assert book.waiting() == []  # it left the line
    with pytest.raises(SliceUnavailable) as at_once:
        book.reserve(SliceRequest.parse(memory="13GiB"), Holder.command("z"))  # 12 GiB free even with the burst back
    assert not str(at_once.value).startswith("Waited") and at_once.value.detail["burst_held"] is False
    book.close()


def test_status_says_a_bursting_slices_burst(tmp_path: Path) -> None:
    """`jupyter vgpu status` says how far an elastic slice uses above its request (issue 42, item 5),
    in its JSON as REST does (`memory_burst`), and nothing of the kind for a fixed slice."""
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": []}))
    book = SQLiteLedger(tmp_path / "ledger.sqlite", Inventory(str(spec)), context_allowance=ALLOWANCE)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        book.reserve(SliceRequest.parse("1/4", limit="1/2"), Holder("command", "bursty", pid=os.getpid()))
        book.reserve(SliceRequest.parse("1/4"), Holder("command", "steady", pid=sleeper.pid))
        processes = [{"gpu": 0, "pid": os.getpid(), "memory": "6GiB"}, {"gpu": 0, "pid": sleeper.pid, "memory": "1GiB"}]
        spec.write_text(json.dumps({"devices": [{"memory": "16GiB"}], "processes": processes}))
        env = {**os.environ, "JUPYTER_VGPU_SIMULATE": str(spec), "JUPYTER_VGPU_LEDGER": str(tmp_path / "ledger.sqlite"), "COLUMNS": "200"}
        status = [sys.executable, "-m", "jupyter_vgpu.cli", "status"]
        rows = {r["holder"]: r for r in json.loads(subprocess.run([*status, "--json"], env=env, capture_output=True, text=True).stdout)["slices"]}
        assert rows["bursty"]["memory_burst"] == 2 * GiB and rows["steady"]["memory_burst"] is None
        shown = " ".join(subprocess.run(status, env=env, capture_output=True, text=True).stdout.replace("\u00a0", " ").split())
        assert "[1/4 GPU, up to 1/2] burst 2.0 GiB" in shown, shown
        assert "steady [1/4 GPU] burst" not in shown
    finally:
        sleeper.kill()
        sleeper.wait()
        book.close()
