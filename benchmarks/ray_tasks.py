"""Ray tasks with and without the slice helper: ``python benchmarks/ray_tasks.py [--rounds N]``.

Inside ``jupyter vgpu run -p 1/2`` on a simulated GPU, one local Ray runs rounds of four tasks of
``num_gpus=0.25``, alternately as plain ``ray.remote`` tasks and as ``jupyter_vgpu.ray.remote``
tasks (which carry the slice's part as a ``runtime_env``). The first round of each starts its
workers. Ray starts a new worker for every GPU task (``max_calls`` is 1 for them) and a worker
with a runtime_env through its setup script, so a third kind, plain tasks with a one-variable
runtime_env, separates Ray's price of any runtime_env from the helper's own. Prints the medians
and the ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

INNER = r"""
import statistics, sys, time
import ray
import jupyter_vgpu.ray as vray

rounds = int(sys.argv[1])
vray.init(num_cpus=4)

def work():
    return 1

plain = ray.remote(num_gpus=0.25)(work)
sliced = vray.remote(num_gpus=0.25)(work)
# Ray's own price of a runtime_env (a worker per environment, started through its setup script),
# with one variable: what is left of the helper's cost beyond it is the helper's
one_variable = ray.remote(num_gpus=0.25, runtime_env={"env_vars": {"ANY_VARIABLE": "1"}})(work)

def batch(task):
    t0 = time.perf_counter()
    ray.get([task.remote() for _ in range(4)])
    return time.perf_counter() - t0

tasks = {"plain": plain, "sliced": sliced, "env": one_variable}
cold = {name: batch(task) for name, task in tasks.items()}
warm = {name: [] for name in tasks}
for i in range(rounds):
    for name in (("plain", "sliced", "env") if i % 2 == 0 else ("env", "sliced", "plain")):
        warm[name].append(batch(tasks[name]))
p, s, e = (statistics.median(warm[name]) for name in ("plain", "sliced", "env"))
print(f"first round of 4 tasks (workers start): plain {cold['plain'] * 1000:.0f} ms, with the slice helper "
      f"{cold['sliced'] * 1000:.0f} ms: ratio {cold['sliced'] / cold['plain']:.3f}")
print(f"later rounds of 4 tasks, median of {rounds}: plain {p * 1000:.1f} ms, with the slice helper {s * 1000:.1f} ms: "
      f"ratio {s / p:.3f}; with a one-variable runtime_env {e * 1000:.1f} ms: helper / that {s / e:.3f}")
ray.shutdown()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_VGPU_")}
        env.update(JUPYTER_VGPU_SIMULATE="1x16GiB", JUPYTER_VGPU_LEDGER=os.path.join(tmp, "ledger.sqlite"))
        script = os.path.join(tmp, "inner.py")
        with open(script, "w") as out:
            out.write(INNER)
        command = [sys.executable, "-m", "jupyter_vgpu.cli", "run", "-p", "1/2", "--", sys.executable, script, str(args.rounds)]
        subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
