"""Kernel start to ready through Slurm vs a local sliced kernel:
``python benchmarks/slurm_kernel.py [--pairs N]`` (as root, with Slurm installed: ``scripts/test``).

It starts the test cluster of tests/slurm/cluster.py (munged, slurmctld, two slurmd on loopback)
and two kernelspecs that differ only in ``launcher``: ``local`` (a process of this host holding a
1/4 slice of a simulated GPU) and ``slurm`` (two phases: ``salloc --no-shell`` for 8 of 32 shards,
the node learnt, the connection file written, ``srun --jobid`` starting the kernel through
``jupyter_vgpu.launch.slurm.node``). They are started alternately (ABBA order), each timed from
``start_kernel()`` to the first ``kernel_info`` reply, then shut down (the job cancelled).
Target: median Slurm / median local <= 1.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def write_specs(root: Path) -> None:
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    for name, launcher in (("local", "local"), ("slurm", "slurm")):
        folder = root / "kernels" / name
        folder.mkdir(parents=True)
        config = {"gpu_fraction": 0.25, "launcher": launcher}
        metadata = {"kernel_provisioner": {"provisioner_name": "vgpu-provisioner", "config": config}}
        spec = {"argv": argv, "display_name": name, "language": "python", "metadata": metadata}
        (folder / "kernel.json").write_text(json.dumps(spec))


async def no_jobs() -> None:
    """Until squeue lists no job (a cancelled job holds its shards until it has completed)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = await asyncio.create_subprocess_exec("squeue", "--noheader", stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(listed.communicate(), 10)
        if not out.strip():
            return
        await asyncio.sleep(0.05)


async def run(pairs: int) -> None:
    from kernel_start import abba, report, time_start  # benchmarks/kernel_start.py, beside this script

    # untimed after each start: a cancelled job holds its shards until it has completed
    times = await abba("local", "slurm", pairs, lambda name: time_start(name, settle=no_jobs))
    title = f"kernel start to ready, {pairs} pairs (ABBA), Slurm test cluster on loopback, simulated 2x16GiB GPUs:"
    report(times, "local", "slurm", ("local 1/4 slice", "Slurm 8/32 shards"), title, 1.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # this checkout's jupyter_vgpu, for the provisioner and the kernels
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    from tests.slurm.cluster import SlurmCluster, missing

    reason = missing()
    if reason:
        sys.exit(f"benchmarks/slurm_kernel.py cannot run here: {reason}.")
    with tempfile.TemporaryDirectory(prefix="vgpu-slurm-bench-") as tmp:
        root = Path(tmp)
        cluster = SlurmCluster(root / "cluster")
        (root / "cluster").mkdir()
        try:
            cluster.start()
            write_specs(root)
            (root / "node-tmp").mkdir()
            os.environ.update(
                SLURM_CONF=cluster.env["SLURM_CONF"],
                PATH=cluster.env["PATH"],
                JUPYTER_VGPU_SIMULATE=cluster.simulate,
                JUPYTER_PATH=str(root),
                JUPYTER_DATA_DIR=str(root / "data"),
                JUPYTER_RUNTIME_DIR=str(root / "runtime"),
                JUPYTER_VGPU_LEDGER=str(root / "ledger.sqlite"),
                TMPDIR=str(root / "node-tmp"),
            )
            asyncio.run(run(args.pairs))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
