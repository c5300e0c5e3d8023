"""What this kernel knows about its slice, and what it has done to each framework.

One :class:`KernelState` per kernel process. The slice comes from the environment the
provisioner (or ``jupyter vgpu run``) set; the framework records come from the post-import
hooks. Every change is written to the slice's report so the server can show it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..enforcement import Tier
from ..errors import InvalidConfig, VGPUError
from ..frameworks.records import FrameworkRecord
from ..slices.reports import write_process_report, write_report
from ..units import shorten
from . import is_slice_id  # the ledger's rule, without importing the ledger's records at a kernel's start

if TYPE_CHECKING:
    from ..gpus import Inventory

@dataclass(frozen=True)
class SliceFacts:
    """The slice as the kernel environment describes it (README.md, "Kernel environment").

    ``slice_id`` is None in a kernel without a slice; ``no_gpu_reason`` is set when the
    provisioner started the kernel on the CPU.
    """

    slice_id: str | None = None
    gpus: tuple[str, ...] = ()
    fraction: float | None = None
    memory_limit: int | None = None
    #: An elastic slice's limit for frameworks (JUPYTER_VGPU_BURST_LIMIT); None: no burst.
    burst_limit: int | None = None
    memory_reserved: int | None = None
    context_allowance: int | None = None
    logical_devices: int = 1
    ledger_path: str | None = None
    no_gpu_reason: str | None = None
    simulate: str = ""
    tier: Tier | None = None
    mig_profiles: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES: the GPUs, or the MIG device

    @property
    def sliced(self) -> bool:
        """True when this kernel holds a GPU slice with a known memory limit."""
        return self.slice_id is not None and self.memory_limit is not None

    @property
    def framework_limit(self) -> int | None:
        """What frameworks may allocate per GPU: an elastic slice's burst limit, else the slice's limit."""
        return self.burst_limit if self.burst_limit is not None else self.memory_limit

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SliceFacts:
        """Read the ``JUPYTER_VGPU_*`` variables; a malformed one raises :class:`InvalidConfig`."""
        env = os.environ if env is None else env
        slice_id = env.get("JUPYTER_VGPU_SLICE_ID") or None
        if slice_id is not None and not is_slice_id(slice_id):  # it names the slice's report files
            raise InvalidConfig(f"JUPYTER_VGPU_SLICE_ID={shorten(slice_id)} is not a slice id (12 hex digits).")
        visible = tuple(g.strip() for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip())
        # The physical GPUs (a MIG slice's CUDA_VISIBLE_DEVICES names its MIG device instead).
        parents = tuple(g.strip() for g in env.get("JUPYTER_VGPU_GPUS", "").split(",") if g.strip())
        return cls(
            slice_id=slice_id,
            gpus=(parents or visible) if slice_id else (),
            devices=visible if slice_id else (),
            tier=_tier(env.get("JUPYTER_VGPU_TIER", "")),
            mig_profiles=tuple(p for p in env.get("JUPYTER_VGPU_MIG_PROFILES", "").split(",") if p),
            fraction=_number(env, "JUPYTER_VGPU_FRACTION", float),
            memory_limit=_number(env, "JUPYTER_VGPU_MEMORY_LIMIT", int),
            burst_limit=_number(env, "JUPYTER_VGPU_BURST_LIMIT", int),
            memory_reserved=_number(env, "JUPYTER_VGPU_MEMORY_RESERVED", int),
            context_allowance=_number(env, "JUPYTER_VGPU_CONTEXT_ALLOWANCE", int),
            logical_devices=_number(env, "JUPYTER_VGPU_LOGICAL_DEVICES", int) or 1,
            ledger_path=env.get("JUPYTER_VGPU_LEDGER") or None,
            no_gpu_reason=env.get("JUPYTER_VGPU_NO_GPU") or None,
            simulate=env.get("JUPYTER_VGPU_SIMULATE", ""),
        )


def _plain_kernels_gpus() -> tuple[str, str | None]:
    """The simulated GPUs and the ledger of a kernel the provisioner did not start (a plain
    kernel): its environment's, else its ledger's shared settings (what ``./scripts/lab`` writes)."""
    from ..config import load_settings

    try:
        settings = load_settings()
    except VGPUError:  # a broken settings file: %vgpu still shows NVML's GPUs
        return os.environ.get("JUPYTER_VGPU_SIMULATE", ""), None
    return settings.resolved_simulate, str(settings.resolved_ledger_path)


def _tier(text: str) -> Tier | None:
    if not text.strip():
        return None
    try:
        return Tier(text.strip())
    except ValueError:
        allowed = ", ".join(t.value for t in Tier)
        raise InvalidConfig(f"JUPYTER_VGPU_TIER={shorten(text)} is not one of: {allowed}.") from None


def _number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise InvalidConfig(f"{name}={shorten(text)} is not a number; the kernel's GPU slice cannot be read.") from None
    if value <= 0 and name != "JUPYTER_VGPU_CONTEXT_ALLOWANCE":
        raise InvalidConfig(f"{name}={shorten(text)} must be larger than zero.")
    return value


class KernelState:
    """The slice, the framework records, and the peak memory seen, for one kernel process."""

    def __init__(self, facts: SliceFacts, *, problem: str | None = None) -> None:
        self.facts = facts
        #: A configuration problem found at load (shown by ``%vgpu``), or None.
        self.problem = problem
        self.records: dict[str, FrameworkRecord] = {}
        #: Framework module names already in ``sys.modules`` when the extension loaded.
        self.preloaded: set[str] = set()
        self.peak_used: int | None = None
        self._lock = threading.RLock()
        self._inventory: Inventory | None = None
        self._report_failed = False
        #: True in a kernel (the extension loaded): it writes the slice's report; any other
        #: process of the slice (see :mod:`.startup`) writes a report of its own beside it.
        self.kernel = False
        #: Why the slice's hard tier does not hold this kernel (``Enforcement.not_held``), for the
        #: views that read the report; None: it does, or it is not known.
        self.tier_problem: str | None = None
        #: True in a kernel its launcher runs on another machine (:mod:`.reporter`): its report is
        #: the only way its use is seen, simulated GPUs' included.
        self.elsewhere = False
        #: What its frameworks hold when their GPU counters cannot tell (there: on simulated GPUs,
        #: what they hold in host memory), set by :mod:`.reporter`; None: nothing else to ask.
        self.other_use: Callable[[], int | None] | None = None

    # -- frameworks -------------------------------------------------------------------
    def record(self, name: str, record: FrameworkRecord) -> None:
        """Store what a hook did and publish it in the slice's report."""
        with self._lock:
            self.records[name] = record
        self.write_report()

    def record_all(self, records: Mapping[str, FrameworkRecord]) -> None:
        """Store what several adapters did (a refresh, a resize) and publish it once."""
        with self._lock:
            self.records.update(records)
        self.write_report()

    def imported(self, module_name: str) -> Any:
        """The framework module if the user has imported it, else None (never imports it)."""
        return sys.modules.get(module_name)

    # -- usage --------------------------------------------------------------------------
    @property
    def inventory(self) -> Inventory:
        """NVML (or the simulated NVML), opened on first use only."""
        with self._lock:
            if self._inventory is None:
                from pathlib import Path

                from ..gpus import Inventory
                from ..gpus.simulated_use import use_folder

                spec, ledger = (self.facts.simulate, self.facts.ledger_path) if self.facts.sliced else _plain_kernels_gpus()
                folder = use_folder(Path(ledger).parent) if ledger else None  # what the slices' processes hold there
                self._inventory = Inventory(spec, use_folder=folder)
            return self._inventory

    def observe(self, used: int | None) -> None:
        """Remember the highest memory use seen for this kernel."""
        if used is None:
            return
        with self._lock:
            self.peak_used = used if self.peak_used is None else max(self.peak_used, used)

    # -- the report the server reads -----------------------------------------------------
    def write_report(self, extra: dict[str, Any] | None = None) -> None:
        """Replace the slice's report; a kernel without a slice writes nothing.

        A failure to write is said once on stderr and never raised: the report only feeds
        the server's view, and the user's code must not pay for it.
        """
        facts = self.facts
        if not facts.slice_id or not facts.ledger_path:
            return
        from ..frameworks import framework_memory

        with self._lock:
            frameworks = {name: record.to_dict() for name, record in self.records.items()}
        used, peak = framework_memory(self)
        if used is None and self.other_use is not None:
            used = self.other_use()
            peak = self.peak_used if used is None else max(used, self.peak_used or 0)
        report: dict[str, Any] = {"frameworks": frameworks, "memory_used": used, "peak_memory_used": peak}
        if self.tier_problem:
            report["tier_problem"] = self.tier_problem
        report.update(extra or {})
        try:
            if self.kernel:
                write_report(facts.ledger_path, facts.slice_id, report)
            elif frameworks:
                write_process_report(facts.ledger_path, facts.slice_id, report)
        except OSError as error:
            if not self._report_failed:
                self._report_failed = True
                print(f"jupyter-vgpu: cannot write this kernel's report ({error}).", file=sys.stderr)


_state: KernelState | None = None


def current() -> KernelState | None:
    """The state of this kernel process, or None before the extension loaded."""
    return _state


def establish() -> KernelState:
    """Create this process's state from the environment (once; later calls return it)."""
    global _state
    if _state is None:
        try:
            _state = KernelState(SliceFacts.from_env())
        except InvalidConfig as error:
            _state = KernelState(SliceFacts(), problem=str(error))
    return _state
