"""The policy as KubeSpawner pod resources, checked on manifests built by KubeSpawner itself."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_vgpu.hub.kubernetes import pre_spawn_hook, resources
from jupyter_vgpu.hub.policy import Policy, Share

kubespawner = pytest.importorskip("kubespawner", reason="jupyterhub-kubespawner is in the test extra")

pytestmark = pytest.mark.hub

POLICY = {
    "default": {"max_per_kernel": "1/2"},
    "groups": {"students": {"max_per_kernel": "1/4", "max_total": "1/2"}, "staff": {"max_total": 2}},
    "users": {"mallory": {"max_slices": 0}, "memo": {"max_total": "10GiB"}},
}


async def manifest(name: str, groups: list[str], policy_file: Path, **hook: Any) -> dict[str, str]:
    spawner = kubespawner.KubeSpawner(_mock=True)
    spawner.user = SimpleNamespace(name=name, id=1, url="/user/x/", groups=[SimpleNamespace(name=g) for g in groups])
    spawner.pre_spawn_hook = pre_spawn_hook(policy_file, **hook)
    spawner.run_pre_spawn_hook()
    pod = await spawner.get_pod_manifest()
    container = pod.spec.containers[0]
    limits = dict(container.resources.limits or {})
    requests = dict(container.resources.requests or {})
    gpu_limits = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
    assert gpu_limits == {k: v for k, v in requests.items() if k.startswith("nvidia.com/")}  # extended: requests == limits
    return gpu_limits


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: nobody, user: {token: unused}}]
contexts: [{name: offline, context: {cluster: nowhere, user: nobody}}]
current-context: offline
"""


@pytest.fixture(autouse=True)
def offline_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KubeSpawner loads a client config when created; no cluster is ever contacted."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    from kubernetes_asyncio.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(POLICY))
    return path


async def test_whole_gpus_round_the_users_total_up(policy_file: Path) -> None:
    assert await manifest("ann", ["students"], policy_file) == {"nvidia.com/gpu": "1"}
    assert await manifest("sam", ["staff"], policy_file) == {"nvidia.com/gpu": "2"}


async def test_hami_gives_a_share_of_memory_and_cores(policy_file: Path) -> None:
    limits = await manifest("ann", ["students"], policy_file, mode="hami", gpu_memory="40GiB")
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(20 * 1024), "nvidia.com/gpucores": "50"}
    assert await manifest("memo", [], policy_file, mode="hami") == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"}


async def test_mig_picks_the_smallest_profile_that_holds_the_share(policy_file: Path) -> None:
    assert await manifest("ann", ["students"], policy_file, mode="mig") == {"nvidia.com/mig-4g.20gb": "1"}
    assert await manifest("dan", [], policy_file, mode="mig") == {"nvidia.com/mig-4g.20gb": "1"}  # default: 1/2 per kernel
    # 10 GiB is more than the 10 GB of a 2g.10gb instance
    assert await manifest("memo", [], policy_file, mode="mig") == {"nvidia.com/mig-3g.20gb": "1"}


async def test_a_user_without_slices_gets_no_gpu(policy_file: Path) -> None:
    assert await manifest("mallory", ["staff"], policy_file) == {}


def test_a_quarter_gpu_in_hami_is_a_quarter_of_the_cores() -> None:
    assert resources(Share(gpus=0.25), mode="hami") == {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem-percentage": "25",
    }
    assert resources(Policy().quota("x", []).get("max_total")[0], mode="gpu") == {}


async def pod(spawner: Any) -> Any:
    return await spawner.get_pod_manifest()


def spawner_for(name: str, groups: list[str]) -> Any:
    spawner = kubespawner.KubeSpawner(_mock=True)
    spawner.user = SimpleNamespace(name=name, id=1, url="/user/x/", groups=[SimpleNamespace(name=g) for g in groups])
    return spawner


async def test_kai_gives_a_fraction_annotation_its_scheduler_and_the_groups_queue(policy_file: Path) -> None:
    """KAI-Scheduler's names (docs/gpu-sharing/README.md): schedulerName kai-scheduler, annotation
    gpu-fraction or gpu-memory (MiB), label kai.scheduler/queue; whole GPUs stay nvidia.com/gpu."""
    spawner = spawner_for("ann", ["students"])
    spawner.pre_spawn_hook = pre_spawn_hook(policy_file, mode="kai")
    spawner.run_pre_spawn_hook()
    manifest = await pod(spawner)
    assert manifest.spec.scheduler_name == "kai-scheduler"
    assert manifest.metadata.annotations["gpu-fraction"] == "0.5"
    assert manifest.metadata.labels["kai.scheduler/queue"] == "students"
    assert not {k for k in (manifest.spec.containers[0].resources.limits or {}) if k.startswith("nvidia.com/")}
    staff = spawner_for("sam", ["staff", "unknown-group"])
    staff.pre_spawn_hook = pre_spawn_hook(policy_file, mode="kai")
    staff.run_pre_spawn_hook()
    manifest = await pod(staff)
    assert manifest.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    assert manifest.metadata.labels["kai.scheduler/queue"] == "staff"
    memo = spawner_for("memo", [])
    memo.pre_spawn_hook = pre_spawn_hook(policy_file, mode="kai", queue="research")
    memo.run_pre_spawn_hook()
    manifest = await pod(memo)
    assert manifest.metadata.annotations["gpu-memory"] == "10240"
    assert manifest.metadata.labels["kai.scheduler/queue"] == "research"


async def test_the_profile_list_offers_each_user_the_shares_their_budget_holds(policy_file: Path) -> None:
    from jupyter_vgpu.hub.kubernetes import profile_list

    profiles = profile_list(policy_file, mode="hami", gpu_memory="40GiB")
    student = spawner_for("ann", ["students"])  # max_total 1/2
    shown = profiles(student)
    assert [p["display_name"] for p in shown] == ["1/2 GPU", "1/4 GPU", "No GPU"]
    assert shown[0]["default"] is True
    assert [p["display_name"] for p in profiles(spawner_for("sam", ["staff"]))] == ["1 GPU", "1/2 GPU", "1/4 GPU", "No GPU"]
    assert [p["display_name"] for p in profiles(spawner_for("mallory", []))] == ["No GPU"]
    # KubeSpawner applies the picked profile: the pod carries HAMi's share of that size
    student.profile_list = profiles
    student.pre_spawn_hook = pre_spawn_hook(policy_file, mode="hami", gpu_memory="40GiB")
    student.user_options = {"profile": shown[1]["slug"]}
    await student.load_user_options()
    student.run_pre_spawn_hook()  # a picked share stays what was picked
    limits = (await pod(student)).spec.containers[0].resources.limits
    assert {k: v for k, v in limits.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": str(10 * 1024), "nvidia.com/gpucores": "25",
    }  # fmt: skip


def test_a_kai_queue_that_is_no_label_is_refused_in_one_sentence() -> None:
    from jupyter_vgpu.errors import InvalidConfig
    from jupyter_vgpu.hub.kubernetes import kai_settings

    with pytest.raises(InvalidConfig, match=r"^queue 'my queue!' is not a Kubernetes label value"):
        kai_settings(Share(gpus=0.5), queue="my queue!")


async def test_the_pod_the_clusters_scrape_config_keeps_carries_its_annotation_and_named_port() -> None:
    """docs/cluster.md's KubeSpawner settings, for Prometheus's pod discovery: the annotation, and
    the exporter's port named beside the notebook's (the list replaces KubeSpawner's own)."""
    spawner = kubespawner.KubeSpawner(_mock=True)
    spawner.user = SimpleNamespace(name="ann", id=1, url="/user/ann/", groups=[])
    spawner.extra_annotations = {"jupyter-vgpu/scrape": "true"}
    spawner.extra_container_config = {"ports": [
        {"name": "notebook-port", "containerPort": 8888},
        {"name": "vgpu-metrics", "containerPort": 9401},
    ]}  # fmt: skip
    pod = await spawner.get_pod_manifest()
    assert pod.metadata.annotations["jupyter-vgpu/scrape"] == "true"
    ports = [(p["name"], p["containerPort"]) for p in pod.spec.containers[0].ports]
    assert ports == [("notebook-port", 8888), ("vgpu-metrics", 9401)]
