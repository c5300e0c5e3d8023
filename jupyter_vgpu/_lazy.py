"""Packages whose names are imported on first use (PEP 562), so that a kernel loading
jupyter-vgpu pays neither for SQLite nor for NVML until something needs them."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(package: str, namespace: dict[str, Any], where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``package.<where[name]>`` once."""

    def module_getattr(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value
        return value

    return module_getattr
