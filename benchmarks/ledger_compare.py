"""The ledger's reserve+release latency at one process, this checkout against an earlier commit,
side by side in one run: ``python benchmarks/ledger_compare.py [--against REV]``.

Each pair runs both versions in fresh processes, in alternating order (ABBA), on fresh ledgers
in the same folder; the figure is the ratio of the medians of the per-run p50s (and p99s).
Written for issue 18 (one connection per process, no descriptor of the database outside SQLite,
stamps, a bounded writers' turn), whose target is at most 10% more than before at p50; issue 31
(the book moved to jupyter_vgpu/ledger/) holds it within 5% of the commit before the move:
``--against 84f90a4``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOOP = """
import json, os, sys, time
from pathlib import Path
from jupyter_vgpu.gpus import Inventory
from jupyter_vgpu.slices import Holder, SliceRequest
try:
    from jupyter_vgpu.ledger import SQLiteLedger
except ImportError:  # a commit before the book moved out of slices/ (issue 31)
    from jupyter_vgpu.slices import SQLiteLedger
ledger = SQLiteLedger(Path(sys.argv[1]), Inventory("2x16GiB"), context_allowance=300 << 20)
request, holder = SliceRequest.parse(0.0625), Holder("command", "benchmark")
for _ in range(50):
    ledger.release(ledger.reserve_now(request, holder).id)
times = []
for _ in range(int(sys.argv[2])):
    started = time.perf_counter()
    ledger.release(ledger.reserve_now(request, holder).id)
    times.append(time.perf_counter() - started)
times.sort()
print(json.dumps({"p50": times[len(times) // 2], "p99": times[int(len(times) * 0.99)]}))
"""


def run(source: Path, folder: Path, rounds: int, name: str) -> dict[str, float]:
    ledger = folder / f"{name}.sqlite"
    env = {**os.environ, "PYTHONPATH": str(source)}
    env.pop("JUPYTER_VGPU_BROKER", None)
    # from the work folder: `python -c` puts the working directory first on sys.path, so run from
    # the checkout's root "before" would import this checkout too
    out = subprocess.run([sys.executable, "-c", LOOP, str(ledger), str(rounds)], env=env, cwd=folder, check=True, capture_output=True, text=True)
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", default="0a2634e", help="the earlier commit (default: the last one before issue 18)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1000, help="reserve+release pairs per run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vgpu-compare-"))
    old = work / "old"
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.against], check=True, capture_output=True)
        results: dict[str, list[dict[str, float]]] = {"before": [], "now": []}
        for pair in range(args.pairs):
            order = [("before", old), ("now", ROOT)]
            for name, source in order if pair % 2 == 0 else reversed(order):
                results[name].append(run(source, work, args.rounds, name))
        print(f"reserve+release at 1 process, {args.pairs} runs of {args.rounds} each, ABBA; before = {args.against}")
        medians = {}
        for name, runs in results.items():
            medians[name] = {k: statistics.median(r[k] for r in runs) for k in ("p50", "p99")}
            print(f"  {name:6} p50 {medians[name]['p50'] * 1e3:.3f} ms   p99 {medians[name]['p99'] * 1e3:.3f} ms")
        for key in ("p50", "p99"):
            print(f"  ratio now/before {key}: {medians['now'][key] / medians['before'][key]:.3f}")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
