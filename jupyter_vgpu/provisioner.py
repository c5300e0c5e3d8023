"""``vgpu-provisioner``: a GPU slice for every kernel it starts.

jupyter_client creates one provisioner per kernel (from the kernelspec's
``metadata.kernel_provisioner`` stanza, or as the server-wide default when
``JUPYTER_DEFAULT_PROVISIONER_NAME=vgpu-provisioner``). Its life with a slice:

* ``pre_launch`` reserves the slice in the ledger (waiting in line up to ``wait_timeout``),
  sets the kernel environment from :func:`jupyter_vgpu.slices.slice_environment` (the same
  mapping ``jupyter vgpu run`` uses) and adds ``--ext=jupyter_vgpu`` to ipykernel command lines;
* ``post_launch`` makes the kernel process the slice's holder, so a kernel killed with
  SIGKILL frees its slice at the next reservation or ``jupyter vgpu gc``;
* ``shutdown_requested(restart=True)`` hands the slice back to the server process for the
  restart, and the next ``pre_launch`` reuses it: a restarted kernel keeps its slice id;
* ``cleanup(restart=False)`` releases it. Any failure after reserving releases it too.

The slice id travels in ``get_provisioner_info``/``load_provisioner_info``, so a server that
restarts and reconnects to its kernels keeps their slices.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from jupyter_client.provisioning.factory import KernelProvisionerFactory
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from tornado.web import HTTPError
from traitlets import Any as AnyTrait
from traitlets import TraitError, validate

from .config import VGPU, load_settings
from .errors import (
    InvalidConfig,
    InvalidRequest,
    LedgerError,
    LeftLine,
    NoGPU,
    NotPermitted,
    SliceNotFound,
    SliceUnavailable,
    VGPUError,
)
from .slices import Holder, Ledger, Slice, SliceRequest, Ticket, cpu_environment, open_ledger, slice_environment
from .slices.environment import DEVICE_NAMES, without_slice
from .slices.reports import remove_report
from .slices.request import PLACEMENTS
from .units import format_bytes, parse_bytes, parse_fraction, parse_seconds, shorten

EXTENSION_ARG = "--ext=jupyter_vgpu"


class _ShownToUser(HTTPError):
    """An error whose message jupyter_server's REST API passes to the user as it is.

    jupyter_server answers any other exception from a kernel start with "Unhandled error" and a
    traceback; for a tornado ``HTTPError`` it sends the message, which JupyterLab then shows in
    its "Error Starting Kernel" dialog.
    """

    status = 500

    def __init__(self, message: str) -> None:
        # jupyter_server's API answers with log_message as it is; keep the message out of args,
        # which tornado would %-format it with.
        HTTPError.__init__(self, self.status, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidKernelConfig(_ShownToUser, InvalidRequest, TraitError):
    """A kernelspec or ``c.VGPUProvisioner`` value is not allowed (raised before any reservation)."""

    status = 400


class KernelSliceUnavailable(_ShownToUser, SliceUnavailable):
    """No slice for this kernel now (GPUs full, waited too long, no GPU with ``no_gpu="fail"``)."""

    status = 503


class KernelStartRefused(_ShownToUser, NotPermitted):
    """A policy (a JupyterHub admin's quota, enforced by the broker) refuses this kernel's slice."""

    status = 403


class KernelStartFailed(_ShownToUser, VGPUError):
    """Another jupyter-vgpu problem at kernel start (a bug; the server log has the traceback)."""


class KernelSetupBroken(_ShownToUser, VGPUError):
    """jupyter-vgpu's own settings or ledger cannot be used (a bad number, a corrupt ledger)."""

    status = 503


async def forget_failed_starts(manager: Any, log: Any = None) -> list[str]:
    """Drop the kernel starts that failed, and cancel those still waiting, from ``manager``'s
    pending kernels; returns their ids.

    jupyter_client's MultiKernelManager keeps a failed start among its pending kernels for ever
    (``_add_kernel_when_ready`` removes an entry only on success), and jupyter_server's
    ``shutdown_all`` then asks to shut that kernel down, which fails with "Kernel does not exist"
    and leaves the server unable to stop. Refused starts are routine here (a full GPU, a quota,
    a wait that timed out), so the server extension calls this before the server's kernel
    cleanup. Upstream fix: remove the entry in a ``finally`` of ``_add_kernel_when_ready``.
    """
    pending = getattr(manager, "_pending_kernels", None)
    running = getattr(manager, "_kernels", None)
    if not isinstance(pending, dict) or not isinstance(running, dict):
        return []
    stale = [(kid, task) for kid, task in list(pending.items()) if kid not in running]
    for kernel_id, task in stale:
        if isinstance(task, asyncio.Future) and not task.done():
            task.cancel()  # a start still waiting in line: it leaves the line as it ends
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=5)
            except BaseException:  # cancelled, failed or slow: it goes either way
                pass
        if pending.get(kernel_id) is task:
            del pending[kernel_id]
        if log is not None:
            log.info("jupyter-vgpu: forgot kernel %s, whose start did not succeed.", kernel_id)
    return [kid for kid, _ in stale]


def _forget_when_done(manager: Any, kernel_id: str) -> None:
    """Once the failed start of ``kernel_id`` has finished, drop it from the manager's pending
    kernels (see :func:`forget_failed_starts`) so it neither leaks nor blocks shutdown."""
    pending = getattr(manager, "_pending_kernels", None)
    if not isinstance(pending, dict):
        return
    task = pending.get(kernel_id)
    if not isinstance(task, asyncio.Future):
        return

    def forget(done: asyncio.Future[Any]) -> None:
        running = getattr(manager, "_kernels", {})
        if pending.get(kernel_id) is done and kernel_id not in running:
            del pending[kernel_id]

    task.add_done_callback(forget)


class RefusalLog:
    """The kernel starts a server refused lately, newest last: what ``GET /api/vgpu/refusals``
    answers, so JupyterLab can lay out the refusal its "Error Starting Kernel" dialog shows as
    text. Bounded: the last ``keep`` refusals, none older than ``max_age`` seconds."""

    def __init__(self, keep: int = 50, max_age: float = 600.0) -> None:
        self.max_age = max_age
        self._entries: deque[dict[str, Any]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def since(self, t: float) -> list[dict[str, Any]]:
        """Refusals after ``t`` (seconds since the epoch), newest first."""
        oldest = max(t, time.time() - self.max_age)
        with self._lock:
            return [e for e in reversed(self._entries) if e["t"] > oldest]


_refusal_logs: weakref.WeakKeyDictionary[Any, RefusalLog] = weakref.WeakKeyDictionary()


def refusals_of(manager: Any) -> RefusalLog:
    """The refusal log of a (multi) kernel manager: one per Jupyter server."""
    with _shared_lock:
        log = _refusal_logs.get(manager)
        if log is None:
            log = _refusal_logs[manager] = RefusalLog()
        return log


def refusal_tips(detail: dict[str, Any], *, kernels: list[dict[str, str]], wait_timeout: float) -> list[str]:
    """What the person whose kernel start was refused can do, best first."""
    tips = []
    if kernels:
        names = " or ".join(f'"{k["display_name"]}"' for k in kernels[:2])
        tips.append(f"Start {names} instead: {'it fits' if len(kernels[:2]) == 1 else 'they fit'} now.")
    elif detail.get("smaller_fits") and isinstance((detail.get("fits_now") or {}).get("memory"), int):
        most = format_bytes(detail["fits_now"]["memory"])
        tips.append(f"A kernel of at most {most} fits now (`jupyter vgpu kernelspec install -m {most.replace(' ', '')}`).")
    if wait_timeout > 0:
        tips.append(f"Wait longer: this kernel waits {wait_timeout:g} s in line (its wait_timeout).")
    else:
        tips.append(
            "Wait in line: a kernel installed with `jupyter vgpu kernelspec install --wait SECONDS` waits for "
            "its slice, first come, first served."
        )
    tips.append("Or ask the holders above to shut down the kernels they no longer use.")
    return tips


def refusal_text(detail: dict[str, Any], tips: list[str]) -> str:
    """A refused kernel start, as its "Error Starting Kernel" dialog shows it: the summary, a
    line per GPU, then what to do."""
    waited = detail.get("waited")
    summary = str(detail.get("summary", ""))
    lines = [f"Waited {waited:g} s in line. {summary}" if isinstance(waited, (int, float)) else summary]
    lines += [str(line) for line in detail.get("gpu_lines", [])]
    lines.append("What you can do: " + " ".join(tips))
    return "\n".join(line for line in lines if line)


def _shown(error: BaseException, log: Any) -> BaseException:
    """The error as the user's kernel-start dialog should show it (one sentence, right status)."""
    if isinstance(error, (_ShownToUser, asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
        return error
    if isinstance(error, (InvalidRequest, TraitError)):
        return InvalidKernelConfig(str(error))
    if isinstance(error, SliceUnavailable):
        return KernelSliceUnavailable(str(error))
    if isinstance(error, NotPermitted):
        return KernelStartRefused(str(error))
    if isinstance(error, (InvalidConfig, LedgerError)):
        return KernelSetupBroken(str(error))
    if isinstance(error, VGPUError):
        return KernelStartFailed(str(error))
    log.error("jupyter-vgpu: the kernel start failed", exc_info=error)
    return KernelStartFailed(f"jupyter-vgpu could not start this kernel ({shorten(error)}); the server log has the details.")


def _reason(error: BaseException) -> str:
    """Why a start was refused, in one word for front ends: full | timed_out | cancelled |
    no_gpu | policy | config | broken."""
    if isinstance(error, LeftLine):
        return "cancelled"
    if isinstance(error, NoGPU):
        return "no_gpu"
    if isinstance(error, SliceUnavailable):
        return "timed_out" if error.detail is not None and "waited" in error.detail else "full"
    if isinstance(error, NotPermitted):
        return "policy"
    if isinstance(error, (InvalidRequest, TraitError)):
        return "config"
    return "broken"


def _refusal_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    """A GPU of a refusal for the REST API: its holders by notebook or command, ``yours`` instead
    of a uid."""
    holders = [
        {"label": h.get("label"), "owner": h.get("owner"), "reserved": h.get("reserved"), "yours": h.get("uid") == os.getuid()}
        for h in gpu.get("holders", [])
    ]
    keep = ("index", "name", "free", "total", "foreign", "text")
    return {**{k: gpu.get(k) for k in keep}, "holders": holders}


_ledgers: dict[tuple[str, str, int | None], Ledger] = {}
_settings: dict[int, tuple[Any, VGPU]] = {}
_shared_lock = threading.Lock()


def _server_settings(config: Any) -> VGPU:
    """The settings of the server whose config this is, read once (config files included)."""
    with _shared_lock:
        cached = _settings.get(id(config))
        if cached is not None and cached[0] is config:
            return cached[1]
    settings = load_settings(config)
    with _shared_lock:
        _settings[id(config)] = (config, settings)
    return settings


def _shared_ledger(settings: VGPU) -> Ledger:
    """One ledger connection per (path, GPUs, allowance) for all provisioners of a server."""
    key = (str(settings.resolved_ledger_path), settings.resolved_simulate, settings.context_allowance_bytes)
    with _shared_lock:
        if key not in _ledgers:
            _ledgers[key] = open_ledger(settings)
        return _ledgers[key]


def _converted(parse: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    """A trait validator that stores ``parse(value)`` (None stays None): parsed once, here."""

    def validate(self: Any, proposal: Any) -> Any:
        value = proposal["value"]
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        try:
            return parse(value)
        except InvalidRequest as error:
            raise InvalidKernelConfig(str(error)) from None

    return validate


def _seconds(value: Any) -> float:
    return parse_seconds(value, what="wait_timeout")


def _placement(value: Any) -> str:
    if value not in PLACEMENTS:
        raise InvalidRequest(f"placement {shorten(value)} is not allowed; use one of: {', '.join(PLACEMENTS)}.")
    return str(value)


def _no_gpu(value: Any) -> str:
    if value not in NO_GPU_CHOICES:
        raise InvalidRequest(f"no_gpu {shorten(value)} is not allowed; use one of: {', '.join(NO_GPU_CHOICES)}.")
    return str(value)


def _device_names(value: Any) -> str:
    if value not in DEVICE_NAMES:
        raise InvalidRequest(f"device_names {shorten(value)} is not allowed; use one of: {', '.join(DEVICE_NAMES)}.")
    return str(value)


def _pinned(value: Any) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, (str, int)) or len(text) > 64:
        raise InvalidRequest(f"gpu {shorten(value)} is not a GPU index or UUID.")
    return text


NO_GPU_CHOICES = ("cpu", "fail")

#: What jupyter_client itself passes to a provisioner, besides the kernelspec's config.
SET_BY_JUPYTER_CLIENT = frozenset({"kernel_id", "kernel_spec", "parent", "config", "log"})


#: The kernelspec config keys (and ``c.VGPUProvisioner`` settings) a user may set; the traits
#: inherited from LocalProvisioner are not the user's to set.
VGPU_SETTINGS = (
    "gpu_fraction", "gpu_memory", "gpus", "gpu", "logical_devices", "placement", "wait_timeout", "no_gpu", "device_names",
)  # fmt: skip


def unknown_keys_message(unknown: list[str], spec: Any = None) -> str:
    name = getattr(spec, "display_name", None)
    where = f"Kernel '{name}'" if name else "The kernelspec"
    keys = ", ".join(shorten(k) for k in unknown[:5])
    return (
        f"{where}: kernel_provisioner config {'key' if len(unknown) == 1 else 'keys'} {keys} "
        f"{'is' if len(unknown) == 1 else 'are'} not allowed; use {', '.join(VGPU_SETTINGS)}."
    )


class CheckedProvisionerFactory(KernelProvisionerFactory):  # type: ignore[misc]
    """jupyter_client's provisioner factory, which first checks that a vgpu-provisioner stanza's
    ``config`` is a mapping: the factory passes it as ``**config``, and anything else would end
    the kernel start in a TypeError ("Unhandled error") instead of a sentence."""

    def create_provisioner_instance(self, kernel_id: str, kernel_spec: Any, parent: Any) -> Any:
        stanza = (getattr(kernel_spec, "metadata", None) or {}).get("kernel_provisioner")
        if isinstance(stanza, dict) and stanza.get("provisioner_name") == PROVISIONER_NAME:
            config = stanza.get("config", {})
            if not isinstance(config, dict):
                name = getattr(kernel_spec, "display_name", "") or "kernel"
                raise InvalidKernelConfig(
                    f"Kernel '{name}': kernel_provisioner config must be a mapping of settings such as "
                    f'{{"gpu_fraction": 0.25}}, not {shorten(config)}.'
                )
        return super().create_provisioner_instance(kernel_id, kernel_spec, parent)


def check_provisioner_configs() -> None:
    """Make the process's provisioner factory a :class:`CheckedProvisionerFactory` (the server
    extension calls this once; traitlets' singleton makes every kernel manager use it)."""
    current = KernelProvisionerFactory._instance
    if isinstance(current, CheckedProvisionerFactory):
        return
    parent = getattr(current, "parent", None)
    KernelProvisionerFactory.clear_instance()
    CheckedProvisionerFactory.clear_instance()  # one left from an earlier server of this process
    CheckedProvisionerFactory.instance(parent=parent)


PROVISIONER_NAME = "vgpu-provisioner"


class VGPUProvisioner(LocalProvisioner):  # type: ignore[misc]
    """Starts local kernels that each hold a GPU slice (``c.VGPUProvisioner.*`` or kernelspec config).

    Each setting is parsed once, by its trait's validator, into the value the slice request
    takes; a value that is not allowed fails the kernel start before anything is reserved.
    """

    gpu_fraction = AnyTrait(
        None,
        allow_none=True,
        help="""Share of each GPU's memory for this kernel, in (0, 1]: 0.25, "1/4" or "25%".
        Exclusive with gpu_memory. With neither set the kernel gets whole GPUs.""",
    ).tag(config=True)

    gpu_memory = AnyTrait(
        None,
        allow_none=True,
        help="""Absolute GPU memory per GPU for this kernel, e.g. "6GiB" or "512MiB"
        (the CUDA-context allowance is counted inside it). Exclusive with gpu_fraction.""",
    ).tag(config=True)

    gpus = AnyTrait(1, help="How many GPUs this kernel gets; each gets the same share.").tag(config=True)

    gpu = AnyTrait(
        None,
        allow_none=True,
        help="Pin the kernel to one GPU, by index or UUID (needs gpus=1).",
    ).tag(config=True)

    logical_devices = AnyTrait(
        1,
        help="""Split each reserved GPU (or the CPU when there is none) into this many TensorFlow
        logical devices sharing the slice, so MirroredStrategy runs on one physical GPU.""",
    ).tag(config=True)

    placement = AnyTrait(
        "binpack",
        help="""Which GPU to use when several fit: "binpack" fills the fullest GPU that still
        fits (keeps whole GPUs free for big requests), "spread" uses the emptiest.""",
    ).tag(config=True)

    wait_timeout = AnyTrait(
        0.0,
        help="""Seconds to wait in line (first come, first served) for a slice when the GPUs are
        full; 0 fails the kernel start at once with a message saying who holds what.""",
    ).tag(config=True)

    no_gpu = AnyTrait(
        "cpu",
        help="""What to do when the machine has no GPU (and none is simulated): "cpu" starts the
        kernel on the CPU and says so in %vgpu and the server log; "fail" refuses to start it.""",
    ).tag(config=True)

    device_names = AnyTrait(
        "uuid",
        help="""How CUDA_VISIBLE_DEVICES names the kernel's GPUs: "uuid" (default; what CUDA,
        PyTorch, TensorFlow and JAX accept) or "index", for tools that read it as numbers (vLLM
        before 0.24). A MIG slice always names its MIG device by UUID.""",
    ).tag(config=True)

    _check_fraction = validate("gpu_fraction")(_converted(parse_fraction))
    _check_memory = validate("gpu_memory")(_converted(lambda v: parse_bytes(v, what="gpu_memory")))
    _check_gpus = validate("gpus")(_converted(lambda v: SliceRequest.parse(gpus=v).gpus))
    _check_gpu = validate("gpu")(_converted(_pinned))
    _check_logical = validate("logical_devices")(_converted(lambda v: SliceRequest.parse(logical_devices=v).logical_devices))
    _check_placement = validate("placement")(_converted(_placement))
    _check_wait = validate("wait_timeout")(_converted(_seconds))
    _check_no_gpu = validate("no_gpu")(_converted(_no_gpu))
    _check_names = validate("device_names")(_converted(_device_names))

    #: The slice this kernel holds: the provisioner's own state, never configuration.
    slice_id: str | None = None
    _slice_ledger: Ledger | None = None
    _start_labels: dict[str, str] | None = None  # the notebook path and kernel name of this start

    def __init__(self, **kwargs: Any) -> None:
        # jupyter_client passes the kernelspec's provisioner config as keyword arguments, which
        # would set any trait, or vanish when misspelt: only the settings below are allowed.
        unknown = sorted(set(kwargs) - SET_BY_JUPYTER_CLIENT - set(VGPU_SETTINGS))
        if unknown:
            raise InvalidKernelConfig(unknown_keys_message(unknown, kwargs.get("kernel_spec")))
        super().__init__(**kwargs)

    def _ledger(self) -> Ledger:
        """The ledger this kernel's slice lives in: the one ``pre_launch`` reserved from, even if
        the environment changed since (settings are read once per server)."""
        if self._slice_ledger is None:
            self._slice_ledger = _shared_ledger(self._settings())
        return self._slice_ledger

    def _settings(self) -> VGPU:
        return _server_settings(getattr(self.parent, "config", None))

    def request(self) -> SliceRequest:
        """The slice this kernel asks for, built from the traits (each parsed by its validator)."""
        try:
            return SliceRequest(
                fraction=self.gpu_fraction,
                memory=self.gpu_memory,
                gpus=self.gpus or 1,
                gpu=self.gpu,
                logical_devices=self.logical_devices or 1,
                placement=self.placement or "binpack",
            )
        except InvalidRequest as error:
            raise InvalidKernelConfig(f"Kernel '{self._display_name()}': {error}") from None

    def _display_name(self) -> str:
        spec = self.kernel_spec
        return str(getattr(spec, "display_name", "") or getattr(self.parent, "kernel_name", "") or "kernel")

    def _labels(self, env: dict[str, str]) -> dict[str, str]:
        labels = {
            "kernel_name": str(getattr(self.parent, "kernel_name", "") or ""),
            "kernel_display_name": self._display_name(),
        }
        if session := env.get("JPY_SESSION_NAME"):
            # jupyter_server passes the notebook's absolute path; keep it relative to the
            # server's root like the paths JupyterLab shows.
            root = getattr(getattr(self.parent, "parent", None), "root_dir", None)
            if root and os.path.isabs(session):
                relative = os.path.relpath(session, root)
                session = relative if not relative.startswith("..") else session
            labels["path"] = session
        return {k: v for k, v in labels.items() if v}

    @staticmethod
    def _is_ipykernel(cmd: list[str]) -> bool:
        return any(part.endswith("ipykernel_launcher") or part in ("ipykernel", "ipykernel.kernelapp") for part in cmd)

    def _keeper(self) -> int | None:
        """This process, when its kernel manager restarts kernels that die (a Jupyter server's
        does): it then keeps the slice while the kernel is gone (SIGKILL, the OOM killer), so
        nobody takes the memory in between. The server's monitor frees it if the server gives up."""
        restarts = bool(getattr(self.parent, "autorestart", False)) and hasattr(self.parent, "restarter_class")
        return os.getpid() if restarts else None

    def _waiting(self, request: SliceRequest) -> Callable[[Ticket], None]:
        def say(ticket: Ticket) -> None:
            if ticket.last_reason:
                self.log.info("Kernel %s waits in line for %s: %s", self.kernel_id, request.describe(), ticket.last_reason)

        return say

    async def _release(self) -> None:
        if not self.slice_id:
            return
        slice_id, self.slice_id = self.slice_id, None
        ledger = self._ledger()
        try:
            await asyncio.to_thread(ledger.release, slice_id)
        except SliceNotFound:
            pass  # reaped already
        except VGPUError as error:
            self.log.warning("Could not release GPU slice %s: %s", slice_id, error)
        await asyncio.to_thread(remove_report, ledger.path, slice_id)

    # -- provisioner API ----------------------------------------------------------------
    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Called by the kernel manager before each (re)start: reserve or reuse the slice,
        then let LocalProvisioner build the command. Releases the slice if anything fails.
        jupyter-vgpu errors reach the user's kernel-start dialog as their one-line message."""
        try:
            return await self._pre_launch(**kwargs)
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError):
                raise
            _forget_when_done(getattr(self.parent, "parent", None), str(self.kernel_id))
            shown = _shown(error, self.log)
            if isinstance(shown, _ShownToUser):
                shown = await self._refused(error, shown)
            raise shown from None

    async def _refused(self, error: BaseException, shown: _ShownToUser) -> _ShownToUser:
        """Record the refusal for the REST API and say it the way a person can act on: with the
        refusal's structure (a full GPU), name the installed kernels that fit now."""
        detail = error.detail if isinstance(error, SliceUnavailable) else None
        kernels: list[dict[str, str]] = []
        tips: list[str] = []
        if detail is not None:
            try:
                kernels = await asyncio.to_thread(self._kernels_that_fit, detail)
            except Exception as problem:  # a suggestion is a nicety: never fail over it
                self.log.debug("jupyter-vgpu: could not list kernels that fit: %s", problem)
            tips = refusal_tips(detail, kernels=kernels, wait_timeout=float(self.wait_timeout or 0))
            shown = type(shown)(refusal_text(detail, tips))
        labels = self._start_labels or {}
        server = getattr(self.parent, "parent", None)  # the multi-kernel manager: falsy while it runs no kernel
        refusals_of(server if server is not None else self).add(
            {
                "t": time.time(),
                "kernel_id": str(self.kernel_id) if self.kernel_id else None,
                "kernel_name": labels.get("kernel_name"),
                "kernel_display_name": labels.get("kernel_display_name"),
                "path": labels.get("path"),
                "status": shown.status,
                "reason": _reason(error),
                "message": shown.message,
                "summary": shown.message.split("\n", 1)[0],
                "asked": (detail or {}).get("asked"),
                "fits_now": (detail or {}).get("fits_now"),
                "ahead": (detail or {}).get("ahead", 0),
                "waited": (detail or {}).get("waited"),
                "gpus": [_refusal_gpu(g) for g in (detail or {}).get("gpus", [])],
                "advice": tips,
                "suggested_kernels": kernels,
            }
        )
        return shown

    def _kernels_that_fit(self, detail: dict[str, Any]) -> list[dict[str, str]]:
        """Installed sliced kernelspecs of this kernel's language whose slice fits now, largest
        first (at most three). Nothing fits while earlier requests wait in line."""
        manager = getattr(self.parent, "kernel_spec_manager", None)
        if manager is None or detail.get("ahead"):
            return []
        free = [(int(g["total"]), int(g["free"])) for g in detail.get("gpus", [])]
        language = getattr(self.kernel_spec, "language", None)
        current = getattr(self.parent, "kernel_name", None)
        found = []
        for name, entry in manager.get_all_specs().items():
            spec = (entry.get("spec") or {}) if isinstance(entry, dict) else {}
            stanza = (spec.get("metadata") or {}).get("kernel_provisioner") or {}
            if name == current or stanza.get("provisioner_name") != PROVISIONER_NAME:
                continue
            if language and spec.get("language") not in (None, language):
                continue
            config = stanza.get("config") or {}
            try:
                request = SliceRequest.parse(
                    fraction=config.get("gpu_fraction"), memory=config.get("gpu_memory"), gpus=config.get("gpus", 1)
                )
            except (InvalidRequest, TypeError, AttributeError):
                continue
            fitting = [request.amount_on(total) for total, room in free if 0 < request.amount_on(total) <= room]
            if len(fitting) >= request.gpus:
                display = str(spec.get("display_name") or name)
                found.append((max(fitting) * request.gpus, display, name))
        found.sort(key=lambda k: (-k[0], k[1]))
        return [{"name": name, "display_name": display} for _, display, name in found[:3]]

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        try:
            return await super().launch_kernel(cmd, **kwargs)
        except BaseException:
            await self._release()
            _forget_when_done(getattr(self.parent, "parent", None), str(self.kernel_id))
            raise

    async def _pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        env = without_slice(kwargs.get("env") or os.environ)
        self._start_labels = self._labels(env)
        request = self.request()
        settings = self._settings()
        if self._slice_ledger is None:
            self._slice_ledger = await asyncio.to_thread(_shared_ledger, settings)
        ledger = self._slice_ledger
        kept = self.slice_id
        try:
            slice_ = await self._slice(ledger, request, env)
            if slice_ is not None:  # None: no GPU at all, and no_gpu="cpu"
                self.slice_id = slice_.id
                env.update(
                    slice_environment(
                        slice_,
                        ledger_path=str(ledger.path),
                        simulate=settings.resolved_simulate,
                        device_names=self.device_names or "uuid",
                    )
                )
                self.log.info("Kernel %s holds GPU slice %s: %s", self.kernel_id, slice_.id, slice_.request.describe())
            kwargs["env"] = env
            kwargs = await super().pre_launch(**kwargs)
            cmd = list(kwargs.get("cmd") or [])
            if self._is_ipykernel(cmd) and EXTENSION_ARG not in cmd:
                cmd.append(EXTENSION_ARG)
            kwargs["cmd"] = cmd
            return kwargs
        except BaseException:
            if self.slice_id and self.slice_id != kept:  # reserved just now: nothing kept
                await self._release()
            raise

    async def _slice(self, ledger: Ledger, request: SliceRequest, env: dict[str, str]) -> Slice | None:
        """The kernel's slice: the one it kept across a restart, or a new one (waiting in line up
        to ``wait_timeout``). None when there is no GPU and the kernel may run on the CPU, whose
        environment is then put in ``env``."""
        if self.slice_id:
            try:
                return await asyncio.to_thread(ledger.attach, self.slice_id, os.getpid())
            except SliceNotFound:
                self.log.warning("Slice %s of kernel %s was reclaimed; reserving anew.", self.slice_id, self.kernel_id)
                self.slice_id = None
        holder = Holder.kernel(str(self.kernel_id), pid=os.getpid(), labels=self._start_labels, keeper=self._keeper())
        try:
            slice_ = await ledger.reserve_async(
                request, holder, wait=float(self.wait_timeout or 0), waiting=self._waiting(request)
            )
        except NoGPU as error:
            if self.no_gpu == "fail":
                raise NoGPU(f"Kernel '{self._display_name()}' needs a GPU: {error}") from None
            reason = f"{error} This kernel runs on the CPU."
            self.log.warning("Kernel %s: %s", self.kernel_id, reason)
            env.update(cpu_environment(logical_devices=request.logical_devices, reason=reason))
            return None
        return slice_

    async def post_launch(self, **kwargs: Any) -> None:
        """The kernel process now exists: make it the slice's holder."""
        await super().post_launch(**kwargs)
        if self.slice_id and self.pid:
            ledger = self._ledger()
            try:
                await asyncio.to_thread(ledger.attach, self.slice_id, int(self.pid))
            except VGPUError as error:
                self.log.warning("Could not attach slice %s to kernel pid %s: %s", self.slice_id, self.pid, error)

    async def shutdown_requested(self, restart: bool = False) -> None:
        """Before a restart the kernel process ends: the server keeps the slice meanwhile."""
        await super().shutdown_requested(restart=restart)
        if restart:
            await self._hold_for_restart()

    async def _hold_for_restart(self) -> None:
        if self.slice_id:
            ledger = self._ledger()
            try:
                await asyncio.to_thread(ledger.attach, self.slice_id, os.getpid())
            except VGPUError:
                pass

    async def kill(self, restart: bool = False) -> None:
        if restart:
            await self._hold_for_restart()
        await super().kill(restart=restart)

    async def terminate(self, restart: bool = False) -> None:
        if restart:
            await self._hold_for_restart()
        await super().terminate(restart=restart)

    async def cleanup(self, restart: bool = False) -> None:
        """Called after the kernel ends: a restart keeps the slice, a shutdown frees it."""
        await super().cleanup(restart=restart)
        if not restart:
            await self._release()

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        info["vgpu_slice_id"] = self.slice_id
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        await super().load_provisioner_info(provisioner_info)
        self.slice_id = provisioner_info.get("vgpu_slice_id")
        if self.slice_id and self.pid:
            ledger = self._ledger()
            try:
                await asyncio.to_thread(ledger.attach, self.slice_id, int(self.pid))
            except SliceNotFound:
                self.log.warning("Slice %s of kernel %s is no longer in the ledger.", self.slice_id, self.kernel_id)
                self.slice_id = None
