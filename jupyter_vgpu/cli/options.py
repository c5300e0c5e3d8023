"""The node page's command-line options, shared by ``jupyter vgpu exporter`` (``--port``, ...) and
``jupyter vgpu broker`` (``--metrics-port``, ...): one check and one sentence per value, naming the
option it was given to. Importing this module imports nothing but the standard library.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..units import shorten

DEFAULT_ADDRESS = "127.0.0.1"  # the page names every user's notebooks and commands
DEFAULT_INTERVAL = 5.0
HOSTNAME_MAX = 253


def port(option: str) -> Callable[[str], int]:
    """The type of ``option``: a port number, 0 for any free port."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if not 0 <= value <= 65535:
            raise argparse.ArgumentTypeError(f"{option} {shorten(text)} is not a port number from 0 to 65535 (0: any free port)")
        return value

    return check


def hostname(option: str) -> Callable[[str], str]:
    """The type of ``option``: the ``hostname`` label, 1 to 253 printable characters without spaces."""

    def check(text: str) -> str:
        if not text or len(text) > HOSTNAME_MAX or any(c.isspace() or not c.isprintable() for c in text):
            raise argparse.ArgumentTypeError(
                f"{option} {shorten(text)} is not a host name: give 1 to {HOSTNAME_MAX} characters without spaces"
            )
        return text

    return check


def seconds(option: str, low: float, high: float) -> Callable[[str], float]:
    """The type of ``option``: a number of seconds from ``low`` to ``high``."""

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{option} {shorten(text)} is not a number of seconds from {low:g} to {high:g}")
        return value

    return check


def interval(option: str) -> Callable[[str], float]:
    """The type of ``option``: how often the node is read, 0.1 to 3600 seconds."""
    return seconds(option, 0.1, 3600)


def folder(option: str) -> Callable[[str], str]:
    """The type of ``option``: a folder's path, not empty."""

    def check(text: str) -> str:
        if not text.strip() or "\0" in text:
            raise argparse.ArgumentTypeError(f"{option} {shorten(text)} is not a folder's path")
        return text

    return check
