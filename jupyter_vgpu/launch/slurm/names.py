"""What the login node and a kernel's node say to each other: the environment a kernel's step
gets and the file its node writes back. Apart from :mod:`.node`, which ``python -m`` runs on the
node: a module the package imports on the way would be in ``sys.modules`` before it runs as
``__main__`` (Python's RuntimeWarning at the top of every Slurm kernel's log)."""

from __future__ import annotations

ENV_CONNECTION = "JUPYTER_VGPU_CONNECTION"
ENV_CONNECTION_FILE = "JUPYTER_VGPU_CONNECTION_FILE"
ENV_KERNEL = "JUPYTER_VGPU_KERNEL_ID"
#: What the kernel asked Slurm for, in words ("1/4 GPU: 8 of 32 shards"), for %vgpu.
ENV_ASKED = "JUPYTER_VGPU_SLURM_ASKED"
#: Why Slurm ended the job of the kernel this one replaces, in one sentence (%vgpu and the first
#: cell say it).
ENV_ENDED = "JUPYTER_VGPU_SLURM_ENDED"
#: A token per launch: ``job.json`` carries it back, so the login node knows the file is this
#: launch's (a restart's step writes the same file).
ENV_LAUNCH = "JUPYTER_VGPU_SLURM_LAUNCH"
#: Why the kernel runs with the job's GPUs but no slice (frameworks not fitted), in one sentence.
ENV_UNFENCED = "JUPYTER_VGPU_SLURM_UNFENCED"
JOB_FILE = "job.json"
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
