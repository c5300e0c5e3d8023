"""``slurm``: GPU kernels as Slurm jobs, on whichever node Slurm places them (docs/cluster.md).

One folder, as every launcher that runs kernels elsewhere: how its kernels live
(:mod:`.launcher`), how they are seen (:mod:`.rows`: their rows and words for every view), its
Slurm client (:mod:`.client`: salloc, srun, squeue, scancel), the cancels it retries
(:mod:`.ending`) and the kernel's start on its node (:mod:`.node`). Nothing outside it names Slurm's
side of a kernel: the server, the command line and the kernel ask the launcher
(:class:`~jupyter_vgpu.launch.launchers.Launcher`)."""

from __future__ import annotations

from .launcher import SlurmLauncher

__all__ = ["SlurmLauncher"]
