"""Optional dependencies: a feature that needs an extra says so in one sentence, never a traceback."""

from __future__ import annotations

from importlib.util import find_spec

from .errors import VGPUError


class MissingExtra(VGPUError, ImportError):
    """A feature needs a package that only an optional extra installs."""


def require(module: str, *, extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` can be imported.

    ``find_spec`` looks the module up without importing it, so the check costs nothing when
    the package is there and the real import happens where it is used.
    """
    try:
        found = find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtra(
            f"{feature} needs {module}, which is not installed: pip install 'jupyter-vgpu[{extra}]'.",
            name=module,
        )
