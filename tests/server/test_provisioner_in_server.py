"""The vgpu-provisioner inside a real jupyter_server (pytest-jupyter, non-root base URL)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.provisioning.factory import KernelProvisionerFactory
from tornado.httpclient import HTTPClientError

from jupyter_vgpu.ledger import open_ledger

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(vgpu_env: dict[str, str]) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {}}, "VGPUProvisioner": {"gpu_fraction": 0.5}}


@pytest.fixture
def fresh_factory() -> Iterator[None]:
    # The factory is a process-wide singleton that reads its default provisioner once.
    KernelProvisionerFactory.clear_instance()
    yield
    KernelProvisionerFactory.clear_instance()


def write_spec(jp_data_dir: Path, name: str, config: dict[str, Any] | None, display: str) -> str:
    folder = jp_data_dir / "kernels" / name
    folder.mkdir(parents=True)
    spec: dict[str, Any] = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display,
        "language": "python",
    }
    if config is not None:
        spec["metadata"] = {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": config}}
    (folder / "kernel.json").write_text(json.dumps(spec))
    return name


async def test_bad_kernelspec_config_reaches_the_user_as_one_sentence(jp_fetch: Any, jp_data_dir: Path) -> None:
    name = write_spec(jp_data_dir, "broken", {"gpu_fraction": 1.5}, "Python 3 (broken GPU)")
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": name}))
    assert caught.value.code == 400
    body = json.loads(caught.value.response.body)  # type: ignore[union-attr]
    assert "gpu_fraction 1.5 is outside (0, 1]" in body["message"]
    assert open_ledger().slices() == []


async def test_the_notebook_path_is_recorded_with_the_slice(jp_fetch: Any, jp_data_dir: Path) -> None:
    name = write_spec(jp_data_dir, "quarter", {"gpu_fraction": "1/4"}, "Python 3 (1/4 GPU)")
    response = await jp_fetch(
        "api", "sessions", method="POST",
        body=json.dumps({"path": "work/train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": name}}),
    )
    kernel_id = json.loads(response.body)["kernel"]["id"]
    (held,) = open_ledger().slices()
    assert held.holder == kernel_id
    assert held.labels["path"] in ("work/train.ipynb", "train.ipynb")  # relative to the server root
    assert held.labels["kernel_name"] == name
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    assert open_ledger().slices() == []


async def test_server_wide_default_provisioner_takes_defaults_from_config(
    jp_fetch: Any, jp_data_dir: Path, monkeypatch: pytest.MonkeyPatch, fresh_factory: None
) -> None:
    monkeypatch.setenv("JUPYTER_DEFAULT_PROVISIONER_NAME", "vgpu-provisioner")
    name = write_spec(jp_data_dir, "plain", None, "Python 3 (plain)")
    response = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": name}))
    kernel_id = json.loads(response.body)["id"]
    (held,) = open_ledger().slices()
    assert held.holder == kernel_id
    assert held.request.fraction == 0.5  # c.VGPUProvisioner.gpu_fraction
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    assert open_ledger().slices() == []
