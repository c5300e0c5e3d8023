"""Byte sizes and GPU shares as people write them: ``6GiB``, ``512MiB``, ``1/4``, ``25%``."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from .errors import InvalidRequest

if TYPE_CHECKING:
    from fractions import Fraction

# fractions (and the decimal module it imports) is imported where a share or size needs it
# exactly, not with this module: every sliced kernel imports this at its start (issue 47).

KiB = 1024
MiB = 1024**2
GiB = 1024**3

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KiB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MiB,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GiB,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$", re.ASCII)
ALLOWED_SIZES = "a size such as 6GiB, 512MiB, 1.5GB or a number of bytes"
#: No GPU (or simulated one) holds more; larger sizes are typos, and would overflow SQLite's integers.
MAX_SIZE = 1024**5
_MAX_TEXT = 64


def parse_bytes(value: str | int | float, *, what: str = "memory") -> int:
    """Parse ``"6GiB"``, ``"512MiB"``, ``"1.5GB"`` or a plain byte count into bytes.

    Raises :class:`InvalidRequest` naming the value and the accepted forms.
    """
    if isinstance(value, bool):
        raise InvalidRequest(f"{what} {shorten(value)} is not {ALLOWED_SIZES}.")
    result: int | float | Fraction
    if isinstance(value, (int, float)):
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise InvalidRequest(f"{what} {shorten(value)} must be larger than zero; use {ALLOWED_SIZES}.")
        result = value
    else:
        text = str(value)
        match = _SIZE.match(text) if len(text) <= _MAX_TEXT else None
        if not match or match.group(2).lower() not in _UNITS:
            raise InvalidRequest(f"{what} {shorten(value)} is not {ALLOWED_SIZES}.")
        from fractions import Fraction

        result = Fraction(match.group(1)) * _UNITS[match.group(2).lower()]  # exact: "1.1GB" is 1100000000 bytes
    if result > MAX_SIZE:
        raise InvalidRequest(f"{what} {shorten(value)} is larger than any GPU (at most 1 PiB); use {ALLOWED_SIZES}.")
    if int(result) <= 0:
        raise InvalidRequest(f"{what} {shorten(value)} must be larger than zero ({ALLOWED_SIZES}).")
    return int(result)


_EXACT_UNITS = (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB),
                ("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("kB", 1000))  # fmt: skip


def exact_bytes(count: int) -> str:
    """The shortest text :func:`parse_bytes` reads back as exactly ``count`` bytes: ``1.25GiB``,
    ``5GB``, ``1.5GiB`` (for 1536 MiB), else the byte count. What a kernelspec stores."""
    from fractions import Fraction

    best = str(count)
    for name, unit in _EXACT_UNITS:
        value = Fraction(count, unit)
        if value < 1 or 1000 % value.denominator:  # not a whole number of thousandths of the unit
            continue
        whole, rest = divmod(value.numerator, value.denominator)
        if rest == 0:
            text = f"{whole}{name}"
        else:
            digits = str(rest * (1000 // value.denominator)).rjust(3, "0").rstrip("0")
            text = f"{whole}.{digits}{name}"
        if len(text) < len(best):
            best = text
    return best


def shorten(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut in the middle when long: a 400-digit typo stays a readable message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-(limit // 2) :]} ({len(str(value))} characters)"


def format_bytes(value: int | float | None, *, precision: int = 1) -> str:
    """Human-readable binary size: ``4.0 GiB``, ``300 MiB``; ``n/a`` for unknown values."""
    if value is None:
        return "n/a"
    value = float(value)
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(value) >= size:
            scaled = value / size
            if unit == "MiB" or unit == "KiB":
                return f"{scaled:.0f} {unit}"
            return f"{scaled:.{precision}f} {unit}"
    return f"{value:.0f} B"


_RATIO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)\s*$", re.ASCII)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$", re.ASCII)
ALLOWED_FRACTIONS = "a share of a GPU in (0, 1], written 0.25, 1/4 or 25%"


def share_number(value: object) -> float:
    """The number a share of GPUs is written as: ``0.25``, ``"1/4"``, ``"25%"``, ``"2"``. The one
    grammar of a share (a request's ``gpu_fraction``, a policy's limits); callers apply their
    bounds. Raises ``ValueError`` for what is not a share, ``ZeroDivisionError`` for ``"1/0"``;
    only ASCII digits count (``float("٣")`` is 3)."""
    if isinstance(value, str) and len(value) <= _MAX_TEXT:
        if m := _RATIO.match(value):
            from fractions import Fraction

            return float(Fraction(m.group(1)) / Fraction(m.group(2)))
        if m := _PERCENT.match(value):
            from fractions import Fraction

            return float(Fraction(m.group(1)) / 100)
    return _plain_number(value)


def _plain_number(value: object) -> float:
    """A number from an int, a float or short ASCII text, else ``ValueError``: ``float("٣")`` is 3,
    so other scripts' digits are refused, and an int too large for a float reads as infinite
    (``float()`` of 400 digits overflows). Callers apply their bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(value)
    if isinstance(value, int):
        return float(value) if abs(value) <= 2**53 else math.copysign(math.inf, value)
    if isinstance(value, str) and (len(value) > _MAX_TEXT or not value.isascii()):
        raise ValueError(value)
    return float(value)


def parse_fraction(value: str | int | float, *, what: str = "gpu_fraction") -> float:
    """Parse ``0.25``, ``"1/4"`` or ``"25%"`` into a float in (0, 1]."""
    try:
        result = share_number(value)
    except ZeroDivisionError:
        raise InvalidRequest(f"{what} {shorten(value)} divides by zero; use {ALLOWED_FRACTIONS}.") from None
    except ValueError:
        raise InvalidRequest(f"{what} {shorten(value)} is not {ALLOWED_FRACTIONS}.") from None
    if not math.isfinite(result) or not 0 < result <= 1:
        raise InvalidRequest(f"{what} {shorten(value)} is outside (0, 1]; use {ALLOWED_FRACTIONS}.")
    return result


def describe_fraction(fraction: float, *, percent: bool = False) -> str:
    """A share of a GPU as a person reads it: a simple fraction where it is one (``0.25`` ->
    ``1/4``, ``0.2`` -> ``1/5``, ``12.5%`` -> ``1/8``: denominators up to 16, one style in every
    table; a share in shards exactly, ``1/64``, ``3/128``: a power of two up to 1024), else the number as it was asked for: ``0.33`` -> ``0.33`` (not ``33/100``), or
    ``33%`` when it was asked as a percentage (``percent``); ``1.0`` -> ``1``."""
    if fraction >= 1:
        return "1"
    from fractions import Fraction

    simple = Fraction(fraction).limit_denominator(16)
    if simple.numerator > 0 and abs(float(simple) - fraction) <= 1e-6 * fraction:
        return f"{simple.numerator}/{simple.denominator}"
    shards = Fraction(fraction).limit_denominator(1024)  # a share in shards: 1/32, 3/64 (Slurm's 32 or 64 a GPU)
    if shards.numerator > 0 and float(shards) == fraction and shards.denominator & (shards.denominator - 1) == 0:
        return f"{shards.numerator}/{shards.denominator}"
    return f"{_decimal(fraction * 100)}%" if percent else _decimal(fraction)


def _decimal(number: float) -> str:
    """``number`` in positional notation (never ``1e-06``), six significant digits."""
    text = f"{number:.6g}"
    if "e" in text:
        text = f"{float(text):.15f}".rstrip("0").rstrip(".")
    return text


#: The longest wait in line anything accepts (a kernelspec's wait_timeout, ``run --wait``,
#: ``kernelspec install --wait``, a policy's max_wait): 366 days.
MAX_WAIT_SECONDS = 366 * 86400
ALLOWED_WAITS = f"a number of seconds from 0 to {MAX_WAIT_SECONDS} (366 days)"


def parse_seconds(value: object, *, what: str = "wait_timeout") -> float:
    """A wait in seconds, ``0 <= seconds <= MAX_WAIT_SECONDS``, from a number or ASCII text: the
    one parser every entry point uses, so a value one accepts, all accept."""
    try:
        seconds = _plain_number(value)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_WAIT_SECONDS):
        raise InvalidRequest(f"{what} {shorten(value)} is not allowed; use {ALLOWED_WAITS}.")
    return seconds


def format_duration(seconds: float) -> str:
    """``45 s``, ``1 min 31 s``, ``42 min``, ``3 h 5 min``: how long, for people (idle times,
    waits). Never more than it was: each unit is cut, not rounded up (91 s is "1 min 31 s", not
    "2 min"); seconds are said under 10 minutes, where they still matter."""
    whole = max(0, int(seconds)) if math.isfinite(seconds) else 0
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    if minutes < 10:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
