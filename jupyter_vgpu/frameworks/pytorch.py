"""PyTorch: ``torch.cuda.set_per_process_memory_fraction`` on each visible device.

Setting the fraction needs CUDA initialised, and initialising it from the import hook would
cost a CUDA context (~300 MiB and seconds) in kernels that may never use the GPU. PyTorch has
its own queue for exactly this: ``torch.cuda._lazy_call`` runs a callable inside
``torch.cuda._lazy_init`` (the first CUDA use), or at once if CUDA is already up. PyTorch
queues its own ``manual_seed`` and capability checks there. It is underscored but stable
across PyTorch 1.x and 2.x; without it the limit is applied when ``%vgpu`` next looks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..units import format_bytes
from .base import Framework, release
from .records import APPLIED, FAILED, PENDING, SKIPPED, FrameworkRecord

if TYPE_CHECKING:
    from .base import ProcessState


#: The first PyTorch whose allocator takes per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF
#: (earlier releases refuse the unknown option; docs/gpu.md cites the source).
TORCH_FRACTION_OPTION = (2, 10)
#: The first PyTorch whose allocator takes throw_on_cudamalloc_oom (the 2.12.0 wheels' c10 sources):
#: a cudaMalloc the driver refuses (HAMi-core, MPS) raises at once instead of being retried.
TORCH_THROW_OPTION = (2, 12)


def cuda_initialised(torch: Any) -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


class PyTorch(Framework):
    name = "torch"
    title = "PyTorch"
    module = "torch"

    def would_give(self, limit: int, fraction: str, logical_devices: int) -> str:
        return f"at most {format_bytes(limit)} per GPU (set_per_process_memory_fraction, at its first CUDA use)"

    def for_installed(self, env: Mapping[str, str], fraction: str, versions: Callable[[str], str | None]) -> dict[str, str | None]:
        """The limit in the allocator's settings, so child processes (``!python train.py``, DataLoader
        workers) are held to it too. The user's own options stay; in 2.10 PYTORCH_CUDA_ALLOC_CONF wins
        over PYTORCH_ALLOC_CONF, so that is the one to extend unless only the latter is set."""
        if release(versions("torch")) < TORCH_FRACTION_OPTION:
            return {}
        name = "PYTORCH_ALLOC_CONF" if env.get("PYTORCH_ALLOC_CONF") and not env.get("PYTORCH_CUDA_ALLOC_CONF") else "PYTORCH_CUDA_ALLOC_CONF"
        ours = ["per_process_memory_fraction"]
        added = [f"per_process_memory_fraction:{fraction}"]
        if release(versions("torch")) >= TORCH_THROW_OPTION:
            ours.append("throw_on_cudamalloc_oom")
            added.append("throw_on_cudamalloc_oom:True")
        options = [o for o in env.get(name, "").split(",") if o.strip() and not o.strip().startswith(tuple(ours))]
        return {name: ",".join([*options, *added])}

    def configure(self, torch: Any, state: ProcessState) -> FrameworkRecord:
        if getattr(torch.version, "cuda", None) is None and getattr(torch.version, "hip", None) is None:
            return FrameworkRecord(self.title, SKIPPED, "this PyTorch build has no CUDA: nothing to limit")
        if not state.facts.sliced:
            return FrameworkRecord(self.title, SKIPPED, "no slice in this kernel: PyTorch may use whole GPUs")
        if cuda_initialised(torch):
            return self.apply(torch, state, late=True)
        lazy_call = getattr(torch.cuda, "_lazy_call", None)
        if lazy_call is None:
            return FrameworkRecord(self.title, PENDING, "applied by %vgpu once CUDA is initialised (no lazy-init queue here)")
        lazy_call(lambda: self._when_cuda_starts(torch, state))
        return FrameworkRecord(
            self.title,
            PENDING,
            "applied when PyTorch initialises CUDA (its first CUDA tensor); importing it created no CUDA context",
        )

    def _when_cuda_starts(self, torch: Any, state: ProcessState) -> None:
        # Runs inside torch.cuda._lazy_init: an exception here would surface as a
        # DeferredCudaCallError in the user's first CUDA call, so none may escape.
        try:
            record = self.apply(torch, state)
        except Exception as error:
            record = FrameworkRecord(self.title, FAILED, f"{type(error).__name__}: {error}")
            print(f"jupyter-vgpu: could not limit PyTorch's GPU memory ({error}).", file=sys.stderr)
        try:
            state.record(self.name, record)
        except Exception:
            pass

    def apply(self, torch: Any, state: ProcessState, *, late: bool = False) -> FrameworkRecord:
        """Set the fraction on every visible device (CUDA must be initialised or initialising)."""
        limit = state.facts.framework_limit  # an elastic slice's limit: the caching allocator grows to it on demand
        assert limit is not None
        fractions = []
        for index in range(torch.cuda.device_count()):
            total = int(torch.cuda.get_device_properties(index).total_memory)
            fraction = max(0.0, min(1.0, limit / total))
            torch.cuda.set_per_process_memory_fraction(fraction, index)
            fractions.append(fraction)
        if not fractions:
            return FrameworkRecord(self.title, SKIPPED, "PyTorch sees no CUDA device")
        shown = ", ".join(f"{f:.3f}" for f in fractions)
        detail = f"memory fraction {shown} ({format_bytes(limit)} per GPU)"
        if late:
            detail += "; set after PyTorch had initialised CUDA, so memory it held before is not counted"
        return FrameworkRecord(self.title, APPLIED, detail)

    def refresh(self, torch: Any, state: ProcessState) -> FrameworkRecord | None:
        record = state.records.get(self.name)
        if record is not None and record.status == PENDING and cuda_initialised(torch):
            return self.apply(torch, state, late=True)
        return None

    def holds_gpu(self, torch: Any) -> str | None:
        if cuda_initialised(torch):
            return "PyTorch has initialised CUDA with the current limit."
        return None  # the queued limit reads the slice when CUDA starts

    def give_back(self, torch: Any) -> str | None:
        if not cuda_initialised(torch):
            return None
        torch.cuda.empty_cache()  # the caching allocator's unused blocks go back to the driver
        return "PyTorch released its cached GPU memory (memory its tensors hold stays)"

    def simulated_memory(self, torch: Any) -> int | None:
        return None  # its allocator statistics are CUDA's: PyTorch keeps no count of its CPU tensors

    def devices(self, torch: Any) -> list[str]:
        if not cuda_initialised(torch):
            return ["CUDA not initialised yet (the limit is applied when it is)"]
        lines = []
        for index in range(torch.cuda.device_count()):
            name = torch.cuda.get_device_name(index)
            total = torch.cuda.get_device_properties(index).total_memory
            lines.append(f"cuda:{index} {name} ({format_bytes(total)})")
        return lines

    def memory(self, torch: Any) -> tuple[int | None, int | None]:
        if not cuda_initialised(torch):
            return None, None
        count = torch.cuda.device_count()
        used = sum(int(torch.cuda.memory_reserved(i)) for i in range(count))
        peak = sum(int(torch.cuda.max_memory_reserved(i)) for i in range(count))
        return used, peak

    def oom_errors(self, torch: Any) -> tuple[type[BaseException], ...]:
        error = getattr(torch.cuda, "OutOfMemoryError", None)
        return (error,) if isinstance(error, type) else ()
