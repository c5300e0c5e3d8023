"""The provisioner's settings: each kernelspec key checked once, its launcher's settings handed to
the launcher to check, the server's settings and its one ledger connection, shared by every
provisioner of a server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from traitlets import Float, HasTraits, Int, TraitError, TraitType, Unicode, Union
from traitlets.config.loader import DeferredConfigList, DeferredConfigString

from ..config import VGPU, load_settings
from ..errors import InvalidRequest
from ..ledger import Ledger, open_ledger
from ..slices.environment import DEVICE_NAMES
from ..slices.request import PLACEMENTS, parse_limit
from ..units import parse_seconds, shorten
from .errors import InvalidKernelConfig
from .launchers import Launcher, LauncherSettings, known

_ledgers: dict[tuple[str, str, int | None], Ledger] = {}
_settings: dict[int, tuple[Any, VGPU]] = {}
_shared_lock = threading.Lock()


def server_settings(config: Any) -> VGPU:
    """The settings of the server whose config this is, read once (config files included)."""
    with _shared_lock:
        cached = _settings.get(id(config))
        if cached is not None and cached[0] is config:
            return cached[1]
    settings = load_settings(config)
    with _shared_lock:
        _settings[id(config)] = (config, settings)
    return settings


def shared_ledger(settings: VGPU) -> Ledger:
    """One ledger connection per (path, GPUs, allowance) for all provisioners of a server."""
    key = (str(settings.resolved_ledger_path), settings.resolved_simulate, settings.context_allowance_bytes)
    with _shared_lock:
        if key not in _ledgers:
            _ledgers[key] = open_ledger(settings)
        return _ledgers[key]


class Setting(TraitType[Any, Any]):
    """A provisioner setting: its trait's type (``Int(min=1)``, ``Enum``, a ``Union``) first, then
    ``parse``, which turns the value into what the slice request takes (stored parsed: parsed once,
    here). A value either refuses is said in ``parse``'s one sentence, naming the setting and what is
    allowed (never traitlets' "The 'gpus' trait of a VGPUProvisioner instance expected ..."); empty
    text is the setting left out (None)."""

    def __init__(self, kind: TraitType[Any, Any], parse: Callable[[Any], Any], allowed: str, default: Any = None, help: str = "") -> None:
        super().__init__(default, allow_none=True, help=f"{help.rstrip()}\n        Allowed: {allowed}.")
        self.kind = kind
        self.parse = parse
        self.allowed = allowed

    def class_init(self, cls: Any, name: str | None) -> None:
        super().class_init(cls, name)
        self.kind.class_init(cls, name)

    def from_string(self, s: str) -> Any:
        return self.kind.from_string(s)  # c.VGPUProvisioner.gpus=2 on a command line

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        try:
            if isinstance(value, bool):  # a bool is an int to Python, never a count, share or size
                raise TraitError
            self.kind._validate(obj, value)
            typed = True
        except TraitError:
            typed = False
        try:
            parsed = self.parse(value)  # the value as written, so that a refusal names it so
        except InvalidRequest as error:
            raise InvalidKernelConfig(str(error)) from None
        if not typed:  # parse took what the type refuses: the type is the contract
            raise InvalidKernelConfig(f"{self.name} {shorten(value)} is not allowed; use {self.allowed}.")
        return parsed

    def info(self) -> str:
        return self.allowed


class BurstLimits(HasTraits):
    """An elastic slice's limit (issue 42), a part of the provisioner's settings: what the kernel's
    frameworks may grow to beyond its request (``gpu_fraction`` / ``gpu_memory``), which alone is
    booked and guaranteed. Checked against the request when the kernel starts (:meth:`SliceRequest`'s
    one sentence), before anything is reserved."""

    gpu_fraction_limit = Setting(
        Union([Float(), Unicode()]),
        lambda v: parse_limit(v, None)[0],
        "a share of a GPU in (0, 1] at least gpu_fraction, written 0.5, 1/2 or 50%",
        help="""Elastic slice: the share of each GPU this kernel's frameworks may grow to while no
        other kernel's request needs it, at least gpu_fraction (which is what is booked). Needs
        gpu_fraction; without it the slice is fixed.""",
    ).tag(config=True)

    gpu_memory_limit = Setting(
        Union([Int(min=1), Unicode()]),
        lambda v: parse_limit(None, v)[1],
        "a size such as 8GiB, at least gpu_memory",
        help="""Elastic slice: the memory per GPU this kernel's frameworks may grow to while no
        other kernel's request needs it, at least gpu_memory (which is what is booked). Needs
        gpu_memory; without it the slice is fixed.""",
    ).tag(config=True)


def check_seconds(value: Any) -> float:
    return parse_seconds(value, what="wait_timeout")


def check_placement(value: Any) -> str:
    if value not in PLACEMENTS:
        raise InvalidRequest(f"placement {shorten(value)} is not allowed; use one of: {', '.join(PLACEMENTS)}.")
    return str(value)


def check_no_gpu(value: Any) -> str:
    if value not in NO_GPU_CHOICES:
        raise InvalidRequest(f"no_gpu {shorten(value)} is not allowed; use one of: {', '.join(NO_GPU_CHOICES)}.")
    return str(value)


def check_device_names(value: Any) -> str:
    if value not in DEVICE_NAMES:
        raise InvalidRequest(f"device_names {shorten(value)} is not allowed; use one of: {', '.join(DEVICE_NAMES)}.")
    return str(value)


def check_pinned(value: Any) -> str:
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
    "launcher", "gpu_fraction_limit", "gpu_memory_limit",
)  # fmt: skip


def unknown_keys_message(unknown: list[str], spec: Any = None, launcher: str = "") -> str:
    name = getattr(spec, "display_name", None)
    where = f"Kernel '{name}'" if name else "The kernelspec"
    keys = ", ".join(shorten(k) for k in unknown[:5])
    own = f" and {launcher} (its launcher's settings)" if launcher else ""
    return (
        f"{where}: kernel_provisioner config {'key' if len(unknown) == 1 else 'keys'} {keys} "
        f"{'is' if len(unknown) == 1 else 'are'} not allowed; use {', '.join(VGPU_SETTINGS)}{own}."
    )


def take_others(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keys of a kernelspec's provisioner config that are not this package's settings (nor what
    jupyter_client passes), taken out of ``kwargs``: its launcher's settings, or unknown keys
    (:func:`launcher_settings` says which, once the launcher is known)."""
    return {key: kwargs.pop(key) for key in list(kwargs) if key not in SET_BY_JUPYTER_CLIENT and key not in VGPU_SETTINGS}


def flat_keys(keys: Iterable[str]) -> list[str]:
    """Of ``keys`` (``c.VGPUProvisioner`` options that are no trait), those that name a launcher's
    setting the way kernelspecs and configs did before issue 47: ``<launcher>_<setting>``
    (``slurm_restarts``). They are that launcher's, not unknown options."""
    keys = list(keys)
    names = known() if keys else []
    return [key for key in keys if any(key.startswith(f"{name}_") for name in names)]


def _typed(value: Any) -> Any:
    """A value as a command line gives it (``--VGPUProvisioner.slurm_restarts=2``), typed as JSON
    would type it; text that is not JSON stays text."""
    if isinstance(value, DeferredConfigList):
        return list(value)
    if isinstance(value, DeferredConfigString):
        try:
            return json.loads(value)
        except ValueError:
            return str(value)
    return value


def launcher_settings(
    launcher: Launcher, others: Mapping[str, Any], server: Mapping[str, Any], flat_config: Mapping[str, Any], spec: Any = None
) -> LauncherSettings:
    """The kernel's settings of its launcher, checked by it (:meth:`Launcher.check_settings`): the
    kernelspec's, under the launcher's own key (``"slurm": {"restarts": 1}``), over the server's
    (``c.VGPUProvisioner.launcher_settings``). Kernelspecs and configs written before issue 47 say
    them as ``<launcher>_<setting>`` (``slurm_args``, ``slurm_restarts``,
    ``c.VGPUProvisioner.slurm_gpu_memory``): still read, under the key. Any other key of ``others``
    is not allowed; each refusal is one sentence naming the kernel."""
    name, prefix = launcher.name, f"{launcher.name}_"
    unknown = sorted(key for key in others if key != name and not key.startswith(prefix))
    if unknown:
        raise InvalidKernelConfig(unknown_keys_message(unknown, spec, name if launcher.setting_names() else ""))
    own, server_own = others.get(name, {}), server.get(name, {})
    settings: dict[str, Any] = {key[len(prefix) :]: _typed(v) for key, v in flat_config.items() if key.startswith(prefix)}
    try:
        for given in (server_own, own):
            if not isinstance(given, Mapping):
                return launcher.check_settings(given)  # which says what it takes
        settings.update(server_own)
        settings.update({key[len(prefix) :]: v for key, v in others.items() if key.startswith(prefix)})
        return launcher.check_settings({**settings, **own})
    except InvalidRequest as error:
        shown = getattr(spec, "display_name", None)
        raise InvalidKernelConfig(f"Kernel '{shown}': {error}" if shown else str(error)) from None
