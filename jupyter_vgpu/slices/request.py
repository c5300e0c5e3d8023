"""What a user asks for: a share (fraction or memory) of one or more GPUs, and the limit it may burst to.

An elastic request (issue 42) carries a **limit** beside its **request**, of the same kind (a
fraction with a fraction, memory with memory): the request is what the ledger books and
guarantees; the limit is what the process's frameworks may grow to while memory no request holds
is free. A request without a limit is exactly a request of before.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest
from ..units import describe_fraction, exact_bytes, format_bytes, parse_bytes, parse_fraction, share_number, shorten

if TYPE_CHECKING:
    from ..gpus import Snapshot

PLACEMENTS = ("binpack", "spread")

#: How the command line spells the request's settings, for messages.
CLI_NAMES = {
    "gpu_fraction": "-p/--fraction",
    "gpu_memory": "-m/--memory",
    "gpus": "-n/--gpus",
    "gpu": "--gpu",
    "logical_devices": "--logical-devices",
    "placement": "--placement",
    "gpu_fraction_limit": "--limit",
    "gpu_memory_limit": "--limit",
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
    #: The limit to burst to, of the request's kind (a share of each GPU, or bytes per GPU); None:
    #: no burst. A limit equal to the request is no limit.
    limit_fraction: float | None = None
    limit_memory: int | None = None
    #: The pinned GPU's index, as every view names a GPU ("on GPU 0"), once a ledger that knows the
    #: GPUs has taken the request (:meth:`pin_named`); until then the pin is said as it was given.
    gpu_index: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """The invariants of an already-parsed request (a kernelspec's traits build one directly)."""
        if self.fraction is None and self.memory is None and (self.limit_fraction is not None or self.limit_memory is not None):
            _check_limit(None, None, self.limit_fraction, self.limit_memory, _KEYS, {})
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
        _check_limit(self.fraction, self.memory, self.limit_fraction, self.limit_memory, _KEYS, {})
        if self.limit_fraction is not None and self.limit_fraction == self.fraction:
            object.__setattr__(self, "limit_fraction", None)
        if self.limit_memory is not None and self.limit_memory == self.memory:
            object.__setattr__(self, "limit_memory", None)

    @property
    def elastic(self) -> bool:
        """Whether the request has a limit above it to burst to."""
        return self.limit_fraction is not None or self.limit_memory is not None

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
        limit: Any = None,
        limit_fraction: Any = None,
        limit_memory: Any = None,
    ) -> SliceRequest:
        """Validate raw values (strings from a CLI, kernelspec JSON, env) into a request.

        Each bad value raises :class:`InvalidRequest` with one sentence naming the value and
        what is allowed. ``names`` renames the settings in messages (e.g. ``{"gpu_fraction":
        "-p/--fraction"}`` for a command line); by default they are the kernelspec keys.

        The burst limit comes as ``limit_fraction`` / ``limit_memory`` (kernelspec keys
        ``gpu_fraction_limit`` / ``gpu_memory_limit``), or as ``limit``, read as the request's kind
        (a command line's ``--limit``): a limit below the request, above a whole GPU, or of the
        other kind is refused in one sentence.
        """
        name = {key: key for key in (*_KEYS, "gpus", "gpu", "logical_devices", "placement")}
        name.update(names or {})
        if isinstance(limit, str) and not limit.strip():  # said, but empty: not the same as no limit at all
            raise InvalidRequest(
                f"{name['gpu_fraction_limit']} is empty; give the limit to burst to (1/2, 8GiB), or leave it out for a fixed slice."
            )
        if _given(limit):
            if _given(limit_fraction) or _given(limit_memory):
                raise InvalidRequest(f"{name['gpu_fraction_limit']} is given twice ({shorten(limit)}); give it once.")
            text = str(limit).strip()
            # Read as what it is written as, so that a limit of the other kind is said to be one
            # (a size has digits and ends in its unit; "nan" and "inf" are no sizes).
            sized = text[-1:].isalpha() and any(c.isdigit() for c in text)
            if sized or (_given(memory) and text.isascii() and text.isdigit()):
                limit_memory = limit
            else:
                limit_fraction = limit
        if _given(fraction) and _given(memory):
            raise InvalidRequest(
                f"{name['gpu_fraction']} ({shorten(fraction)}) and {name['gpu_memory']} ({shorten(memory)}) are both set; "
                "set only one of them."
            )
        parsed_fraction = parse_fraction(fraction, what=name["gpu_fraction"]) if _given(fraction) else None
        parsed_memory = parse_bytes(memory, what=name["gpu_memory"]) if _given(memory) else None
        parsed_limit_fraction, parsed_limit_memory = parse_limit(limit_fraction, limit_memory, name)
        written = {"gpu_fraction_limit": limit_fraction, "gpu_memory_limit": limit_memory}
        if parsed_fraction is None and parsed_memory is None and (_given(limit_fraction) or _given(limit_memory)):
            _check_limit(None, None, parsed_limit_fraction, parsed_limit_memory, name, written)
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
        _check_limit(parsed_fraction, parsed_memory, parsed_limit_fraction, parsed_limit_memory, name, written)
        return cls(
            fraction=parsed_fraction,
            memory=parsed_memory,
            gpus=count,
            gpu=pinned,
            logical_devices=logical,
            placement=str(placement),
            percent=parsed_fraction is not None and isinstance(fraction, str) and fraction.strip().endswith("%"),
            limit_fraction=parsed_limit_fraction,
            limit_memory=parsed_limit_memory,
        )

    def amount_on(self, memory_total: int) -> int:
        """Bytes this request reserves on a GPU of ``memory_total`` bytes."""
        if self.memory is not None:
            return self.memory
        assert self.fraction is not None
        return int(math.floor(self.fraction * memory_total))

    def limit_on(self, memory_total: int) -> int | None:
        """Bytes this request may burst to on a GPU of ``memory_total`` bytes (never more than the
        GPU); None without a limit."""
        if self.limit_memory is not None:
            return min(self.limit_memory, memory_total)
        if self.limit_fraction is not None:
            return int(math.floor(min(1.0, self.limit_fraction) * memory_total))
        return None

    def describe_limit(self) -> str:
        """``1/2``, ``50%``, ``1 GPU``, ``8.0 GiB``: the limit as it was asked for; empty without one."""
        if self.limit_memory is not None:
            return format_bytes(self.limit_memory)
        if self.limit_fraction is None:
            return ""
        if self.limit_fraction >= 1:
            return "1 GPU"
        return describe_fraction(self.limit_fraction, percent=self.percent)

    def describe(self, *, pin: bool = True) -> str:
        """``1/4 GPU``, ``0.33 GPU``, ``33% of a GPU``, ``6.0 GiB``, ``2 x 1/2 GPU``, ``1 GPU``: the
        share as it was asked for (:func:`~jupyter_vgpu.units.describe_fraction`); an elastic one
        adds its limit: ``1/4 GPU, up to 1/2``, ``4.0 GiB, up to 8.0 GiB``; a pinned one its GPU,
        ``2.0 GiB on GPU 0``, unless ``pin`` is False (where the text names the GPU already). (Worked
        out once per request: every view of every slice says it, every poll.)"""
        if not pin and self.gpu is not None:
            return replace(self, gpu=None, gpu_index=None).describe()
        return _described(self, _kinds(self))

    def pin_named(self, snapshot: Snapshot) -> SliceRequest:
        """This request with its pinned GPU named by its index in ``snapshot`` (a UUID pin is said
        "on GPU 0", as every view names GPUs); unchanged without a pin, or a pin ``snapshot`` lacks
        (then the pin, as given, is the only name there is). The pin itself is kept as given."""
        if self.gpu is None or self.gpu_index is not None:
            return self
        found = snapshot.find(self.gpu)
        return self if found is None else replace(self, gpu_index=found.index)

    def to_dict(self) -> dict[str, Any]:
        """The request's fields; a limit's only when it has one (a request without a limit is
        stored, sent and shown exactly as before limits existed). A fresh dict each time, made
        from one worked out once per request."""
        return dict(_fields(self, _kinds(self)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SliceRequest:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _kinds(request: SliceRequest) -> tuple[Any, ...]:
    """What tells requests apart beside their equality, in the caches below: the types of their
    numbers (``1`` and ``1.0`` are equal, one key, but not one JSON value) and ``percent``, which
    equality leaves out (``33%`` and ``0.33`` are one share, said two ways), and the pinned GPU's
    index, which equality leaves out too (a pin by UUID or by index is one pin)."""
    return (type(request.fraction), type(request.memory), type(request.limit_fraction), type(request.limit_memory), request.percent, request.gpu_index)


@functools.lru_cache(maxsize=4096)
def _fields(request: SliceRequest, kinds: tuple[Any, ...]) -> dict[str, Any]:
    data = asdict(request)
    for key in ("limit_fraction", "limit_memory", "gpu_index"):
        if data[key] is None:
            del data[key]
    return data


@functools.lru_cache(maxsize=4096)
def _described(request: SliceRequest, kinds: tuple[Any, ...]) -> str:
    if request.memory is not None:
        share = format_bytes(request.memory)
    else:
        assert request.fraction is not None
        text = describe_fraction(request.fraction, percent=request.percent)
        share = "1 GPU" if request.fraction >= 1 else f"{text} of a GPU" if text.endswith("%") else f"{text} GPU"
    if request.gpus > 1:
        share = f"{request.gpus} GPUs" if request.fraction == 1 else f"{request.gpus} x {share}"
    if request.gpu is not None:
        share += f" on GPU {request.gpu if request.gpu_index is None else request.gpu_index}"
    if request.elastic:
        share += f", up to {request.describe_limit()}"
    return share


def parse_share(text: str, limit: str | None = None, *, names: dict[str, str] | None = None) -> SliceRequest:
    """``"1/4"``, ``"25%"``, ``"0.25"`` (a fraction) or ``"6GiB"`` (memory), for one GPU, with
    ``limit`` (``"1/2"``, ``"8GiB"``) of the same kind to burst to."""
    value = str(text).strip()
    if value and value[-1].isalpha():
        return SliceRequest.parse(memory=value, limit=limit, names=names)
    return SliceRequest.parse(fraction=value, limit=limit, names=names)


#: The kernelspec keys of a request's amount and its limit, as messages name them.
_KEYS = {"gpu_fraction": "gpu_fraction", "gpu_memory": "gpu_memory", "gpu_fraction_limit": "gpu_fraction_limit", "gpu_memory_limit": "gpu_memory_limit"}


def parse_limit(fraction: Any, memory: Any, name: Mapping[str, str] = _KEYS) -> tuple[float | None, int | None]:
    """A burst limit as written (a share of a GPU, or a size) into ``(limit_fraction,
    limit_memory)``; one sentence for a value that is not one, or a share above a whole GPU."""
    if _given(fraction) and _given(memory):
        raise InvalidRequest(
            f"{name['gpu_fraction_limit']} ({shorten(fraction)}) and {name['gpu_memory_limit']} ({shorten(memory)}) are both set; "
            "set only one of them."
        )
    if _given(fraction):
        try:
            above = share_number(fraction) > 1
        except (ValueError, ZeroDivisionError):
            above = False  # parse_fraction says what it is not
        if above:
            raise InvalidRequest(f"{name['gpu_fraction_limit']} {shorten(fraction)} is above a whole GPU; use a limit of at most 1 (and at least the request).")
    parsed_fraction = parse_fraction(fraction, what=name["gpu_fraction_limit"]) if _given(fraction) else None
    parsed_memory = parse_bytes(memory, what=name["gpu_memory_limit"]) if _given(memory) else None
    return parsed_fraction, parsed_memory


def _check_limit(
    fraction: float | None,
    memory: int | None,
    limit_fraction: float | None,
    limit_memory: int | None,
    name: dict[str, str],
    written: Mapping[str, Any],
) -> None:
    """One sentence for a limit that cannot go with its request: both kinds, no request, the
    other kind, above a whole GPU, below the request. ``written``: the values as the user wrote
    them (else the parsed ones are named)."""

    def said(key: str, value: Any) -> str:
        raw = written.get(key)
        if _given(raw):
            return shorten(raw)
        return exact_bytes(value) if key == "gpu_memory_limit" else shorten(value)

    if limit_fraction is None and limit_memory is None:
        return
    if limit_fraction is not None and limit_memory is not None:
        raise InvalidRequest(
            f"{name['gpu_fraction_limit']} ({said('gpu_fraction_limit', limit_fraction)}) and {name['gpu_memory_limit']} "
            f"({said('gpu_memory_limit', limit_memory)}) are both set; set only one of them."
        )
    key = "gpu_fraction_limit" if limit_fraction is not None else "gpu_memory_limit"
    shown = f"{name[key]} {said(key, limit_fraction if limit_fraction is not None else limit_memory)}"
    if fraction is None and memory is None:
        raise InvalidRequest(
            f"{shown} is a limit with no request to burst from; also set {name['gpu_fraction' if limit_fraction is not None else 'gpu_memory']} "
            "(what is booked and guaranteed)."
        )
    if limit_fraction is not None and fraction is None:
        raise InvalidRequest(
            f"{shown} is a share of a GPU but the request is memory ({format_bytes(memory)}); "
            f"give the limit as a size too, e.g. {limit_above(None, memory)}."
        )
    if limit_memory is not None and memory is None:
        assert fraction is not None
        if (above := limit_above(fraction, None)) is None:
            raise InvalidRequest(f"{shown} is a size but the request is a whole GPU, with nothing above it to burst to; leave the limit out.")
        raise InvalidRequest(
            f"{shown} is a size but the request is a share of a GPU ({describe_fraction(fraction)}); give the limit as a share too, e.g. {above}."
        )
    if limit_fraction is not None:
        assert fraction is not None
        if not math.isfinite(limit_fraction) or limit_fraction > 1:
            raise InvalidRequest(f"{shown} is above a whole GPU; use a limit of at least {describe_fraction(fraction)} and at most 1.")
        if limit_fraction < fraction:
            raise InvalidRequest(
                f"{shown} is below its request ({describe_fraction(fraction)}); use a limit of at least {describe_fraction(fraction)} and at most 1."
            )
    if limit_memory is not None and memory is not None and limit_memory < memory:
        raise InvalidRequest(f"{shown} is below its request ({format_bytes(memory)}); use a limit of at least {exact_bytes(memory)}.")


def limit_above(fraction: float | None, memory: int | None) -> str | None:
    """A limit for a request of ``fraction`` or ``memory``, as refusals give an example of one, as
    the user would type it: of the request's kind and above it (twice the request, a whole GPU at
    most): ``2GiB``, ``1/2``. None for a whole GPU, which has nothing above it to burst to."""
    if memory is not None:
        return exact_bytes(2 * memory)
    if fraction is None or fraction >= 1:
        return None
    return describe_fraction(min(1.0, 2 * fraction))


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
