"""The provisioner's settings: each kernelspec key checked once, the server's settings and its
one ledger connection, shared by every provisioner of a server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..config import VGPU, load_settings
from ..errors import InvalidRequest
from ..ledger import Ledger, open_ledger
from ..slices.environment import DEVICE_NAMES
from ..slices.request import PLACEMENTS
from ..units import parse_seconds, shorten
from .errors import InvalidKernelConfig

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


def converted(parse: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
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
    "launcher",
)  # fmt: skip


def unknown_keys_message(unknown: list[str], spec: Any = None) -> str:
    name = getattr(spec, "display_name", None)
    where = f"Kernel '{name}'" if name else "The kernelspec"
    keys = ", ".join(shorten(k) for k in unknown[:5])
    return (
        f"{where}: kernel_provisioner config {'key' if len(unknown) == 1 else 'keys'} {keys} "
        f"{'is' if len(unknown) == 1 else 'are'} not allowed; use {', '.join(VGPU_SETTINGS)}."
    )
