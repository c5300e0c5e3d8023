"""jupyter-vgpu: fractions of a GPU for Jupyter kernels.

Importing this package is cheap: the kernel extension, the server extension and the
labextension paths each import their own layer only when Jupyter asks for it.
"""

from __future__ import annotations

from ._version import __version__

TYPE_CHECKING = False  # typing itself is not imported: a sliced process's start-up hook imports this package
if TYPE_CHECKING:
    from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_vgpu`` (and ``--ext=jupyter_vgpu`` in provisioned kernels)."""
    from .kernel import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .kernel import unload_ipython_extension as unload

    unload(ipython)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    # Naming the ExtensionApp lets jupyter_server call its start and stop hooks.
    from .server.extension import VGPUServer

    return [{"module": "jupyter_vgpu.server.extension", "app": VGPUServer}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-vgpu"}]


__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]
