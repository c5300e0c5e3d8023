"""``python -m jupyter_vgpu.launch.node``: kept for Slurm kernel jobs started before an upgrade,
whose step runs this module; the node side is :mod:`jupyter_vgpu.launch.slurm.node`."""

from __future__ import annotations

import sys

from .slurm.node import main

if __name__ == "__main__":
    sys.exit(main())
