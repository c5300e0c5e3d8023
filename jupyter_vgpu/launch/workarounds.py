"""jupyter_client workarounds the provisioner needs: a failed start that would block the server's
shutdown, and a kernelspec config that would end a start in a TypeError."""

from __future__ import annotations

import asyncio
from typing import Any

from jupyter_client.provisioning.factory import KernelProvisionerFactory

from ..units import shorten
from .errors import InvalidKernelConfig

PROVISIONER_NAME = "vgpu-provisioner"
#: A kernel's notebook as a gateway client (a CPU-only JupyterLab) names it on its own machine: set
#: by a GPU node's kernel start handler, read by the provisioner for the slice's labels.
CLIENT_NOTEBOOK = "JUPYTER_VGPU_CLIENT_NOTEBOOK"


def names_vgpu_provisioner(metadata: Any) -> bool:
    """Whether a kernelspec's metadata starts its kernels with a slice (the vgpu-provisioner)."""
    stanza = metadata.get("kernel_provisioner") if isinstance(metadata, dict) else None
    return isinstance(stanza, dict) and stanza.get("provisioner_name") == PROVISIONER_NAME


async def forget_failed_starts(manager: Any, log: Any = None) -> list[str]:
    """Drop the kernel starts that failed, and cancel those still waiting, from ``manager``'s
    pending kernels; returns their ids.

    jupyter_client's MultiKernelManager keeps a failed start among its pending kernels for ever
    (``_add_kernel_when_ready`` removes an entry only on success), and jupyter_server's
    ``shutdown_all`` then asks to shut that kernel down, which fails with "Kernel does not exist"
    and leaves the server unable to stop. Refused starts are routine here (a full GPU, a quota,
    a wait that timed out), so the server extension calls this before the server's kernel
    cleanup. Upstream fix: remove the entry in a ``finally`` of ``_add_kernel_when_ready``.
    """
    pending = getattr(manager, "_pending_kernels", None)
    running = getattr(manager, "_kernels", None)
    if not isinstance(pending, dict) or not isinstance(running, dict):
        return []
    stale = [(kid, task) for kid, task in list(pending.items()) if kid not in running]
    for kernel_id, task in stale:
        if isinstance(task, asyncio.Future) and not task.done():
            task.cancel()  # a start still waiting in line: it leaves the line as it ends
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=5)
            except BaseException:  # cancelled, failed or slow: it goes either way
                pass
        if pending.get(kernel_id) is task:
            del pending[kernel_id]
        if log is not None:
            log.info("jupyter-vgpu: forgot kernel %s, whose start did not succeed.", kernel_id)
    return [kid for kid, _ in stale]


def forget_when_done(manager: Any, kernel_id: str) -> None:
    """Once the failed start of ``kernel_id`` has finished, drop it from the manager's pending
    kernels (see :func:`forget_failed_starts`) so it neither leaks nor blocks shutdown."""
    pending = getattr(manager, "_pending_kernels", None)
    if not isinstance(pending, dict):
        return
    task = pending.get(kernel_id)
    if not isinstance(task, asyncio.Future):
        return

    def forget(done: asyncio.Future[Any]) -> None:
        running = getattr(manager, "_kernels", {})
        if pending.get(kernel_id) is done and kernel_id not in running:
            del pending[kernel_id]

    task.add_done_callback(forget)


class CheckedProvisionerFactory(KernelProvisionerFactory):  # type: ignore[misc]
    """jupyter_client's provisioner factory, which first checks that a vgpu-provisioner stanza's
    ``config`` is a mapping: the factory passes it as ``**config``, and anything else would end
    the kernel start in a TypeError ("Unhandled error") instead of a sentence."""

    def create_provisioner_instance(self, kernel_id: str, kernel_spec: Any, parent: Any) -> Any:
        metadata: Any = getattr(kernel_spec, "metadata", None)
        if names_vgpu_provisioner(metadata):
            config = metadata["kernel_provisioner"].get("config", {})
            if not isinstance(config, dict):
                name = getattr(kernel_spec, "display_name", "") or "kernel"
                raise InvalidKernelConfig(
                    f"Kernel '{name}': kernel_provisioner config must be a mapping of settings such as "
                    f'{{"gpu_fraction": 0.25}}, not {shorten(config)}.'
                )
        return super().create_provisioner_instance(kernel_id, kernel_spec, parent)


def check_provisioner_configs() -> None:
    """Make the process's provisioner factory a :class:`CheckedProvisionerFactory` (the server
    extension calls this once; traitlets' singleton makes every kernel manager use it)."""
    current = KernelProvisionerFactory._instance
    if isinstance(current, CheckedProvisionerFactory):
        return
    parent = getattr(current, "parent", None)
    KernelProvisionerFactory.clear_instance()
    CheckedProvisionerFactory.clear_instance()  # one left from an earlier server of this process
    CheckedProvisionerFactory.instance(parent=parent)
