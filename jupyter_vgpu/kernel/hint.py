"""``%vgpu`` in every IPython kernel of the environment, at the cost of one small module.

The wheel ships ``etc/ipython/ipython_kernel_config.json``, which names this module in
``InteractiveShellApp.extra_extensions``, so IPython loads it in each kernel it starts from
this environment. It registers only the ``%vgpu`` line magic; the first ``%vgpu`` loads the
real extension (``jupyter_vgpu``) and runs the real command, which in a kernel without a
slice shows the machine's GPUs and how to get a slice.

A kernel started by the provisioner passes ``--ext=jupyter_vgpu``, which sets the same trait
on the command line and so replaces this module with the real extension.

Imports nothing but the standard library: most kernels never type ``%vgpu``.
"""

from __future__ import annotations

from typing import Any

#: The extension the first ``%vgpu`` loads.
EXTENSION = "jupyter_vgpu"


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%vgpu`` unless the real extension already did."""
    if EXTENSION in getattr(ipython.extension_manager, "loaded", ()):
        return

    def vgpu(line: str = "") -> Any:
        """Show this kernel's GPU slice; `%vgpu help` lists the commands (loads jupyter-vgpu first)."""
        return run_real_magic(ipython, line, placeholder=vgpu)

    ipython.register_magic_function(vgpu, "line", "vgpu")


def run_real_magic(ipython: Any, line: str, *, placeholder: Any) -> Any:
    """Load the real extension, make sure its ``%vgpu`` replaced ``placeholder``, and run it."""
    ipython.extension_manager.load_extension(EXTENSION)
    if _line_magic(ipython) is placeholder:
        # The extension was loaded before this hint registered over its magic: register it again.
        from .magics import VGPUMagics

        ipython.register_magics(VGPUMagics)
    return ipython.run_line_magic("vgpu", line)


def _line_magic(ipython: Any) -> Any:
    return ipython.magics_manager.magics["line"].get("vgpu")


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the placeholder ``%vgpu`` (the real one, if loaded, stays)."""
    magic = _line_magic(ipython)
    if getattr(magic, "__name__", "") == "vgpu" and getattr(magic, "__module__", "") == __name__:
        ipython.magics_manager.magics["line"].pop("vgpu", None)
