"""TensorFlow: logical devices with a memory limit, set before its runtime starts.

``tf.config.list_physical_devices`` and ``set_logical_device_configuration`` do not start
the runtime (no CUDA context); TensorFlow creates the logical devices when it runs its first
op. One physical GPU split into N logical GPUs lets ``MirroredStrategy`` run N replicas on
it; with no GPU the CPU is split the same way.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..units import MiB, format_bytes
from .base import Framework, guard_now
from .records import APPLIED, SKIPPED, TOO_LATE, FrameworkRecord

if TYPE_CHECKING:
    from .base import ProcessState


def runtime_started(tf: Any) -> bool:
    """Whether TensorFlow has created its devices (after which they cannot change)."""
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is None:
        return False
    try:
        return bool(getattr(context.context(), "_initialized", False))
    except Exception:
        return False


#: TensorFlow's own switch for growing its GPU allocators on demand, read when it creates its GPU devices.
ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"


def grow_on_demand() -> str:
    """Make TensorFlow grow within an elastic slice's limit instead of taking all of it at once.

    A logical device's ``memory_limit`` is the ``total_memory`` of its BFC allocator, and without
    allow-growth that allocator takes the whole of it at the first allocation:
    ``BFCAllocator::BFCAllocator`` sets ``curr_region_allocation_bytes_ = RoundedBytes(total_memory)``
    unless ``opts.allow_growth`` (2 MiB, doubling, otherwise), and ``BFCAllocator::Extend`` asks its
    sub-allocator for ``min(curr_region_allocation_bytes_, available_bytes)``
    (tensorflow/tensorflow: third_party/xla/xla/tsl/framework/bfc_allocator.cc, lines 94-101 at commit
    0d7247fd990b8821f3f6e9df135804d5329ff0e5). So a limit above the request would be a bigger fixed
    slice. ``tf.config.experimental.set_memory_growth`` cannot help: TensorFlow refuses it on a device
    with logical devices ("Cannot set memory growth on device when virtual devices configured") and
    sends no ``allow_growth`` when virtual devices are configured (tensorflow/python/eager/context.py
    of TensorFlow 2.21, ``set_memory_growth`` and ``_compute_device_options``). The environment
    variable overrides the option for every GPU allocator ("Overridden by TF_FORCE_GPU_ALLOW_GROWTH if
    that envvar is set", tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.h,
    ``GPUBFCAllocator::Options::allow_growth``), logical devices included, and is read when TensorFlow
    creates its GPU devices (its first op), after this hook. Returns what was done, in words."""
    os.environ[ALLOW_GROWTH] = "true"
    return f"growing on demand up to that ({ALLOW_GROWTH}=true: an elastic slice)"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class TensorFlow(Framework):
    name = "tensorflow"
    title = "TensorFlow"
    module = "tensorflow"

    bypasses = {"TF_GPU_ALLOCATOR": frozenset({"cuda_malloc_async"})}
    bypass_reason = "with the CUDA async allocator TensorFlow's memory_limit is only a release threshold, not a cap."
    keeps_until_restart = True  # its BFC allocator keeps every region it grew (give_back)

    def would_give(self, limit: int, fraction: str, logical_devices: int) -> str:
        count = max(1, logical_devices)
        each = max(1, limit // MiB // count) * MiB
        return f"{_plural(count, 'logical GPU')} of {format_bytes(each)} on each GPU"

    def configure(self, tf: Any, state: ProcessState) -> FrameworkRecord:
        record = self._configure(tf, state)
        guarded = guard_now(self, os.environ) if state.facts.sliced else ""  # read when TF creates its GPU devices
        return replace(record, detail=f"{record.detail}; {guarded}") if guarded else record

    def _configure(self, tf: Any, state: ProcessState) -> FrameworkRecord:
        facts = state.facts
        count = max(1, facts.logical_devices)
        try:
            gpus = tf.config.list_physical_devices("GPU")
            if gpus and facts.sliced:
                limit = facts.framework_limit  # an elastic slice's burst limit, else the slice's limit
                assert limit is not None
                per_device = max(1, limit // MiB // count)
                config = [tf.config.LogicalDeviceConfiguration(memory_limit=per_device) for _ in range(count)]
                for gpu in gpus:
                    tf.config.set_logical_device_configuration(gpu, config)
                each = f"on each of {_plural(len(gpus), 'GPU')}" if len(gpus) > 1 else "on its GPU"
                detail = f"{_plural(count, 'logical GPU')} of {format_bytes(per_device * MiB)} {each}"
                if facts.burst_limit is not None:
                    detail += f", {grow_on_demand()}"
                return FrameworkRecord(self.title, APPLIED, detail)
            if gpus:
                return FrameworkRecord(
                    self.title, SKIPPED, f"no slice in this kernel: TensorFlow may use all of {_plural(len(gpus), 'GPU')}"
                )
            if count > 1:
                cpu = tf.config.list_physical_devices("CPU")[0]
                tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
                detail = f"no GPU visible to TensorFlow: the CPU is split into {count} logical devices (MirroredStrategy: {count} replicas)"
                return FrameworkRecord(self.title, APPLIED, detail)
            return FrameworkRecord(self.title, SKIPPED, "TensorFlow sees no GPU (CPU-only build or no CUDA device): nothing to limit")
        except RuntimeError as error:
            if "initialized" not in str(error):
                raise
            return FrameworkRecord(
                self.title,
                TOO_LATE,
                "TensorFlow had already created its devices before jupyter-vgpu loaded, so they are not limited "
                "to this slice and may take the whole GPU; restart the kernel and import TensorFlow in a cell",
            )

    def holds_gpu(self, tf: Any) -> str | None:
        # Said in the words %vgpu uses for TensorFlow's record: before its runtime starts the
        # logical devices can be set again; a TensorFlow that uses no GPU holds none of the slice.
        if not runtime_started(tf) or not tf.config.list_logical_devices("GPU"):
            return None
        return "TensorFlow has created its GPU devices with the current limit (they cannot change in this process)."

    def reapply(self, tf: Any, state: ProcessState) -> FrameworkRecord | None:
        if runtime_started(tf):
            return None  # no GPU devices (holds_gpu): nothing to move to the new size
        return self.configure(tf, state)

    def devices(self, tf: Any) -> list[str]:
        lines = []
        if runtime_started(tf):
            for device in tf.config.list_logical_devices():
                lines.append(f"{device.name} (logical)")
            return lines
        for physical in tf.config.list_physical_devices():
            kind = physical.device_type
            configs = tf.config.get_logical_device_configuration(physical) or []
            if not configs:
                lines.append(f"{physical.name} (physical, no logical split)")
                continue
            for number, config in enumerate(configs):
                limit = getattr(config, "memory_limit", None)
                size = f", {format_bytes(limit * MiB)}" if limit else ""
                lines.append(f"{kind}:{number} (logical, configured{size}; TensorFlow creates it at its first op)")
        return lines

    def memory(self, tf: Any) -> tuple[int | None, int | None]:
        if not runtime_started(tf):
            return None, None
        used: int | None = None
        peak: int | None = None
        for device in tf.config.list_logical_devices("GPU"):
            info = tf.config.experimental.get_memory_info(device.name)
            used = (used or 0) + int(info.get("current", 0))
            peak = (peak or 0) + int(info.get("peak", 0))
        return used, peak

    def simulated_environment(self) -> dict[str, str]:
        # TensorFlow counts what its CPU allocator holds only with the BFC allocator there (the
        # one it uses on GPUs): 40 µs to ask, checked on TensorFlow 2.21.
        return {"TF_CPU_ALLOCATOR_USE_BFC": "true"}

    def give_back(self, tf: Any) -> str | None:
        if not runtime_started(tf):
            return None
        # Its BFC allocator keeps every region it has grown for the life of the process.
        return "TensorFlow cannot give GPU memory back before the kernel restarts (del and gc free nothing to the GPU)"

    def simulated_memory(self, tf: Any) -> int | None:
        if not runtime_started(tf):
            return 0  # no tensor yet
        try:
            # CPU:0 only: logical CPU devices (a split for MirroredStrategy) share one allocator
            return int(tf.config.experimental.get_memory_info("CPU:0")["current"])
        except (ValueError, RuntimeError, KeyError, TypeError):
            return None  # started without TF_CPU_ALLOCATOR_USE_BFC: TensorFlow keeps no count

    def oom_errors(self, tf: Any) -> tuple[type[BaseException], ...]:
        return (tf.errors.ResourceExhaustedError,)
