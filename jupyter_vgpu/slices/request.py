"""What a user asks for: a share (fraction or memory) of one or more GPUs."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InvalidRequest
from ..units import describe_fraction, format_bytes, parse_bytes, parse_fraction, shorten

PLACEMENTS = ("binpack", "spread")

#: How the command line spells the request's settings, for messages.
CLI_NAMES = {
    "gpu_fraction": "-p/--fraction",
    "gpu_memory": "-m/--memory",
    "gpus": "-n/--gpus",
    "gpu": "--gpu",
    "logical_devices": "--logical-devices",
    "placement": "--placement",
}


@dataclass(frozen=True)
class SliceRequest:
    """A validated request. Exactly one of ``fraction`` and ``memory`` is set.

    ``fraction`` is a share of each GPU's total memory; ``memory`` is bytes per GPU. Either
    amount is the slice's whole footprint on the GPU, the CUDA-context allowance included.
    """

    fraction: float | None = None
    memory: int | None = None
    gpus: int = 1
    gpu: str | None = None
    logical_devices: int = 1
    placement: str = "binpack"
    #: The fraction was asked for as a percentage (``-p 33%``): said back as one ("33% of a GPU").
    percent: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        """The invariants of an already-parsed request (a kernelspec's traits build one directly)."""
        if (self.fraction is None) == (self.memory is None):
            if self.fraction is None:
                object.__setattr__(self, "fraction", 1.0)  # neither: whole GPUs
            else:
                raise InvalidRequest(
                    f"gpu_fraction ({shorten(self.fraction)}) and gpu_memory ({shorten(self.memory)}) are both set; set only one of them."
                )
        if self.gpu is not None and self.gpus != 1:
            raise InvalidRequest(f"A pinned GPU (gpu {shorten(self.gpu)}) needs one GPU, not {self.gpus}.")
        if self.placement not in PLACEMENTS:
            raise InvalidRequest(f"placement {shorten(self.placement)} is not allowed; use one of: {', '.join(PLACEMENTS)}.")

    @classmethod
    def parse(
        cls,
        fraction: Any = None,
        memory: Any = None,
        *,
        gpus: Any = 1,
        gpu: Any = None,
        logical_devices: Any = 1,
        placement: Any = "binpack",
        default_fraction: float | None = 1.0,
        names: dict[str, str] | None = None,
    ) -> SliceRequest:
        """Validate raw values (strings from a CLI, kernelspec JSON, env) into a request.

        Each bad value raises :class:`InvalidRequest` with one sentence naming the value and
        what is allowed. ``names`` renames the settings in messages (e.g. ``{"gpu_fraction":
        "-p/--fraction"}`` for a command line); by default they are the kernelspec keys.
        """
        name = {key: key for key in ("gpu_fraction", "gpu_memory", "gpus", "gpu", "logical_devices", "placement")}
        name.update(names or {})
        if _given(fraction) and _given(memory):
            raise InvalidRequest(
                f"{name['gpu_fraction']} ({shorten(fraction)}) and {name['gpu_memory']} ({shorten(memory)}) are both set; "
                "set only one of them."
            )
        parsed_fraction = parse_fraction(fraction, what=name["gpu_fraction"]) if _given(fraction) else None
        parsed_memory = parse_bytes(memory, what=name["gpu_memory"]) if _given(memory) else None
        if parsed_fraction is None and parsed_memory is None:
            if default_fraction is None:
                raise InvalidRequest(f"Set {name['gpu_fraction']} (e.g. 0.25) or {name['gpu_memory']} (e.g. 6GiB).")
            parsed_fraction = default_fraction
        count = _positive_int(gpus, name["gpus"], "a whole number of GPUs, 1 or more")
        logical = _positive_int(logical_devices, name["logical_devices"], "a whole number, 1 or more")
        if str(placement) not in PLACEMENTS:
            raise InvalidRequest(
                f"{name['placement']} {shorten(placement)} is not allowed; use one of: {', '.join(PLACEMENTS)}."
            )
        pinned = None
        if _given(gpu):
            pinned = str(gpu).strip()
            if len(pinned) > 64:
                raise InvalidRequest(f"{name['gpu']} {shorten(pinned)} is not a GPU index or UUID.")
            if count != 1:
                raise InvalidRequest(f"A pinned GPU ({name['gpu']} {shorten(pinned)}) needs one GPU, not {count}.")
        return cls(
            fraction=parsed_fraction,
            memory=parsed_memory,
            gpus=count,
            gpu=pinned,
            logical_devices=logical,
            placement=str(placement),
            percent=parsed_fraction is not None and isinstance(fraction, str) and fraction.strip().endswith("%"),
        )

    def amount_on(self, memory_total: int) -> int:
        """Bytes this request reserves on a GPU of ``memory_total`` bytes."""
        if self.memory is not None:
            return self.memory
        assert self.fraction is not None
        return int(math.floor(self.fraction * memory_total))

    def describe(self) -> str:
        """``1/4 GPU``, ``0.33 GPU``, ``33% of a GPU``, ``6.0 GiB``, ``2 x 1/2 GPU``, ``1 GPU``: the
        share as it was asked for (:func:`~jupyter_vgpu.units.describe_fraction`)."""
        if self.memory is not None:
            share = format_bytes(self.memory)
        else:
            assert self.fraction is not None
            text = describe_fraction(self.fraction, percent=self.percent)
            share = "1 GPU" if self.fraction >= 1 else f"{text} of a GPU" if text.endswith("%") else f"{text} GPU"
        if self.gpus > 1:
            share = f"{self.gpus} GPUs" if self.fraction == 1 else f"{self.gpus} x {share}"
        if self.gpu is not None:
            share += f" on GPU {self.gpu}"
        return share

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SliceRequest:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def parse_share(text: str) -> SliceRequest:
    """``"1/4"``, ``"25%"``, ``"0.25"`` (a fraction) or ``"6GiB"`` (memory), for one GPU."""
    value = str(text).strip()
    if value and value[-1].isalpha():
        return SliceRequest.parse(memory=value)
    return SliceRequest.parse(fraction=value)


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and value.strip() == "")


#: No node has more GPUs, and TensorFlow splits a GPU into few logical devices.
MAX_COUNT = 1024


def _positive_int(value: Any, name: str, allowed: str) -> int:
    refused = InvalidRequest(f"{name} {shorten(value)} is not allowed; use {allowed} (at most {MAX_COUNT}).")
    if isinstance(value, bool) or (isinstance(value, str) and (len(value) > 32 or not value.isascii())):
        raise refused  # ASCII digits only: float() reads other scripts' digits ("٣" is 3)
    if isinstance(value, int):
        number = value
    else:
        try:
            as_float = float(value)
        except (TypeError, ValueError, OverflowError):
            raise refused from None
        if not math.isfinite(as_float) or as_float != int(as_float):
            raise refused
        number = int(as_float)
    if not 1 <= number <= MAX_COUNT:
        raise refused
    return number
