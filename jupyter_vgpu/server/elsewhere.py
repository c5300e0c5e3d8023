"""This server's kernels that run elsewhere, as the REST API shows them (docs/rest.md, "Kernels
that run elsewhere"): one shape for every launcher, built from the launchers' own rows
(:class:`~jupyter_vgpu.launch.elsewhere.Elsewhere`) and words. Nothing here names a launcher: the
launchers this server made are asked (:func:`~jupyter_vgpu.launch.launchers.made`), and those its
kernelspecs name."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import VGPUError
from ..launch.elsewhere import Elsewhere
from ..launch.launchers import DEFAULT, launcher_named, made
from ..slices.records import notebook_path
from ..slices.usage import use_state
from .kernelinfo import KernelInfo

if TYPE_CHECKING:
    from .watchdog import Watchdog


def _holder(row: Elsewhere, kernels: Mapping[str, KernelInfo]) -> dict[str, Any]:
    kernel = kernels.get(row.kernel_id)
    labels = row.labels
    return {
        "kernel_id": row.kernel_id,
        "kernel_name": labels.get("kernel_name") or (kernel.name if kernel else None),
        "kernel_display_name": labels.get("kernel_display_name"),
        "path": notebook_path(kernel.path if kernel else None) or labels.get("path"),
        "command": None,
        "running_here": kernel is not None,
        "yours": True,  # a launcher lists this user's kernels only
    }


def _request(row: Elsewhere) -> dict[str, Any]:
    return {"fraction": row.fraction, "memory": None, "gpus": max(1, len(row.gpu_indices)), "gpu": None}


def _common(row: Elsewhere) -> dict[str, Any]:
    """What every row of a kernel elsewhere has: the launcher's own fields at the top level (as
    REST has always had them), then its place and words."""
    return {
        **row.fields,
        "id": row.id,
        "holder_kind": "kernel",
        "gpus": list(row.gpus),
        "gpu_indices": list(row.gpu_indices),
        "fraction": row.fraction,
        "request_text": row.request_text,
        "labels": dict(row.labels),
        "created": row.created,
        "elsewhere": row.to_dict(),
    }


def elsewhere_view(row: Elsewhere, watchdog: Watchdog, kernels: Mapping[str, KernelInfo]) -> dict[str, Any]:
    """A running (or ending) kernel elsewhere as a ``SLICE``: its use as the kernel reports it, its
    reservation its budget once the kernel has said it; its GPUs are its node's, not this host's."""
    reserved = row.memory_reserved
    total = reserved * max(1, len(row.gpu_indices)) if reserved is not None else None
    return {
        **_common(row),
        **_holder(row, kernels),
        "owner": None,
        "pid": None,
        "request": _request(row),
        "memory_used": row.memory_used,
        "memory_reserved": reserved,
        "memory_reserved_total": total,
        "state": use_state(row.memory_used, total),
        "memory_reserved_by_gpu": {},
        "memory_limit": None,
        "memory_burst_limit": None,
        "context_allowance": None,
        "logical_devices": 1,
        "tier": row.tier,
        "tier_kind": "cooperative",
        "share_note": row.note,
        "frameworks": dict(row.frameworks),
        "visible_devices": [],
        "mig_devices": [],
        "mig_profiles": [],
        "memory_used_by_gpu": None,
        "utilization": None,
        "watched": False,
        "memory_peak": None,
        "usage_note": row.usage_note,
        "idle_seconds": None,
        "idle_notice": None,
        "memory_burst": None,
        "burst_notice": None,
        "history": [],
        "watchdog": {"action": watchdog.action, "events": []},
    }


def elsewhere_waiting_view(row: Elsewhere, kernels: Mapping[str, KernelInfo]) -> dict[str, Any]:
    """A kernel waiting in its engine's line as a ``WAITING``: its place is the engine's."""
    created = row.created or time.time()
    return {
        **_common(row),
        "ticket": row.id,
        "position": row.place,
        "owner": None,
        "holder": row.kernel_id,
        "pid": None,
        "request": _request(row),
        "created": created,
        "waiting_seconds": max(0.0, time.time() - created),
        "burst_due": None,  # its engine's line: no burst of this server's is given back for it
        **_holder(row, kernels),
    }


def launchers_view(rows: Iterable[Elsewhere], kernelspecs: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """The reply's ``launchers``: those of this server's kernelspecs (``kernelspecs``: launcher ->
    display names) and rows, other than ``local``, with their words."""
    names = [*kernelspecs, *(r.launcher for r in rows)]
    seen: list[dict[str, Any]] = []
    for name in dict.fromkeys(n for n in names if n and n != DEFAULT):
        try:
            launcher = launcher_named(name)
        except VGPUError:
            continue  # a kernelspec naming no launcher here: its start says so
        seen.append({"name": name, "title": launcher.title, "runs": launcher.runs, "kernelspecs": kernelspecs.get(name, [])})
    return seen


def kernelspec_launchers(specs: Mapping[str, Any]) -> dict[str, list[str]]:
    """The display names of the kernelspecs (``get_all_specs()``) by the launcher each names."""
    found: dict[str, list[str]] = {}
    for name, entry in specs.items():
        launcher = launcher_of_spec(entry)
        if isinstance(launcher, str) and launcher != DEFAULT:
            spec = entry.get("spec") or {}
            found.setdefault(launcher, []).append(str(spec.get("display_name") or name))
    return found


def launcher_of_spec(entry: Any) -> Any:
    """The ``launcher`` a kernelspec's provisioner config names (None: the default)."""
    found: Any = entry
    for key in ("spec", "metadata", "kernel_provisioner", "config"):  # any of them may be what a careless admin wrote
        found = found.get(key) if isinstance(found, dict) else None
    return found.get("launcher") if isinstance(found, dict) else None


async def leave_line(row_id: str, env: Mapping[str, str]) -> bool | None:
    """Take a kernel of this server out of its engine's line, by its row id (the launchers this
    server made are asked; None: the id is none of theirs)."""
    for launcher in made():
        answer = await launcher.leave_line(row_id, env)
        if answer is not None:
            return answer
    return None


def clean_up(specs: Mapping[str, Any], env: Mapping[str, str], log: Any) -> None:
    """When the server starts: each launcher its kernelspecs name ends what kernels of servers that
    have gone left behind (an engine's job nobody owns). Blocking: call it off the event loop."""
    for name in kernelspec_launchers(specs):
        try:
            done = launcher_named(name).clean_up(env)
        except VGPUError as error:
            log.warning("jupyter-vgpu: launcher %s could not clean up after servers that have gone: %s", name, error)
            continue
        for sentence in done:
            log.info("jupyter-vgpu: %s.", sentence)
