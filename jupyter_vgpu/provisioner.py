"""``vgpu-provisioner``: a GPU slice for every kernel it starts.

jupyter_client creates one provisioner per kernel (from the kernelspec's
``metadata.kernel_provisioner`` stanza, or as the server-wide default when
``JUPYTER_DEFAULT_PROVISIONER_NAME=vgpu-provisioner``). Its life with a slice:

* ``pre_launch`` reserves the slice in the ledger (waiting in line up to ``wait_timeout``),
  sets the kernel environment from :func:`jupyter_vgpu.slices.environment.with_slice` (the same
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
from typing import Any

from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Dict, Enum, Float, Int, Unicode, Union

from .config import VGPU
from .errors import InvalidRequest, NoGPU, SliceNotFound, VGPUError
from .launch.errors import InvalidKernelConfig, ShownToUser, as_shown
from .launch.launchers import DEFAULT as DEFAULT_LAUNCHER
from .launch.launchers import LABEL as LAUNCHER_LABEL
from .launch.launchers import Launcher, LauncherSettings, launcher_named
from .launch.refusals import refusals_of
from .launch.refusing import RefusedStart
from .launch.settings import (  # fmt: skip
    NO_GPU_CHOICES,
    BurstLimits,
    Setting,
    check_device_names,
    check_no_gpu,
    check_pinned,
    check_placement,
    check_seconds,
    flat_keys,
    launcher_settings,
    server_settings,
    shared_ledger,
    take_others,
)
from .launch.waiting import LineLog
from .launch.workarounds import CLIENT_NOTEBOOK, forget_when_done
from .ledger import Ledger
from .slices import Holder, Slice, SliceRequest, cpu_environment
from .slices.environment import DEVICE_NAMES, with_slice, without_slice
from .slices.records import GATEWAY_CLIENT, notebook_path
from .slices.reports import remove_report
from .slices.request import MAX_COUNT, PLACEMENTS
from .units import ALLOWED_FRACTIONS, ALLOWED_WAITS, parse_bytes, parse_fraction

EXTENSION_ARG = "--ext=jupyter_vgpu"


class VGPUProvisioner(LocalProvisioner, BurstLimits):  # type: ignore[misc,metaclass]
    """Starts local kernels that each hold a GPU slice (``c.VGPUProvisioner.*`` or kernelspec config).

    Each setting is parsed once, by its trait's validator, into the value the slice request
    takes; a value that is not allowed fails the kernel start before anything is reserved."""

    gpu_fraction = Setting(
        Union([Float(), Unicode()]),
        parse_fraction,
        ALLOWED_FRACTIONS,
        help="""Share of each GPU's memory for this kernel, in (0, 1]: 0.25, "1/4" or "25%".
        Exclusive with gpu_memory. With neither set the kernel gets whole GPUs.""",
    ).tag(config=True)

    gpu_memory = Setting(
        Union([Int(min=1), Unicode()]),
        lambda v: parse_bytes(v, what="gpu_memory"),
        "a size such as 6GiB or 512MiB",
        help="""Absolute GPU memory per GPU for this kernel, e.g. "6GiB" or "512MiB"
        (the CUDA-context allowance is counted inside it). Exclusive with gpu_fraction.""",
    ).tag(config=True)

    gpus = Setting(
        Int(min=1, max=MAX_COUNT),
        lambda v: SliceRequest.parse(gpus=v).gpus,
        f"a whole number of GPUs, 1 or more (at most {MAX_COUNT})",
        default=1,
        help="How many GPUs this kernel gets; each gets the same share.",
    ).tag(config=True)

    gpu = Setting(
        Union([Int(min=0), Unicode()]),
        check_pinned,
        "a GPU index (0, 1, ...) or UUID",
        help="Pin the kernel to one GPU, by index or UUID (needs gpus=1).",
    ).tag(config=True)

    logical_devices = Setting(
        Int(min=1, max=MAX_COUNT),
        lambda v: SliceRequest.parse(logical_devices=v).logical_devices,
        f"a whole number, 1 or more (at most {MAX_COUNT})",
        default=1,
        help="""Split each reserved GPU (or the CPU when there is none) into this many TensorFlow
        logical devices sharing the slice, so MirroredStrategy runs on one physical GPU.""",
    ).tag(config=True)

    placement = Setting(
        Enum(PLACEMENTS),
        check_placement,
        f"one of: {', '.join(PLACEMENTS)}",
        default="binpack",
        help="""Which GPU to use when several fit: "binpack" fills the fullest GPU that still
        fits (keeps whole GPUs free for big requests), "spread" uses the emptiest.""",
    ).tag(config=True)

    wait_timeout = Setting(
        Union([Float(min=0), Unicode()]),
        check_seconds,
        ALLOWED_WAITS,
        default=0.0,
        help="""Seconds to wait in line (first come, first served) for a slice when the GPUs are
        full; 0 fails the kernel start at once with a message saying who holds what.""",
    ).tag(config=True)

    no_gpu = Setting(
        Enum(NO_GPU_CHOICES),
        check_no_gpu,
        f"one of: {', '.join(NO_GPU_CHOICES)}",
        default="cpu",
        help="""What to do when the machine has no GPU (and none is simulated): "cpu" starts the
        kernel on the CPU and says so in %vgpu and the server log; "fail" refuses to start it.""",
    ).tag(config=True)

    device_names = Setting(
        Enum(DEVICE_NAMES),
        check_device_names,
        f"one of: {', '.join(DEVICE_NAMES)}",
        default="uuid",
        help="""How CUDA_VISIBLE_DEVICES names the kernel's GPUs: "uuid" (default; what CUDA,
        PyTorch, TensorFlow and JAX accept) or "index", for tools that read it as numbers (vLLM
        before 0.24). A MIG slice always names its MIG device by UUID.""",
    ).tag(config=True)

    launcher = Setting(
        Unicode(),
        lambda v: launcher_named(v).name,
        "the name of a launcher installed here, such as local",
        default="local",
        help="""Where the kernel runs (jupyter_vgpu.launch.launchers): "local", a process on this
        host, or another launcher's name: one built in or one another package registers (entry
        point group jupyter_vgpu.launchers); `jupyter vgpu kernelspec list` names them. Its own
        settings sit under its name in the kernelspec's config (docs/launchers.md).""",
    ).tag(config=True)

    launcher_settings = Dict(
        key_trait=Unicode(),
        help="""Each launcher's settings for every kernel it starts, by the launcher's name, as a
        kernelspec gives them under that name (which win): {"<launcher>": {"<setting>": value}}.
        Each launcher checks its own when one of its kernels starts (docs/launchers.md).""",
    ).tag(config=True)

    def _launcher(self) -> Launcher:
        """This kernel's launcher (the trait holds a name its validator found)."""
        return launcher_named(self.launcher or DEFAULT_LAUNCHER)

    #: The slice this kernel holds: the provisioner's own state, never configuration.
    slice_id: str | None = None
    _slice_tier = ""  # its tier: what the slice's end asks to clean up in the owner's folder
    _slice_ledger: Ledger | None = None
    _start_labels: dict[str, str] | None = None  # the notebook path and kernel name of this start
    #: What the launcher keeps of this kernel (a cluster job and its node), saved with it.
    launch_state: dict[str, Any]
    #: The kernel's settings of its launcher, checked by it (read with ``Launcher.settings``).
    launch_settings: LauncherSettings
    _flat_config: dict[str, Any]  # c.VGPUProvisioner.<launcher>_<setting>, as written before issue 47

    def __init__(self, /, **kwargs: Any) -> None:  # "self" in a kernelspec config is one more unknown key
        # jupyter_client passes the kernelspec's provisioner config as keyword arguments, which
        # would set any trait, or vanish when misspelt: only the settings below are allowed, and
        # the launcher's own, which it checks once the launcher is known.
        others = take_others(kwargs)
        self.launch_state, self._flat_config = {}, {}
        super().__init__(**kwargs)
        self.launch_settings = launcher_settings(self._launcher(), others, self.launcher_settings, self._flat_config, kwargs.get("kernel_spec"))

    def _find_my_config(self, cfg: Any) -> Any:
        """traitlets' config of this class: a launcher's setting written the old way is kept for
        the launcher, never warned about as an unknown option."""
        mine = super()._find_my_config(cfg)
        self._flat_config = {key: mine.pop(key) for key in flat_keys(k for k in mine if k not in self.traits(config=True))}
        return mine

    def _ledger(self) -> Ledger:
        """The ledger this kernel's slice lives in: the one ``pre_launch`` reserved from, even if
        the environment changed since (settings are read once per server)."""
        if self._slice_ledger is None:
            self._slice_ledger = shared_ledger(self._settings())
        return self._slice_ledger

    def _settings(self) -> VGPU:
        return server_settings(getattr(self.parent, "config", None))

    def request(self) -> SliceRequest:
        """The slice this kernel asks for, built from the traits (each parsed by its validator)."""
        try:
            return SliceRequest(
                fraction=self.gpu_fraction, memory=self.gpu_memory,
                gpus=self.gpus or 1,
                gpu=self.gpu,
                logical_devices=self.logical_devices or 1,
                placement=self.placement or "binpack",
                limit_fraction=self.gpu_fraction_limit, limit_memory=self.gpu_memory_limit,  # BurstLimits
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
        client = env.get(CLIENT_NOTEBOOK)  # set by a GPU node's KernelStartHandler only
        if client and os.path.isabs(client):
            # a gateway client's notebook, by its path on the client's own machine
            labels["path"] = os.path.normpath(client)
            labels[GATEWAY_CLIENT] = "1"
        elif session := env.get("JPY_SESSION_NAME"):
            # jupyter_server joins the notebook's folder and the name the client sent: keep it
            # relative to the server's root and normalised like the paths JupyterLab shows, and
            # drop one the client made leave the root
            root = getattr(getattr(self.parent, "parent", None), "root_dir", None)
            labels["path"] = notebook_path(session, root or None) or ""
        if (self.launcher or DEFAULT_LAUNCHER) != DEFAULT_LAUNCHER:  # the server asks it whether the kernel lives
            labels[LAUNCHER_LABEL] = str(self.launcher)
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

    def _waiting(self, request: SliceRequest) -> LineLog:
        return LineLog(self.log, str(self.kernel_id), request.describe())

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
        await asyncio.to_thread(remove_report, ledger.path, slice_id, self._slice_tier)

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
            forget_when_done(getattr(self.parent, "parent", None), str(self.kernel_id))
            raise (await self._shown(error)) from None

    async def _shown(self, error: BaseException) -> BaseException:
        """What the user's kernel-start dialog shows for ``error`` (its status and one sentence),
        recorded as a refusal where it is one."""
        shown = as_shown(error, self.log)
        if isinstance(shown, ShownToUser):
            shown = await self._refused(error, shown)
        return shown

    async def _refused(self, error: BaseException, shown: ShownToUser) -> ShownToUser:
        """Record the refusal for the REST API and say it the way a person can act on (:mod:`.launch.refusing`)."""
        server = getattr(self.parent, "parent", None)  # the multi-kernel manager: falsy while it runs no kernel
        start = RefusedStart(
            kernel_id=str(self.kernel_id) if self.kernel_id else None,
            labels=self._start_labels or {},
            language=getattr(self.kernel_spec, "language", None),
            kernel_name=getattr(self.parent, "kernel_name", None),
            specs=getattr(self.parent, "kernel_spec_manager", None),
            wait_timeout=float(self.wait_timeout or 0),
            request=self.request,
            log=self.log,
        )
        return await start.record(error, shown, refusals_of(server if server is not None else self))

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        """jupyter_client calls this after :meth:`pre_launch` with its command and environment:
        the kernel's launcher starts it (not ``super()``: the launcher decides where). A start that
        fails frees the slice reserved for it."""
        try:
            return await self._launcher().launch(self, cmd, **kwargs)
        except BaseException as error:
            await self._release()
            await self._launcher().cleanup(self, restart=False)
            forget_when_done(getattr(self.parent, "parent", None), str(self.kernel_id))
            if not isinstance(error, VGPUError):
                raise  # a kernelspec's bad argv is jupyter_client's to say
            # a launcher's refusal (no safe folder on the node: round five, M3) is said as one, never a 500
            raise (await self._shown(error)) from None

    async def _pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        env = without_slice(kwargs.get("env") or os.environ)
        self._start_labels = self._labels(env)
        request = self.request()
        settings = self._settings()
        if self._slice_ledger is None:
            self._slice_ledger = await asyncio.to_thread(shared_ledger, settings)
        ledger = self._slice_ledger
        kept = self.slice_id
        launcher = self._launcher()
        try:
            if launcher.books_elsewhere:  # another engine keeps the book: nothing is reserved here
                slice_ = None
                await launcher.allocate(self, request, env)
                self._local_address()
            else:
                slice_ = await self._slice(ledger, request, env)
            if slice_ is not None:  # None: no GPU at all, and no_gpu="cpu"
                self.slice_id, self._slice_tier = slice_.id, slice_.tier.value
                env = with_slice(  # fractions of what CUDA sees under the kernel's scheduler share
                    env,
                    slice_,
                    ledger_path=str(ledger.path),
                    simulate=ledger.inventory.simulate,  # the GPUs the slice is on: a node broker's, if it keeps the book
                    device_names=self.device_names or "uuid",
                )
                self.log.info("Kernel %s holds GPU slice %s: %s", self.kernel_id, slice_.id, slice_.request.describe())
            kwargs["env"] = env
            kwargs = await super().pre_launch(**kwargs)
            cmd = list(kwargs.get("cmd") or [])
            if self._is_ipykernel(cmd) and EXTENSION_ARG not in cmd:
                cmd.append(EXTENSION_ARG)
            kwargs["cmd"] = launcher.command(cmd, env)
            return kwargs
        except BaseException:
            if self.slice_id and self.slice_id != kept:  # reserved just now: nothing kept
                await self._release()
            await launcher.cleanup(self, restart=False)
            raise

    def _local_address(self) -> None:
        """jupyter_client writes the connection file only for an address of this host; the
        launcher puts the kernel's node address in it at launch (a restart finds that one)."""
        from jupyter_client.localinterfaces import is_local_ip, localhost

        km = self.parent
        if km is not None and getattr(km, "transport", "tcp") == "tcp" and not is_local_ip(km.ip):
            km.ip = localhost()

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
        line = self._waiting(request)
        try:
            slice_ = await ledger.reserve_async(request, holder, wait=float(self.wait_timeout or 0), waiting=line)
        except NoGPU as error:
            line.left("without a slice: no GPU")
            if self.no_gpu == "fail":
                raise NoGPU(f"Kernel '{self._display_name()}' needs a GPU: {error}") from None
            reason = f"{error} This kernel runs on the CPU."
            self.log.warning("Kernel %s: %s", self.kernel_id, reason)
            env.update(cpu_environment(logical_devices=request.logical_devices, reason=reason))
            return None
        except BaseException as error:
            line.left(f"without a slice ({type(error).__name__})")
            raise
        line.left(f"with slice {slice_.id}")
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

    async def send_signal(self, signum: int) -> None:
        """jupyter_client's interrupt (and any signal the server sends): through the launcher."""
        await self._launcher().send_signal(self, signum)

    @property
    def has_process(self) -> bool:
        """jupyter_client asks before it polls or ends the kernel: through the launcher."""
        return self._launcher().has_kernel(self)

    async def poll(self) -> int | None:
        """jupyter_client's liveness check (None while the kernel runs): through the launcher."""
        return await self._launcher().poll(self)

    async def kill(self, restart: bool = False) -> None:
        """jupyter_client kills the kernel (a forced shutdown or restart): on a restart the server
        holds the slice first, so the kernel's end does not free it; then the launcher kills it."""
        if restart:
            await self._hold_for_restart()
        await self._launcher().kill(self, restart=restart)

    async def terminate(self, restart: bool = False) -> None:
        """jupyter_client asks the kernel to end (SIGTERM): as :meth:`kill`, the slice held first
        on a restart, then the launcher ends it."""
        if restart:
            await self._hold_for_restart()
        await self._launcher().terminate(self, restart=restart)

    async def cleanup(self, restart: bool = False) -> None:
        """Called after the kernel ends: a restart keeps the slice, a shutdown frees it."""
        await super().cleanup(restart=restart)
        if not restart:
            await self._release()
        await self._launcher().cleanup(self, restart=restart)

    async def get_provisioner_info(self) -> dict[str, Any]:
        """jupyter_client saves this with the kernel (a restarted server loads it): super()'s
        information first, plus the slice this kernel holds."""
        info: dict[str, Any] = await super().get_provisioner_info()
        info["vgpu_slice_id"] = self.slice_id
        if self.launch_state:
            info["vgpu_launch"] = dict(self.launch_state)
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        """jupyter_client hands back what :meth:`get_provisioner_info` saved (super() first): the
        kernel's slice, which is attached to the kernel's process again."""
        await super().load_provisioner_info(provisioner_info)
        self.slice_id = provisioner_info.get("vgpu_slice_id")
        self.launch_state = dict(provisioner_info.get("vgpu_launch") or {})
        if self.slice_id and self.pid:
            ledger = self._ledger()
            try:
                await asyncio.to_thread(ledger.attach, self.slice_id, int(self.pid))
            except SliceNotFound:
                self.log.warning("Slice %s of kernel %s is no longer in the ledger.", self.slice_id, self.kernel_id)
                self.slice_id = None
