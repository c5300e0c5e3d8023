"""Ray inside a slice (issue 22): a real local Ray (``num_gpus`` faked on a CPU machine), started
from a sliced kernel and from ``jupyter vgpu run``; each task gets its part of the *slice* as real
limits through the slice's start-up hook, and a task asking for more than the slice is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_vgpu.errors import InvalidRequest
from jupyter_vgpu.slices import Slice
from jupyter_vgpu.units import GiB, MiB

pytest.importorskip("ray", reason="Ray is the [ray] extra (the test extra installs it)")

pytestmark = pytest.mark.slow

#: Four tasks of a quarter of the slice each, at once; what each got, and which processes the
#: slice's start-up hook configured (JAX, imported in each task, records its fraction).
TASKS = r"""
import json, os
import ray
import jupyter_vgpu.ray as vray
from jupyter_vgpu.slices.reports import configured_processes

vray.init(num_cpus=4)

@vray.remote(num_gpus=0.25)
def task():
    import time
    import jax  # the slice's start-up hook configures it in this Ray worker
    time.sleep(2)  # so the four run at once, each in its own worker
    keys = ("JUPYTER_VGPU_SLICE_ID", "JUPYTER_VGPU_MEMORY_RESERVED", "JUPYTER_VGPU_MEMORY_LIMIT", "CUDA_VISIBLE_DEVICES")
    # what the slice's views list for this worker, read while it runs (Ray ends idle workers)
    seen = configured_processes(os.environ["JUPYTER_VGPU_LEDGER"], os.environ["JUPYTER_VGPU_SLICE_ID"])
    return {"pid": os.getpid(), "configured": [p for p in seen if p["pid"] == os.getpid()], **{k: os.environ.get(k) for k in keys}}

done = ray.get([task.remote() for _ in range(4)])
slice_id = os.environ["JUPYTER_VGPU_SLICE_ID"]
try:
    vray.remote(num_gpus=2)(lambda: 1)
    refused = None
except Exception as error:
    refused = str(error)
ray.shutdown()
print("RESULT " + json.dumps({"tasks": done, "refused": refused, "slice": slice_id}))
"""


def result(text: str) -> dict:
    line = next(line for line in text.splitlines() if line.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def check(found: dict, gpu: str, request: str) -> None:
    tasks = found["tasks"]
    assert len({t["pid"] for t in tasks}) == 4  # four workers at once
    for t in tasks:
        assert t["JUPYTER_VGPU_SLICE_ID"] == found["slice"]
        assert int(t["JUPYTER_VGPU_MEMORY_RESERVED"]) == 2 * GiB  # a quarter of the 8 GiB slice
        assert int(t["JUPYTER_VGPU_MEMORY_LIMIT"]) == 2 * GiB - 512 * MiB  # less its own CUDA context
        assert t["CUDA_VISIBLE_DEVICES"] == gpu  # Ray gave each the slice's GPU
    for t in tasks:  # the slice lists each worker, with JAX's fraction there: 1.5 GiB of the 16 GiB card
        (mine,) = t["configured"]
        assert "XLA_CLIENT_MEM_FRACTION=0.093" in mine["frameworks"]["jax"]["detail"]
    assert found["refused"] == (
        f"num_gpus=2 asks for more than this slice's 1 GPU ({request}); ask for at most 1, or start the kernel on a larger slice."
    )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_VGPU_", "RAY_"))}
    env.update(JUPYTER_VGPU_SIMULATE="2x16GiB", JUPYTER_VGPU_LEDGER=str(tmp_path / "ledger.sqlite"))
    yield env


def gpu0(env: dict[str, str]) -> str:
    status = subprocess.run([sys.executable, "-m", "jupyter_vgpu.cli", "status", "--json"], env=env, capture_output=True, text=True)
    return str(json.loads(status.stdout)["gpus"][0]["uuid"])


def test_ray_tasks_in_a_jupyter_vgpu_run_command_each_get_their_part_of_the_slice(node: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "tasks.py"
    script.write_text(TASKS)
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/2", "--gpu", "0", "--", sys.executable, str(script)],
        env=node, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check(result(done.stdout), gpu0(node), "1/2 GPU on GPU 0")


def test_ray_tasks_in_a_sliced_kernel_each_get_their_part_of_the_slice(tmp_path: Path) -> None:
    from kernel.harness import Workspace, start  # type: ignore[import-not-found]

    workspace = Workspace(tmp_path)
    held = workspace.reserve(0.5)
    env = workspace.slice_env(held)
    kernel = start(env)
    try:
        outcome = kernel.run(TASKS, timeout=300)
        assert outcome.ok, (outcome.error, outcome.stderr[-3000:])
        check(result(outcome.stdout), held.gpus[0], "1/2 GPU")
    finally:
        kernel.stop()


def quarter_slice(gpus: int = 1) -> Slice:
    from jupyter_vgpu.slices import SliceRequest

    return Slice(
        id="abcdef012345", owner="u", uid=0, holder_kind="kernel", holder="k", pid=None, pid_start=None,
        gpus=tuple(f"GPU-{i}" for i in range(gpus)), gpu_indices=tuple(range(gpus)), memory=(4 * GiB,) * gpus,
        memory_total=(16 * GiB,) * gpus, context_allowance=512 * MiB, logical_devices=1, request=SliceRequest.parse(0.25, gpus=gpus),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("num_gpus", "sentence"),
    [
        (2, "num_gpus=2 asks for more than this slice's 1 GPU (1/4 GPU); ask for at most 1"),
        (0.1, "num_gpus=0.1 of this slice is 410 MiB, no more than the 512 MiB a task's CUDA context needs; ask for more."),
        (-1, "num_gpus -1 is not a part of this slice; use a number above 0"),
        (float("nan"), "num_gpus nan is not a part of this slice"),
    ],
)
def test_a_task_asking_for_what_the_slice_cannot_give_is_refused_in_one_sentence(num_gpus: float, sentence: str) -> None:
    from jupyter_vgpu.ray import task_options

    with pytest.raises(InvalidRequest) as refused:
        task_options(num_gpus, env={}, held=quarter_slice())
    assert str(refused.value).startswith(sentence)


def test_whole_gpus_of_a_multi_gpu_slice_keep_their_whole_reservation() -> None:
    from jupyter_vgpu.ray import task_options

    options = task_options(2, env={}, held=quarter_slice(gpus=2))
    assert options["num_gpus"] == 2 and options["runtime_env"]["env_vars"]["JUPYTER_VGPU_MEMORY_RESERVED"] == str(4 * GiB)
    with pytest.raises(InvalidRequest, match=r"^num_gpus=1.5: above 1, Ray gives whole GPUs; use 1 or 2\."):
        task_options(1.5, env={}, held=quarter_slice(gpus=2))


def test_outside_a_slice_the_helper_says_so() -> None:
    from jupyter_vgpu.ray import current_slice

    with pytest.raises(InvalidRequest, match="holds a GPU slice; this process holds none"):
        current_slice({})


#: In a slice on a node where a Ray cluster already runs (RAY_ADDRESS names it, as Ray's own
#: ``ray start`` tells users to set): ``init()`` starts Ray with the slice's GPUs, not the
#: cluster's; ``init(address=...)`` joins the cluster and its tasks still get their part of the slice.
CLUSTER = r"""
import json, os, sys
import ray
import jupyter_vgpu.ray as vray

vray.init(num_cpus=2)
local = {"gpus": ray.cluster_resources().get("GPU"), "gcs": ray.get_runtime_context().gcs_address}
ray.shutdown()

vray.init(address=os.environ["RAY_ADDRESS"])

@vray.remote(num_gpus=0.5)
def task():
    return {k: os.environ.get(k) for k in ("JUPYTER_VGPU_SLICE_ID", "JUPYTER_VGPU_MEMORY_RESERVED", "JUPYTER_VGPU_MEMORY_LIMIT")}

joined = {"gpus": ray.cluster_resources().get("GPU"), "gcs": ray.get_runtime_context().gcs_address, "task": ray.get(task.remote())}
ray.shutdown()
print("RESULT " + json.dumps({"local": local, "joined": joined, "slice": os.environ["JUPYTER_VGPU_SLICE_ID"]}))
"""


def test_beside_a_running_ray_cluster_init_keeps_to_the_slice_and_address_joins_it(node: dict[str, str], tmp_path: Path) -> None:
    import shutil

    from jupyter_process import free_port, stop_group, wait_for

    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray_cli, "the ray command comes with the [ray] extra"
    port = free_port()
    cluster_env = {**node, "RAY_USAGE_STATS_ENABLED": "0"}
    # `--block` keeps `ray start` and the cluster's processes in a session of their own, which the
    # test ends: `ray stop` would end every Ray process on the machine, and every process whose
    # command line names a `monitor.py` (pytest-xdist's workers name the test they run).
    log = (tmp_path / "ray-start.log").open("w")
    cluster = subprocess.Popen(
        [ray_cli, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--num-gpus=4", "--include-dashboard=false", "--disable-usage-stats"],
        env=cluster_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        said = tmp_path / "ray-start.log"
        # What `ray start` says once the cluster is up, before it blocks.
        wait_for(lambda: cluster.poll() is not None or "will now block" in said.read_text(), "the Ray cluster", timeout=120)
        assert cluster.poll() is None, said.read_text()[-3000:]
        script = tmp_path / "cluster.py"
        script.write_text(CLUSTER)
        env = {**node, "RAY_ADDRESS": f"127.0.0.1:{port}", "RAY_USAGE_STATS_ENABLED": "0"}
        done = subprocess.run(
            [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/2", "--gpu", "0", "--", sys.executable, str(script)],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        found = result(done.stdout)
        assert found["local"]["gpus"] == 1 and not found["local"]["gcs"].endswith(f":{port}")  # the slice's one GPU, a Ray of its own
        assert found["joined"]["gpus"] == 4 and found["joined"]["gcs"].endswith(f":{port}")  # the running cluster
        task = found["joined"]["task"]
        assert task["JUPYTER_VGPU_SLICE_ID"] == found["slice"]
        assert int(task["JUPYTER_VGPU_MEMORY_RESERVED"]) == 4 * GiB  # half of the 8 GiB slice, on the cluster too
    finally:
        stop_group(cluster)
        log.close()
