"""Slurm kernels in a real JupyterLab's GPUs panel and status bar (issue 32, "Views on the login node").

A real `jupyter lab` on a login node with no GPU of its own, a "Python 3 (1/4 GPU, Slurm)"
kernelspec (wait_timeout > 0) and the Slurm test cluster, driven by Debian's Chromium: a running
kernel's job shows with its id, node, GPU, shards and fraction, state and the use the kernel
reports; a second kernel, started while other jobs hold every GPU, shows as waiting with Slurm's
reason and its place, and starts when a blocking job ends. Screenshots land in artifacts/ui/
(``slurm-*``), light and dark.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import ui.conftest
from jupyter_process import isolated_env, start_jupyter, write_sliced_kernelspec
from ui.conftest import ARTIFACTS, CHROMIUM, Lab, _write_user_settings, notebook_json
from ui.pages import SIDEBAR, expect, open_sidebar, screenshots, wait_for

from .cluster import SlurmCluster

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "python3-vgpu-1-4-slurm"
DISPLAY = "Python 3 (1/4 GPU, Slurm)"
#: The same share, started the same way, that does not wait in Slurm's queue.
NOW = "python3-vgpu-1-4-slurm-now"
NOW_DISPLAY = "Python 3 (1/4 GPU, Slurm, now)"


@pytest.fixture(scope="module")
def lab(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """`jupyter lab` on a login node without a GPU; its kernels' jobs see simulated GPUs."""
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("slurm-lab")
    (tmp / "root" / "work").mkdir(parents=True)
    (tmp / "node-tmp").mkdir()
    for name in ("train.ipynb", "queued.ipynb", "third.ipynb"):
        (tmp / "root" / "work" / name).write_text(notebook_json(NAME, DISPLAY))
    (tmp / "root" / "work" / "now.ipynb").write_text(notebook_json(NOW, NOW_DISPLAY))
    _write_user_settings(tmp / "config")
    for config, name, display in (({"wait_timeout": 120}, NAME, DISPLAY), ({}, NOW, NOW_DISPLAY)):
        spec = write_sliced_kernelspec(tmp / "data", {"gpu_fraction": 0.25, "launcher": "slurm", **config}, name=name, display_name=display)
        kernel = json.loads((spec / "kernel.json").read_text())
        kernel["env"] = {"JUPYTER_VGPU_SIMULATE": slurm_cluster.simulate}  # the nodes' GPUs, not the login node's
        (spec / "kernel.json").write_text(json.dumps(kernel))
    env = isolated_env(
        tmp, SLURM_CONF=slurm_cluster.env["SLURM_CONF"], PATH=slurm_cluster.env["PATH"], TMPDIR=str(tmp / "node-tmp"),
        JUPYTER_VGPU_SLURM_TIMEOUT="5",
    )  # fmt: skip
    started = start_jupyter(tmp, app="lab", env=env, args=["--VGPUServer.monitor_interval=0.5", "--LabApp.expose_app_in_browser=True"])
    server = Lab(**vars(started))
    try:
        yield server
    finally:
        server.stop(timeout=30)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.log, ARTIFACTS / "server-test_slurm_sidebar.log")
        slurm_cluster.cancel_all(timeout=20)


#: tests/ui's Chromium and its tab, here on the lab above.
browser = ui.conftest.browser
page = ui.conftest.page

GiB = 1024**3
STATUS = ".jp-vgpu-StatusItem"


def shot(page: Any, name: str) -> None:
    screenshots(page, ARTIFACTS, f"slurm-{name}")


def open_notebook(page: Any, path: str) -> None:
    page.evaluate("path => void window.jupyterapp.commands.execute('docmanager:open', {path})", path)
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")).to_contain_text(path.rsplit("/", 1)[-1])


def job_row(lab: Lab, path: str) -> dict[str, Any] | None:
    """The REST row of the notebook's kernel while its job runs."""
    return next((s for s in lab.slices() if s.get("job_id") and s.get("path") == path), None)


def pending(lab: Lab, path: str) -> dict[str, Any] | None:
    """The notebook's place in line while its kernel's job is pending, once Slurm says why."""
    status, reply = lab.api("GET", "api/vgpu/slices")
    assert status == 200, reply
    return next((w for w in reply["waiting"] if w.get("job_id") and w.get("path") == path and w.get("slurm_reason")), None)


def hold(slurm: SlurmCluster, shards: int) -> str:
    """A job (not a kernel) holding ``shards`` shards of one GPU; its id."""
    out = slurm.run("salloc", "--no-shell", "--job-name=filler", f"--gres=shard:{shards}", "--nodes=1", timeout=20).stderr
    return out.split("Granted job allocation")[1].split()[0]


def fill(slurm: SlurmCluster) -> list[str]:
    """Jobs that take every shard the one running kernel (8 of one GPU's 32) leaves: a whole
    GPU's 32 on each of the three other GPUs (shards never span GPUs), then the 24 beside it."""
    return [hold(slurm, 32) for _ in range(3)] + [hold(slurm, 24)]


def test_a_running_kernels_job_shows_its_node_gpu_shards_state_and_the_use_it_reports(lab: Lab, page: Any) -> None:
    page.goto(lab.page_url("lab/tree/work/train.ipynb"))
    sidebar = open_sidebar(page)
    # The row comes when Slurm runs the job; its GPU once the job's node has said which it got.
    row = wait_for(
        "the kernel's job on its GPU in /api/vgpu/slices",
        lambda: (found := job_row(lab, "work/train.ipynb")) and found["gpu_indices"] and found,
    )
    job, node, (gpu,) = row["job_id"], row["node"], row["gpu_indices"]
    # The login node has no GPU: no "Kernels run on the CPU", but where its GPU kernels run.
    expect(sidebar).to_contain_text("No GPU on this server.")
    expect(sidebar).to_contain_text(f"Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them: start “{NOW_DISPLAY}” or “{DISPLAY}” from the launcher.")
    expect(sidebar).not_to_contain_text("Kernels run on the CPU")
    card = sidebar.locator(".jp-vgpu-Elsewhere")
    expect(card.locator(".jp-vgpu-Elsewhere-title")).to_contain_text("Slurm jobs 1")
    shown = card.locator(f'.jp-vgpu-ElsewhereRow.jp-vgpu-mod-running[data-job-id="{job}"]')
    expect(shown.locator(".jp-vgpu-SliceRow-holder")).to_have_text("train.ipynb")
    expect(shown).to_contain_text(DISPLAY)
    expect(shown.locator(".jp-vgpu-ElsewhereRow-state")).to_have_text("running")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-job")).to_have_text(f"Slurm job {job} on {node} · GPU {gpu} · 8/32 shards (1/4 GPU)")
    # The kernel says its budget from its node (the job's 8 of 32 shards of a 16 GiB GPU), no use yet.
    expect(shown.locator(".jp-vgpu-ElsewhereRow-use")).to_have_text("– / 4.0 GiB")
    row = job_row(lab, "work/train.ipynb")
    assert row and row["memory_reserved"] == 4 * GiB and row["memory_used"] is None, row
    expect(shown.locator(".jp-vgpu-SliceRow-note")).to_contain_text(f"No use reported yet: the kernel reports from {node}")
    # Its node's GPUs are simulated (JUPYTER_VGPU_SIMULATE there), as the kernel reports: said on its row and in the status bar.
    expect(shown.locator(".jp-vgpu-Chip.jp-vgpu-mod-simulated")).to_have_text("simulated")
    expect(shown.locator(".jp-vgpu-Chip.jp-vgpu-mod-simulated")).to_have_attribute("title", re.compile(r"^The GPUs where this kernel runs are simulated"))
    status = page.locator(STATUS)
    expect(status).to_have_text(f"GPU – / 4.0 GiB · Slurm job {job} on {node} · simulated")

    # The kernel reports its use from its node (as its frameworks' report does) through the
    # folder the login node reads: the row and the status bar show it live.
    page.evaluate(
        """code => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute({code}).done""",
        "from jupyter_vgpu.kernel.state import current\ncurrent().write_report({'memory_used': 1536 * 2**20})",
    )
    expect(shown.locator(".jp-vgpu-ElsewhereRow-use")).to_have_text("1.5 / 4.0 GiB")
    expect(shown.locator(".jp-vgpu-SliceRow-note")).to_have_count(0)
    expect(shown.locator(".jp-vgpu-ElsewhereRow-use")).to_have_attribute("title", f"Reported by the kernel itself, from {node}: what its frameworks say they hold.")
    expect(status).to_have_text(f"GPU 1.5 / 4.0 GiB · Slurm job {job} on {node} · simulated")
    expect(status.locator(".jp-vgpu-StatusItem-content")).to_have_attribute("title", re.compile(r"\nThe GPUs where this kernel runs are simulated"))
    expect(status.locator(".jp-vgpu-StatusItem-content")).to_have_attribute("title", re.compile(rf"^Slurm job {job} on {node} · GPU {gpu} · 8/32 shards \(1/4 GPU\)\."))
    # The kernel's process here is srun: its CPU and RAM are not the kernel's.
    expect(page.locator(".jp-vgpu-HostItem-content")).to_have_count(0)
    expect(sidebar.locator(".jp-vgpu-DeviceCard")).to_have_count(0)
    shot(page, "running")


def test_a_kernel_waits_pending_with_slurms_reason_and_place_and_starts_when_a_job_ends(lab: Lab, page: Any, slurm_cluster: SlurmCluster) -> None:
    fillers = fill(slurm_cluster)
    open_notebook(page, "work/queued.ipynb")
    waiter = wait_for("the second kernel pending in Slurm's queue", lambda: pending(lab, "work/queued.ipynb"))
    job = waiter["job_id"]
    assert (waiter["slurm_reason"], waiter["position"], waiter["partition"]) == ("Resources", 1, "gpu"), waiter
    sidebar = open_sidebar(page)
    card = sidebar.locator(".jp-vgpu-Elsewhere")
    expect(card.locator(".jp-vgpu-Elsewhere-title")).to_contain_text("Slurm jobs 2")
    expect(card.locator(".jp-vgpu-Elsewhere-summary")).to_have_text("1 pending")
    shown = card.locator(f'.jp-vgpu-ElsewhereRow.jp-vgpu-mod-pending[data-job-id="{job}"]')
    expect(shown.locator(".jp-vgpu-Waiting-holder")).to_have_text("queued.ipynb")
    expect(shown.locator(".jp-vgpu-Waiting-place")).to_have_text("#1")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-state")).to_have_text("pending")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-job")).to_have_text(f"Slurm job {job} · 8/32 shards (1/4 GPU)")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-why")).to_have_text("Resources: no node has the GPU shards free now")
    expect(shown.locator(".jp-vgpu-ElsewhereRow-place")).to_have_text(re.compile(r"^Place 1 in partition gpu's queue · waiting \d+ s$"))
    expect(sidebar.locator(".jp-vgpu-Waiting")).to_have_count(0)  # not in jupyter-vgpu's own line
    status = page.locator(f"{STATUS} .jp-vgpu-mod-waiting")
    expect(status).to_contain_text(f"GPU: Slurm job {job} pending (Resources) · place 1")
    expect(status).to_have_attribute("title", re.compile(rf"^queued.ipynb waits in Slurm's queue for 8/32 shards \(1/4 GPU\): job {job} is pending.\nSlurm's reason: Resources: no node has the GPU shards free now.\n"))
    shot(page, "pending")

    # A blocking job ends: Slurm starts the kernel's job on the GPU it freed.
    slurm_cluster.run("scancel", fillers[0], timeout=10)
    placed = lambda: (row := job_row(lab, "work/queued.ipynb")) and row["gpu_indices"] and row  # noqa: E731
    started = wait_for("the second kernel's job running on its GPU", placed, timeout=60)
    assert started["job_id"] == job and started["slurm_state"] == "RUNNING"
    running = card.locator(f'.jp-vgpu-ElsewhereRow.jp-vgpu-mod-running[data-job-id="{job}"]')
    expect(running.locator(".jp-vgpu-ElsewhereRow-job")).to_have_text(
        f"Slurm job {job} on {started['node']} · GPU {started['gpu_indices'][0]} · 8/32 shards (1/4 GPU)"
    )
    expect(shown).to_have_count(0)
    expect(page.locator(".jp-Notification-Toast-success", has_text="queued.ipynb's kernel runs")).to_contain_text(
        f"Slurm job {job} on {started['node']}"
    )
    expect(page.locator(STATUS)).to_contain_text(f"Slurm job {job} on {started['node']}")
    expect(card.locator(".jp-vgpu-Elsewhere-title")).to_contain_text("Slurm jobs 2")
    shot(page, "started")


def test_cancel_takes_a_pending_kernel_out_of_slurms_queue(lab: Lab, page: Any, slurm_cluster: SlurmCluster) -> None:
    """With the 24 shards the second kernel left on its GPU taken too, a third kernel pends;
    Cancel ends its job, and its start says so."""
    hold(slurm_cluster, 24)
    open_notebook(page, "work/third.ipynb")
    waiter = wait_for("the third kernel pending in Slurm's queue", lambda: pending(lab, "work/third.ipynb"))
    job = waiter["job_id"]
    row = page.locator(f'{SIDEBAR} .jp-vgpu-ElsewhereRow.jp-vgpu-mod-pending[data-job-id="{job}"]')
    row.get_by_role("button", name="Cancel waiting for third.ipynb").click()
    expect(row).to_have_count(0)
    wait_for("the job gone from Slurm's queue", lambda: job not in slurm_cluster.jobs(), timeout=20)
    expect(page.locator(".jp-Notification-Toast-info", has_text="Stopped waiting")).to_contain_text("third.ipynb did not start")
    page.wait_for_timeout(2000)  # the kernel start fails now: no error dialog for it
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    assert "Stopped waiting in Slurm's queue after" in lab.log_text() and f"job {job} (1/4 GPU: 8 of 32 shards) was cancelled." in lab.log_text()


def test_a_start_slurm_would_keep_waiting_says_what_to_do_and_offers_the_kernel_that_waits(lab: Lab, page: Any, slurm_cluster: SlurmCluster) -> None:
    """Every shard is held (the tests above): a kernel that does not wait is refused with what to
    do, as the local "no room" dialog does, and "Wait in line" starts the same share that waits."""
    open_notebook(page, "work/now.ipynb")
    dialog = page.locator(".jp-Dialog", has=page.locator(".jp-vgpu-Refusal"))
    expect(dialog.locator(".jp-vgpu-Refusal-summary")).to_contain_text(
        f"Slurm cannot start kernel '{NOW_DISPLAY}' now: its job", timeout=30_000
    )
    expect(dialog.locator(".jp-vgpu-Refusal-summary")).to_contain_text(
        "would wait (Resources: no node has the GPU shards free now), and this kernel does not wait in Slurm's queue; the job is cancelled."
    )
    expect(dialog.locator(".jp-vgpu-Refusal-asked")).to_have_text(f"now.ipynb asked for 1/4 GPU: 8 of 32 shards with “{NOW_DISPLAY}”.")
    advice = dialog.locator(".jp-vgpu-Refusal-advice li")
    expect(advice).to_have_count(3)
    expect(advice.nth(0)).to_contain_text("Wait in Slurm's queue: a kernel installed with jupyter vgpu kernelspec install --slurm --wait SECONDS")
    expect(advice.nth(0).locator("code")).to_have_text("jupyter vgpu kernelspec install --slurm --wait SECONDS")  # code, not backticks
    expect(advice.nth(1).locator("code")).to_have_text("squeue -t RUNNING")
    expect(dialog).not_to_contain_text("wait_timeout 0")
    expect(dialog.locator(".jp-vgpu-Refusal-start")).to_have_count(0)  # no local kernel is offered for a Slurm one
    wait = dialog.locator(".jp-vgpu-Refusal-wait")
    expect(wait).to_have_text(f"Wait in line ({DISPLAY})")
    expect(wait).to_have_attribute("data-kernel-name", NAME)
    shot(page, "refused")
    wait.click()
    expect(dialog).to_have_count(0)
    waiter = wait_for("now.ipynb's kernel pending in Slurm's queue", lambda: pending(lab, "work/now.ipynb"), timeout=30)
    job = waiter["job_id"]
    row = page.locator(f'{SIDEBAR} .jp-vgpu-ElsewhereRow.jp-vgpu-mod-pending[data-job-id="{job}"]')
    row.get_by_role("button", name="Cancel waiting for now.ipynb").click()
    wait_for("its job gone from Slurm's queue", lambda: job not in slurm_cluster.jobs(), timeout=20)


def test_a_kernel_whose_job_slurm_ended_says_why_in_its_notebook(lab: Lab, page: Any, slurm_cluster: SlurmCluster) -> None:
    """Its user cancels the running kernel's job from a shell: the notebook says why its kernel
    died and what to do, once; no new job is asked for."""
    row = wait_for("train.ipynb's job", lambda: job_row(lab, "work/train.ipynb"))
    job = row["job_id"]
    open_notebook(page, "work/train.ipynb")
    slurm_cluster.run("scancel", job, timeout=10)
    sentence = (
        f"Slurm ended this kernel's job {job}: it was cancelled outside this server (scancel by you or an administrator) "
        "(CANCELLED); no new job is asked for this kernel (slurm_restarts 0), so its variables are lost: start a new kernel for this "
        "notebook (Kernel > Change Kernel..., or open the notebook again) to run in a new job."
    )
    toast = page.locator(".jp-Notification-Toast-warning", has_text=f"Slurm ended this kernel's job {job}")
    expect(toast).to_have_count(1, timeout=60_000)
    # The gist, whole within JupyterLab's 140 characters; Details says all of it, what to do included.
    expect(toast).to_contain_text(f"train.ipynb: Slurm ended this kernel's job {job} (CANCELLED): start a new kernel to go on.")
    shot(page, "job-ended")
    toast.get_by_role("button", name="Details").click()
    details = page.locator(".jp-Dialog", has_text="train.ipynb: its kernel ended")
    expect(details.locator(".jp-Dialog-body")).to_have_text(sentence)
    details.get_by_role("button", name="Ok").click()
    page.wait_for_timeout(3000)  # the notice, read, is not said again
    expect(page.locator(".jp-Notification-Toast-warning", has_text=f"Slurm ended this kernel's job {job}")).to_have_count(0)
    names = slurm_cluster.run("squeue", "--noheader", "--format=%j", timeout=10).stdout.split()
    assert not [n for n in names if n.startswith("train-")], names  # no new job was asked for
