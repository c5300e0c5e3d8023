"""What ``%vgpu``, ``%vgpu devices`` and ``%vgpu help`` show, built as :class:`Sheet` objects."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..enforcement import Tier, by_tier
from ..frameworks import FRAMEWORKS, framework_memory, imported
from ..frameworks.records import APPLIED, PENDING, RECORDED
from ..launch.elsewhere import Whereabouts
from ..slices import terms
from ..units import describe_fraction, format_bytes, format_duration
from .sheet import Sheet
from .state import KernelState
from .usage import Usage, hub_info

if TYPE_CHECKING:
    from ..gpus import GPU

HOW_TO_GET_A_SLICE = (
    'To get one, pick a kernel such as "Python 3 (1/4 GPU)" in the launcher or the kernel picker '
    "(`jupyter vgpu kernelspec install` adds them), or run a script in a slice with "
    "`jupyter vgpu run -p 0.25 -- python train.py`."
)

def how_to_grow(state: KernelState) -> list[str]:
    """Ways to a bigger slice, with a share twice the current one as the example."""
    bigger = min(1.0, 2 * (state.facts.fraction or 0.25))
    share = "1" if bigger >= 1 else describe_fraction(bigger)
    picker = "Python 3 (1 GPU)" if bigger >= 1 else f"Python 3 ({share} GPU)"
    return [
        f"`%vgpu resize {share}` (before any framework uses the GPU; after a kernel restart otherwise)",
        f'a bigger kernel in the kernel picker, e.g. "{picker}"',
        "`jupyter vgpu status` in a terminal shows what is free on each GPU",
    ]


def title(state: KernelState) -> str:
    facts = state.facts
    if facts.sliced:
        return f"jupyter-vgpu · slice {facts.slice_id}"
    if facts.no_gpu_reason:
        return "jupyter-vgpu · CPU only"
    return "jupyter-vgpu · no slice"


def badge(usage: Usage, state: KernelState) -> str:
    if usage.simulated or state.facts.simulate:
        return "simulated GPUs"
    return ""


def share_text(state: KernelState) -> str:
    """``1/4 GPU``, ``2 x 1/2 GPU``; what a kernel that runs elsewhere asked of its engine, whose
    whole share its slice is."""
    import os

    from ..launch.elsewhere import Whereabouts

    if (where := Whereabouts.from_env(os.environ)) is not None and where.share:
        return where.share
    facts = state.facts
    if facts.fraction is None:
        return "n/a"
    share = "1 GPU" if facts.fraction >= 1 else f"{describe_fraction(facts.fraction)} GPU"
    share = f"{len(facts.gpus)} x {share}" if len(facts.gpus) > 1 else share
    if facts.burst_limit is not None and (limit := os.environ.get("JUPYTER_VGPU_BURST_SHARE")):
        share += f", up to {limit}"  # an elastic slice: the request, and the limit as it was asked
    return share


def elastic_rows(state: KernelState) -> list[tuple[str, str]]:
    """An elastic slice's size as it was asked (issue 49: ``%vgpu`` called the request a limit):
    the request, guaranteed; the limit it may grow to; what its frameworks get of that. Each in
    the unit it was asked in ("1.0 GiB" or "1/4 GPU"), with its memory per GPU beside a share."""
    facts = state.facts
    allowance = facts.context_allowance or 0
    asked = os.environ.get("JUPYTER_VGPU_BURST_SHARE") or ""  # the limit as asked: "1/2", "50%", "1 GPU", "8.0 GiB"
    times = f"{len(facts.gpus)} x " if len(facts.gpus) > 1 else ""
    reserved, grows_to = format_bytes(facts.memory_reserved), format_bytes((facts.burst_limit or 0) + allowance)
    if asked.endswith("B") or facts.fraction is None:  # a size: the request was a size too
        request = f"{times}{reserved} (guaranteed)"
        limit = f"{times}{asked or grows_to} (may grow to)"
    else:
        share = "1 GPU" if facts.fraction >= 1 else f"{describe_fraction(facts.fraction)} GPU"
        whole = asked if asked.endswith("GPU") else f"{asked} of a GPU" if asked.endswith("%") else f"{asked} GPU"
        request = f"{times}{share} ({reserved} per GPU, guaranteed)"
        limit = f"{times}{whole} ({grows_to} per GPU, may grow to)"
    frameworks = (
        f"{format_bytes(facts.memory_limit)} per GPU guaranteed, growing on demand to {format_bytes(facts.burst_limit)} "
        "(the request and the limit less the context allowance)"
    )
    return [("request", request), ("limit", limit), ("frameworks get", frameworks)]


def gpu_line(gpu: GPU, usage: Usage, *, mine: bool = False) -> str:
    parts = [gpu.name, f"{format_bytes(gpu.memory_total)} total", f"{format_bytes(gpu.memory_used)} used"]
    held = usage.occupancy.gpu(gpu.uuid) if usage.occupancy is not None else None
    if held is not None:
        parts += [f"{format_bytes(held.reserved)} reserved", f"free {format_bytes(held.free)}"]
    if gpu.utilization is not None:
        parts.append(f"util {gpu.utilization}%")
    if share := gpu.share or gpu.pod_share:
        parts.append(share)
    mark = "  ← this slice" if mine else ""
    return " · ".join(parts) + f" · {gpu.uuid}{mark}"


def slice_rows(state: KernelState, usage: Usage) -> list[tuple[str, str]]:
    """The slice's size in rows (shared with the out-of-memory explanation)."""
    facts = state.facts
    rows = []
    gpus = {gpu.uuid: gpu for gpu in usage.gpus}
    for ident in facts.gpus:
        gpu = gpus.get(ident) or next((g for g in usage.gpus if str(g.index) == ident), None)
        rows.append(("GPU", f"{gpu.index} · {gpu.name} · {gpu.uuid}" if gpu else ident))
    if facts.devices and facts.devices != facts.gpus:
        rows.append(("MIG device", ", ".join(facts.devices)))
    where = Whereabouts.from_env(os.environ)
    elastic = elastic_rows(state) if facts.burst_limit is not None and where is None else None
    rows.append(("share", share_text(state)) if elastic is None else elastic[0])
    if where is not None:  # its launcher runs it elsewhere
        rows.append((where.label, where.where))
        if where.ended:
            rows.append(("previous job", where.ended))
    if elastic is not None:
        rows += elastic[1:]
    else:
        rows.append(("reserved", f"{format_bytes(facts.memory_reserved)} per GPU (context allowance included)"))
        if facts.burst_limit is not None:
            rows.append(("limit", f"{format_bytes(facts.burst_limit)} per GPU for frameworks, grown into on demand"))
        else:
            rows.append(("limit", f"{format_bytes(facts.memory_limit)} per GPU for frameworks"))
    rows.append(("context allowance", f"{format_bytes(facts.context_allowance)} per GPU for the CUDA context"))
    if facts.logical_devices > 1:
        rows.append(("logical devices", f"{facts.logical_devices} TensorFlow devices per GPU"))
    if guarded := os.environ.get("JUPYTER_VGPU_GUARDED"):  # frameworks.base.GUARDED
        rows.append(("allocator guard", f"unset {guarded.replace(',', ', ')}: with it a framework's limit is no cap"))
    return rows


def used_how(usage: Usage) -> str:
    """Where the kernel's "used" figure comes from, in the words every ``%vgpu`` view uses."""
    if usage.source == "reported":  # slices.usage.REPORTED, without importing it at extension load
        return "reported by this kernel's frameworks: NVML's pids do not match it"
    if usage.simulated:
        return "simulated: what its frameworks hold in the host's memory, or the simulation file's figure"
    return "NVML, this kernel's processes"


def use_rows(state: KernelState, usage: Usage) -> list[tuple[str, str]]:
    facts = state.facts
    rows = []
    if usage.available:
        used = usage.total_used
        whole = (facts.memory_reserved or 0) * max(1, len(usage.mine))
        share = f" of {format_bytes(whole)}, {used / whole:.0%}" if whole and used is not None else ""
        if facts.burst_limit is not None and whole:  # elastic: read against the limit, the request guaranteed
            reach = (facts.burst_limit + (facts.context_allowance or 0)) * max(1, len(usage.mine))
            share = f" of up to {format_bytes(reach)} ({format_bytes(whole)} guaranteed)"
        rows.append(("used now", f"{format_bytes(used)}{share} ({used_how(usage)})"))
        if facts.burst_limit is not None and whole and used is not None and used > whole:
            rows.append((
                "burst",
                f"{format_bytes(used - whole)} above the request: this kernel's while nobody needs it; when a request "
                "waits for it the server gives notice, then restarts the kernel (the admin's burst_reclaim_action; "
                "on a hub, the policy's terms are below)",
            ))  # fmt: skip
    else:
        rows.append(("used now", f"not available: {usage.message or 'NVML cannot be read'}"))
    rows.append(("peak", format_bytes(state.peak_used) if state.peak_used is not None else "n/a"))
    now, most = framework_memory(state)
    if now is not None:
        rows.append(("frameworks hold", f"{format_bytes(now)} (peak {format_bytes(most)})"))
    util = usage.top_utilization
    rows.append(("utilisation", f"{util}%" if util is not None else "n/a"))
    idle = _idle_before(state)
    if idle is not None:
        rows.append(("idle", f"{format_duration(idle)} before this cell (no cell ran, no GPU use), as the server counts it"))
    return rows


def _idle_before(state: KernelState) -> float | None:
    """How long the slice had been idle when this cell started, from the server's idle reclaim
    (None: no server judges it, or under a few seconds)."""
    from ..slices.reports import read_idle

    facts = state.facts
    if not (facts.ledger_path and facts.slice_id):
        return None
    idle = read_idle(facts.ledger_path, facts.slice_id)
    return idle if idle is not None and idle >= 5 else None


def tier_name(state: KernelState) -> str:
    """The tier as recorded with the slice, in the words every view uses: ``cooperative``,
    ``hard (MPS)`` or ``hard (MIG 1g.10gb)``."""
    facts = state.facts
    tier = facts.tier or Tier.COOPERATIVE
    if problem := (plugin := by_tier(tier)).not_held(os.environ):
        return plugin.not_held_text(problem, facts.mig_profiles)
    return tier.describe(facts.mig_profiles)


def shares_text(state: KernelState) -> str:
    """What the slice reserves: memory only, memory and a share of the SMs, or a whole MIG device."""
    tier = state.facts.tier or Tier.COOPERATIVE
    return by_tier(tier).share_note(state.facts.fraction, _thread_percentage())


def _thread_percentage() -> int | None:
    try:
        return int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""))
    except ValueError:
        return None


def framework_limits_text(state: KernelState) -> str:
    """The frameworks whose limit is set (or waits for CUDA), or when they will be."""
    limited = [f"{r.title} ({r.status})" for r in state.records.values() if r.status in (APPLIED, PENDING, RECORDED)]
    if limited:
        return f"{', '.join(limited)}; user code can undo them"
    if state.records:  # imported, and nothing to limit (a CPU build, simulated GPUs): say so, not "none yet"
        return "none: " + "; ".join(f"{r.title} {r.status}, {r.detail}" for r in state.records.values())
    titles = [f.title for f in FRAMEWORKS]
    return f"none yet: set when {', '.join(titles[:-1])} or {titles[-1]} is imported"


def hard_tier_text(state: KernelState) -> str | None:
    """How the hardware keeps this kernel inside (MIG device or MPS), or None when nothing does."""
    facts = state.facts
    cap = facts.memory_reserved if facts.burst_limit is None else facts.burst_limit + (facts.context_allowance or 0)
    return by_tier(facts.tier or Tier.COOPERATIVE).inside(facts.devices, cap, os.environ)  # an elastic slice's cap: its limit


WATCHED = "the Jupyter server compares NVML use with the slice when its extension runs"


def enforcement_rows(state: KernelState) -> list[tuple[str, str]]:
    """The tier, what the slice reserves, the framework limits, and the server's watch."""
    rows = [("tier", tier_name(state))]
    hard = hard_tier_text(state)
    if hard:
        rows.append(("", hard))
    rows.append(("shares", shares_text(state)))
    rows.append(("framework limits", framework_limits_text(state)))
    rows.append(("watched", WATCHED))
    return rows


def framework_rows(state: KernelState) -> list[tuple[str, str]]:
    rows = []
    for framework in FRAMEWORKS:
        record = state.records.get(framework.name)
        if record is None:
            rows.append((framework.title, "not imported"))
        else:
            rows.append((framework.title, f"{record.status}: {record.detail}"))
    return rows


def would_give_rows(state: KernelState) -> list[tuple[str, str]]:
    """What each framework gets from this slice on a real GPU: on simulated GPUs the frameworks
    see none and skip it, and this is what the demo can show of the headline."""
    facts = state.facts
    limit = facts.framework_limit or 0  # an elastic slice's frameworks get its burst limit
    fraction = os.environ.get("JUPYTER_VGPU_BURST_FRACTION") or os.environ.get("JUPYTER_VGPU_MEMORY_FRACTION", "")
    rows = []
    for framework in FRAMEWORKS:
        words = framework.would_give(limit, fraction, facts.logical_devices)
        if words:
            rows.append((framework.title, words))
    return rows


def process_rows(state: KernelState) -> list[tuple[str, str]]:
    """The slice's other processes that configured a framework (``!python train.py``, workers,
    commands): each is fitted to this same slice at its import (see :mod:`.startup`)."""
    from ..slices.reports import configured_processes, frameworks_text

    facts = state.facts
    if not facts.slice_id or not facts.ledger_path:
        return []
    rows = []
    for process in configured_processes(facts.ledger_path, facts.slice_id):
        if process["pid"] == os.getpid():
            continue
        rows.append((f"pid {process['pid']}", f"{process['command'] or 'a process'}: {frameworks_text(process['frameworks'])}"))
    return rows


def status_sheet(state: KernelState, usage: Usage) -> Sheet:
    """``%vgpu``: the slice, its use, the enforcement tier and each framework."""
    facts = state.facts
    sheet = Sheet(title(state), badge=badge(usage, state))
    if state.problem:
        sheet.intro.append(f"The slice settings cannot be read: {state.problem}")
    if facts.sliced:
        sheet.section("Slice").rows.extend(slice_rows(state, usage))
        sheet.section("Use").rows.extend(use_rows(state, usage))
        sheet.section("Enforcement").rows.extend(enforcement_rows(state))
    else:
        if (where := Whereabouts.from_env(os.environ)) is not None and where.unfenced:
            sheet.intro.append(f"Unfenced: {where.unfenced}")
        elif facts.no_gpu_reason:
            sheet.intro.append(f"This kernel runs without a GPU: {facts.no_gpu_reason}")
        else:
            sheet.intro.append("This kernel has no GPU slice, so nothing keeps its frameworks to a share of a GPU.")
        if held := reserved_by_others(usage):
            sheet.intro.append(
                f"{held}: this kernel's frameworks are not kept out of that memory, so what they take "
                "can make those run out of it."
            )
        sheet.intro.append(HOW_TO_GET_A_SLICE)
        machine = sheet.section("GPUs on this machine")
        if usage.available:
            for gpu in usage.gpus:
                machine.add(f"GPU {gpu.index}", gpu_line(gpu, usage))
        else:
            machine.add("none", usage.message or "NVML reports no GPU")
        if facts.logical_devices > 1:
            machine.add("logical devices", f"TensorFlow splits the CPU into {facts.logical_devices} devices")
    sheet.section("Frameworks").rows.extend(framework_rows(state))
    if rows := terms.policy_rows(info := hub_info()):  # a hub node: the limits this user holds slices on
        sheet.section(terms.policy_heading(info)).rows.extend(rows)
    if facts.sliced and (usage.simulated or facts.simulate):
        sheet.section("On a real GPU, this slice gives (simulated here)").rows.extend(would_give_rows(state))
    if others := process_rows(state):
        sheet.section("Other processes of this slice").rows.extend(others)
    sheet.notes.append("`%vgpu help` lists the other commands.")
    return sheet


def reserved_by_others(usage: Usage) -> str:
    """``Other kernels and commands hold 2 slices: 12.0 GiB of GPU 0, 4.0 GiB of GPU 1``, or ""
    when nothing is reserved (or the ledger could not be read)."""
    if usage.occupancy is None:
        return ""
    held = [gpu for gpu in usage.occupancy.gpus if gpu.reserved]
    count = len({share.slice.id for gpu in held for share in gpu.shares})
    if not count:
        return ""
    where = ", ".join(f"{format_bytes(gpu.reserved)} of GPU {gpu.index}" for gpu in held)
    return f"Other kernels and commands hold {count} GPU slice{'s' if count > 1 else ''}: {where}"


def devices_sheet(state: KernelState, usage: Usage) -> Sheet:
    """``%vgpu devices``: the physical GPUs next to the devices each imported framework sees."""
    sheet = Sheet(f"{title(state)} · devices", badge=badge(usage, state))
    physical = sheet.section("Physical GPUs (simulated)" if usage.simulated else "Physical GPUs (NVML)")
    if usage.available:
        mine = {gpu.uuid for gpu in usage.mine} if state.facts.sliced else set()
        for gpu in usage.gpus:
            physical.add(f"GPU {gpu.index}", gpu_line(gpu, usage, mine=gpu.uuid in mine))
    else:
        physical.add("none", usage.message or "NVML reports no GPU")
    if state.facts.sliced:
        physical.add("visible here", f"CUDA_VISIBLE_DEVICES={','.join(state.facts.devices or state.facts.gpus)}")
    missing = []
    found = {framework.name: module for framework, module in imported(state)}
    for framework in FRAMEWORKS:
        module = found.get(framework.name)
        if module is None:
            missing.append(framework.title)
            continue
        section = sheet.section(f"{framework.title} sees")
        try:
            lines = framework.devices(module) or ["no device"]
        except Exception as error:
            lines = [f"not available: {error}"]
        for number, line in enumerate(lines):
            section.add(str(number), line)
    if missing:
        sheet.notes.append(f"Not imported: {', '.join(missing)}.")
    return sheet


HELP = (
    ("%vgpu", "this kernel's slice: GPUs, share, limit, use, enforcement, frameworks"),
    ("%vgpu devices", "the devices each imported framework sees, next to the physical GPUs"),
    ("%vgpu monitor", "a live chart of this kernel's GPU memory and utilisation (each second, for 10 minutes)"),
    ("%vgpu monitor --minutes M --interval S", "the same, for M minutes, every S seconds"),
    ("%vgpu monitor stop", "stop every live view of this kernel"),
    ("%vgpu resize 0.5 | 1/2 | 6GiB", "change the slice before a framework has taken GPU memory (frameworks already imported get the new size)"),
    ("%vgpu resize 1/4 --limit 1/2", "an elastic slice: 1/4 booked, frameworks may grow to 1/2 (--limit none: fixed again)"),
    ("%vgpu help", "this list"),
)


def help_sheet() -> Sheet:
    sheet = Sheet("jupyter-vgpu · %vgpu commands")
    commands = sheet.section("Commands")
    for command, meaning in HELP:
        commands.add(command, meaning)
    sheet.notes.append(
        "The live view updates while the kernel is idle or awaiting; during a long blocking cell the "
        "JupyterLab GPU sidebar keeps updating. `jupyter vgpu status` shows every slice on the machine."
    )
    return sheet
