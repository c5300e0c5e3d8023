"""The node side of a Slurm kernel starts as ``python -m jupyter_vgpu.launch.slurm.node``: its
package must not import it on the way, or every Slurm kernel's log begins with Python's
"RuntimeWarning: 'jupyter_vgpu.launch.slurm.node' found in sys.modules after import of package"
(issue 47)."""

from __future__ import annotations

import subprocess
import sys


def test_the_node_module_runs_as_main_without_a_warning() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "default", "-m", "jupyter_vgpu.launch.slurm.node", "--", "true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr, done.stderr
