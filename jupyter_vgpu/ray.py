"""Ray inside a GPU slice (``pip install jupyter-vgpu[ray]``; docs/cluster.md).

Ray schedules fractions of GPUs (``num_gpus=0.25``) but leaves memory to the user: four such tasks
each map the whole GPU. From a sliced kernel (or a ``jupyter vgpu run`` command)::

    import jupyter_vgpu.ray as vray
    vray.init()                       # Ray with this slice's GPUs, not the machine's

    @vray.remote(num_gpus=0.25)       # a quarter of the *slice*, with real framework limits
    def train(config): ...

Each task or actor gets the slice's variables and start-up hook, scaled to its part: a task with
``num_gpus=0.25`` of a 1/2-GPU slice of 16 GiB holds 2 GiB, of which its frameworks may use all but
the CUDA context allowance (every task is a process with its own context). Ray never puts more
than one GPU's worth of tasks on a GPU, so the tasks together stay inside the slice. A task that
asks for more than the slice is refused at once, in one sentence.

With ``init(address=...)`` tasks may run on other machines: they get the same limits (the amounts
of this slice), and where those machines have jupyter-vgpu installed its start-up hook applies
them to TensorFlow too; without it, only the frameworks that read their limit from the environment
(PyTorch's allocator, JAX, CuPy) are limited.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .errors import InvalidRequest
from .gpus.lenses import SchedulerLens
from .slices.environment import slice_environment
from .slices.records import Slice
from .units import format_bytes


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InvalidRequest("Ray is not installed here; pip install 'jupyter-vgpu[ray]'.") from None
    return ray


def current_slice(env: Mapping[str, str] | None = None) -> Slice:
    """The slice this process holds (its kernel's, or its ``jupyter vgpu run`` command's)."""
    from .ledger import open_ledger

    env = os.environ if env is None else env
    slice_id = env.get("JUPYTER_VGPU_SLICE_ID")
    if not slice_id:
        raise InvalidRequest(
            "jupyter_vgpu.ray runs in a kernel or a `jupyter vgpu run` command that holds a GPU slice; this process holds none."
        )
    ledger = open_ledger()
    try:
        return ledger.get(slice_id)
    finally:
        ledger.close()


def init(address: str | None = None, **kwargs: Any) -> Any:
    """``ray.init`` with this slice's GPUs: a local Ray of its own gets as many GPUs as the slice
    has (its share of each is what the slice reserved), even beside a Ray cluster already running
    on the node; ``address`` joins a running cluster instead."""
    ray = _ray()
    held = current_slice()
    if address is None:
        # Ray's own init() joins a cluster already running on the node (RAY_ADDRESS, or the last
        # `ray start`), whose GPUs are the machine's: a local Ray of the slice's GPUs instead.
        address = "local"
        kwargs.setdefault("num_gpus", len(held.gpus))
        kwargs.setdefault("include_dashboard", False)
    return ray.init(address=address, **kwargs)


def task_options(num_gpus: float, env: Mapping[str, str] | None = None, held: Slice | None = None) -> dict[str, Any]:
    """Ray options for a task or actor with ``num_gpus`` of this slice's GPUs: the ``num_gpus``
    and a ``runtime_env`` carrying the slice's variables scaled to that part."""
    env = os.environ if env is None else env
    held = held or current_slice(env)
    count = len(held.gpus)
    if not (isinstance(num_gpus, (int, float)) and math.isfinite(num_gpus) and num_gpus > 0):
        raise InvalidRequest(f"num_gpus {num_gpus!r} is not a part of this slice; use a number above 0 (0.25: a quarter).")
    if num_gpus > count:
        raise InvalidRequest(
            f"num_gpus={num_gpus:g} asks for more than this slice's {count} GPU{'s' if count > 1 else ''} "
            f"({held.request.describe()}); ask for at most {count}, or start the kernel on a larger slice."
        )
    if num_gpus > 1 and not float(num_gpus).is_integer():
        raise InvalidRequest(f"num_gpus={num_gpus:g}: above 1, Ray gives whole GPUs; use {math.floor(num_gpus)} or {math.ceil(num_gpus)}.")
    share = min(1.0, float(num_gpus))
    part = replace(
        held,
        gpus=held.gpus[: max(1, int(num_gpus))],
        gpu_indices=held.gpu_indices[: max(1, int(num_gpus))],
        memory=tuple(math.floor(m * share) for m in held.memory[: max(1, int(num_gpus))]),
        memory_total=held.memory_total[: max(1, int(num_gpus))],
        logical_devices=1,
    )
    if part.memory_limit <= 0:
        raise InvalidRequest(
            f"num_gpus={num_gpus:g} of this slice is {format_bytes(part.memory_per_gpu)}, no more than the "
            f"{format_bytes(held.context_allowance)} a task's CUDA context needs; ask for more."
        )
    variables = slice_environment(
        part, ledger_path=env.get("JUPYTER_VGPU_LEDGER", ""), simulate=env.get("JUPYTER_VGPU_SIMULATE", ""),
        cuda_portion=SchedulerLens.here(env).cuda_portion(),
    )  # fmt: skip
    variables.pop("CUDA_VISIBLE_DEVICES", None)  # Ray names the GPUs each task gets
    return {"num_gpus": num_gpus, "runtime_env": {"env_vars": variables}}


def remote(*args: Any, **options: Any) -> Any:
    """``ray.remote`` where ``num_gpus`` is a part of this slice's GPUs, with its limits.
    ``@remote`` alone (no GPU) is plain ``ray.remote``."""
    ray = _ray()
    if len(args) == 1 and callable(args[0]) and not options:
        return ray.remote(args[0])

    def decorate(function: Callable[..., Any]) -> Any:
        return ray.remote(**_merged(options))(function)

    return decorate


def _merged(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the slice's part added where ``num_gpus`` asks for GPUs; the caller's own
    ``runtime_env`` variables stay unless the slice sets the same one."""
    merged = dict(options)
    num_gpus = merged.get("num_gpus")
    if not num_gpus:
        return merged
    ours = task_options(num_gpus)
    runtime_env = dict(merged.get("runtime_env") or {})
    runtime_env["env_vars"] = {**dict(runtime_env.get("env_vars") or {}), **ours["runtime_env"]["env_vars"]}
    merged["runtime_env"] = runtime_env
    return merged
