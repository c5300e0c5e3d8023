"""What the start-up hook (``jupyter_vgpu_startup.pth``) costs every Python process.

Two throwaway virtual environments on this interpreter see the same packages (this environment's
site-packages, through a path file); one also has jupyter-vgpu's start-up hook. Pairs of
``python -c pass`` run interleaved (ABBA) so drift in the machine's load hits both alike:

- **no slice**: the cost every Python program on the machine pays (target: ratio <= 1.01, i.e.
  within the noise; the hook is one dictionary lookup, and site compiles its line: what it does in
  a slice is a string, compiled only there);
- **in a slice**: the cost for a process that holds one (the hook registers the framework
  import hooks: jupyter-vgpu's kernel layer and wrapt are imported).

    python benchmarks/startup.py [--pairs 40] [--instructions]

Figures: median wall time per start, and the ratio of medians. With ``--instructions`` (needs
valgrind), also the instructions one ``python -c pass`` runs, counted by callgrind with hashing and
address layout fixed (the same count every run, unlike wall time), for the hook and for the floor
any path-file hook pays: an empty path file (site opens and reads it), a line of ``import os``
(site compiles and runs it) and a line that only looks the variable up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / "jupyter_vgpu_startup.pth"


def make_venv(root: Path, *, hook: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    packages = next((root / "lib").glob("python3*/site-packages"))
    here = [p for p in site.getsitepackages() if Path(p).is_dir()]
    # The same packages on both sides, through a path file named to sort before the hook's (site
    # reads path files in name order; it does not run the .pth files inside the folders they add).
    (packages / "aa_shared.pth").write_text("\n".join([str(REPO), *here]) + "\n")
    if hook:
        shutil.copy(HOOK, packages / HOOK.name)
    return root / "bin" / "python"


#: What a path-file hook cannot do without, each a line of its own path file (None: no file).
FLOORS = {
    "no path file": None,
    "an empty path file": "",
    "import os": "import os",
    "the lookup only": 'import os;"JUPYTER_VGPU_SLICE_ID"in os.environ',
}


def instructions(python: Path, env: dict[str, str]) -> int | None:
    """Instructions ``python -c pass`` runs under callgrind (None: valgrind is not here)."""
    if shutil.which("valgrind") is None:
        return None
    setarch = ["setarch", "-R"] if shutil.which("setarch") else []  # the same address layout each run
    run = subprocess.run(
        [*setarch, "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(python), "-c", "pass"],
        env={**env, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    counted = [line.rsplit(None, 1)[-1] for line in run.stderr.splitlines() if "Collected" in line]
    return int(counted[-1]) if counted else None


def count_floors(hooked: Path, env: dict[str, str]) -> None:
    target = hooked.parent.parent / "lib"
    pth = next(target.glob("python3*/site-packages")) / HOOK.name
    hook = pth.read_text()
    counts: dict[str, int | None] = {}
    try:
        for label, line in [*FLOORS.items(), ("the hook (no slice)", hook)]:
            pth.unlink(missing_ok=True)
            if line is not None:
                pth.write_text(line if line.endswith("\n") or not line else line + "\n")
            counts[label] = instructions(hooked, env)
    finally:
        pth.write_text(hook)
    base = counts["no path file"]
    if base is None:
        print("  instructions: valgrind is not installed")
        return
    print("python -c pass, instructions (callgrind, PYTHONHASHSEED=0):")
    for label, count in counts.items():
        assert count is not None
        print(f"  {label:<20} {count:>12,}   ratio {count / base:.4f}  (+{count - base:,})")


def one(python: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - started


def compare(plain: Path, hooked: Path, env: dict[str, str], pairs: int) -> tuple[float, float]:
    a: list[float] = []
    b: list[float] = []
    for i in range(pairs):
        order = [(plain, a), (hooked, b)] if i % 2 == 0 else [(hooked, b), (plain, a)]
        for python, into in order:
            into.append(one(python, env))
    return statistics.median(a), statistics.median(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--instructions", action="store_true", help="also count instructions with valgrind")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_VGPU", "CUDA_"))}
    with tempfile.TemporaryDirectory(prefix="vgpu-startup-") as tmp:
        plain = make_venv(Path(tmp) / "plain", hook=False)
        hooked = make_venv(Path(tmp) / "hooked", hook=True)
        check = subprocess.run([str(hooked), "-c", "import sys; print('jupyter_vgpu' in sys.modules)"],
                               env={**base, "JUPYTER_VGPU_SLICE_ID": "x"}, capture_output=True, text=True)  # fmt: skip
        assert check.stdout.strip() == "True", f"the hook did not run in the test environment: {check.stderr}"
        one(plain, base), one(hooked, base)  # warm the page cache
        slice_env = {**base, "JUPYTER_VGPU_SLICE_ID": "bench", "JUPYTER_VGPU_MEMORY_LIMIT": str(3 << 30),
                     "JUPYTER_VGPU_FRACTION": "0.25", "CUDA_VISIBLE_DEVICES": "", "JUPYTER_VGPU_SIMULATE": "1x16GiB"}  # fmt: skip
        print(f"python -c pass, median of {args.pairs} interleaved pairs ({sys.version.split()[0]}):")
        for label, env in (("no slice", base), ("in a slice", slice_env)):
            without, with_hook = compare(plain, hooked, env, args.pairs)
            print(f"  {label:<11} without hook {without * 1000:7.2f} ms   with hook {with_hook * 1000:7.2f} ms   "
                  f"ratio {with_hook / without:.3f}  (+{(with_hook - without) * 1000:.2f} ms)")  # fmt: skip
        if args.instructions:
            count_floors(hooked, base)


if __name__ == "__main__":
    main()
