"""A Slurm kernel's srun that ended while Slurm does not answer (hardening round five, L-2): the
launcher's poll says it ended instead of raising, so jupyter_client's wait goes on to reap it and
close its pipes; how its job ended is asked again at the next poll."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from types import SimpleNamespace

import pytest

from jupyter_vgpu.launch.slurm import client as slurmctl
from jupyter_vgpu.launch.slurm.launcher import SlurmLauncher


def test_an_ended_srun_is_reaped_though_slurm_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    asked: list[str] = []

    def down(job: str, env: object) -> tuple[str, str]:
        asked.append(job)
        raise slurmctl.SlurmDown("Slurm does not answer (slurmctld at 127.0.0.1:6817: scontrol gave no answer within 15 s).")

    monkeypatch.setattr(slurmctl, "final_state", down)
    srun = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE)
    provisioner = SimpleNamespace(process=srun, launch_state={"job_id": "42"}, kernel_id="k-1", log=logging.getLogger("test"))
    launcher = SlurmLauncher()
    provisioner.poll = lambda: launcher.poll(provisioner)  # what LocalProvisioner.wait polls

    assert asyncio.run(asyncio.wait_for(LocalProvisioner.wait(provisioner), 30)) == 0  # type: ignore[arg-type]
    assert provisioner.process is None and srun.returncode == 0 and srun.stdout is not None and srun.stdout.closed
    assert asked == ["42"] and "ended" not in provisioner.launch_state  # asked again at the next poll
