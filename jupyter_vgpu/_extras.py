"""Optional dependencies: a feature that needs an extra says so in one sentence, never a traceback."""

from __future__ import annotations

import re
import shlex
from importlib.util import find_spec

from .errors import VGPUError


class MissingExtra(VGPUError, ImportError):
    """A feature needs a package that only an optional extra installs."""


def extra_requirements(extra: str) -> list[str]:
    """What the installed jupyter-vgpu's ``extra`` asks for (``["jupyterhub>=5", ...]``), from its
    metadata; [] where there is none (a source tree on ``PYTHONPATH``)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        listed = requires("jupyter-vgpu") or []
    except PackageNotFoundError:
        return []
    found = []
    for line in listed:
        requirement, _, marker = line.partition(";")
        if re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", marker):
            # keep the requirement's own environment markers out: pip is told the bare need
            found.append(requirement.strip().replace(" ", ""))
    return found


def install_command(module: str, extra: str) -> str:
    """``pip install 'jupyterhub>=5' 'jupyterhub-kubespawner>=7'``: installs the extra's packages
    whichever way jupyter-vgpu itself was installed (from a checkout, a wheel or the index)."""
    needed = extra_requirements(extra) or [module]
    return "pip install " + " ".join(shlex.quote(item) for item in needed)


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
            f"{feature} needs {module}, which is not installed: {install_command(module, extra)} "
            f"(jupyter-vgpu's [{extra}] extra).",
            name=module,
        )
