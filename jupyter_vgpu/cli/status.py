"""``jupyter vgpu status``: an nvidia-smi-like view of GPUs, slices, the line and your limits."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import textwrap
from typing import Any

from ..config import load_settings, shared_simulation
from ..enforcement import TIERS, Tier, by_tier
from ..errors import InvalidConfig
from ..launch.launchers import every, report_folder
from ..ledger import Ledger, SQLiteLedger, open_ledger
from ..slices import occupancy_of, terms
from ..slices.holders import attribute
from ..slices.reports import configured_processes, frameworks_text, read_idle
from ..slices.usage import REPORTED, ReportCache, slice_usage
from ..units import format_bytes, format_duration

BAR_WIDTH = 40
_KEEP = "\u00a0"  # a space the box never breaks a line at
_AMOUNT = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|PiB)\b")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("status", help="show GPUs, slices and who waits in line")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--cluster", action="store_true",
        help="every node's GPUs and line, and your slices on every node, from the site's Prometheus (docs/cluster.md)",
    )  # fmt: skip
    parser.add_argument(
        "--prometheus", metavar="URL", default=None,
        help="the site's Prometheus, for --cluster (default: $JUPYTER_VGPU_PROMETHEUS, else the hub policy's prometheus_url)",
    )  # fmt: skip
    parser.set_defaults(handler=status)


def collect(ledger: Ledger) -> dict[str, Any]:
    """Everything ``status`` shows, as JSON-ready data (the vocabulary of docs/rest.md)."""
    snapshot = ledger.inventory.snapshot()
    slices = ledger.slices()
    waiting = ledger.waiting()
    read_only = isinstance(ledger, SQLiteLedger) and ledger.file.read_only
    attribution = attribute(snapshot, {s.id: s.pid for s in slices})
    gpus = occupancy_of(snapshot, slices, attribution)
    reports = ReportCache(ledger.path, report_folder)
    slice_rows = []
    for s in slices:
        row = s.to_dict()
        usage = slice_usage(s, s.pid, attribution, snapshot, None if s.hidden else reports.get(s))
        row["memory_used"] = usage.memory_used  # the server's figure: measured, else what the kernel reports
        row["memory_burst"] = usage.memory_burst  # an elastic slice's use above its request (REST's field)
        row["memory_used_by_gpu"] = dict(usage.used_by_gpu) if snapshot.available else None
        row["usage_source"] = usage.source
        row["tier"] = usage.tier_text  # what holds it, where its holder says its tier did not take
        row["holder_text"] = s.describe_holder()
        row["configured"] = [] if s.hidden else configured_processes(ledger.path, s.id)
        row["idle_seconds"] = None if s.hidden else read_idle(ledger.path, s.id)  # as its server judges it
        slice_rows.append(row)
    return {
        "simulated": snapshot.simulated,
        "available": snapshot.available,
        "message": snapshot.message,
        "gpus_source": ledger.inventory.describe(),
        "ledger": str(ledger.path),
        "location": ledger.location() + (" (read-only here: its folder is not yours to write)" if read_only else ""),
        "read_only": read_only,
        "gpus": [g.to_dict() for g in gpus.gpus],
        "slices": slice_rows,
        "waiting": [w.to_dict() for w in waiting],
        **your_limits(getattr(ledger, "info", None)),
        **elsewhere(),
    }


def your_limits(info: Any) -> dict[str, Any]:
    """The hub policy for this user, as the node broker told it (``your_limits``: the policy's
    source, the user, each limit with its words and where it came from); {} without a broker."""
    if not isinstance(info, dict) or "limits" not in info:
        return {}
    keys = ("policy", "user", "unlimited", "limits")
    return {"your_limits": {key: info.get(key) for key in keys}}


def elsewhere() -> dict[str, Any]:
    """This user's kernels that run elsewhere, as every launcher of this installation says them
    (``elsewhere``: rows with their launcher and words; ``elsewhere_problems``: why a launcher could
    not list them, a sentence each). A launcher asks its engine only where this user has used it."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for launcher in every():
        found, problem = launcher.user_rows(os.environ)
        rows += [{**r.fields, "kernel_id": r.kernel_id, "gpu_indices": list(r.gpu_indices), "share": r.share,
                  "memory_used": r.memory_used, "summary": r.summary, "path": r.labels.get("path"), "elsewhere": r.to_dict()} for r in found]  # fmt: skip
        if problem:
            problems.append(f"{launcher.title}: {problem}")
    return {"elsewhere": rows, "elsewhere_problems": problems} if rows or problems else {}


def elsewhere_lines(data: dict[str, Any]) -> list[str]:
    """A heading per launcher (its card's title) and a line per kernel: where, GPU, share, use."""
    lines: list[str] = []
    titles = dict.fromkeys([r["elsewhere"]["title"] for r in data.get("elsewhere", [])])
    for problem in data.get("elsewhere_problems", []):
        lines += ["", problem]
    for title in titles:
        lines += ["", f"{title}:"]
        for row in (r for r in data["elsewhere"] if r["elsewhere"]["title"] == title):
            gpu = ",".join(map(str, row["gpu_indices"])) or "?"
            used = f"  used {format_bytes(row['memory_used'])}*" if row.get("memory_used") is not None else ""
            notebook = f"  notebook {row['path']}" if row.get("path") else ""
            lines.append(f"  {row['summary']}  GPU {gpu}  {row['share']}{notebook}  kernel {row['kernel_id']}{used}")
    return lines


def status(args: argparse.Namespace) -> int:
    if args.cluster:
        from .cluster import cluster_status

        return cluster_status(args.prometheus, as_json=args.json)
    if args.prometheus:
        raise InvalidConfig("--prometheus is for --cluster: the cluster view (`jupyter vgpu status --cluster --prometheus URL`).")
    settings = load_settings()
    ledger = open_ledger(settings, read_only_ok=True)  # a ledger it can only read is still shown
    data = collect(ledger)
    shared = shared_simulation(settings)
    data["simulation_set_in"] = str(shared) if shared is not None else None
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(data))
    return 0


def _bar(parts: list[tuple[int, str]], total: int, width: int = BAR_WIDTH) -> str:
    cells = ""
    for amount, char in parts:
        cells += char * int(round(width * amount / total)) if total else ""
    cells = cells[:width]
    return "[" + cells + "." * (width - len(cells)) + "]"


def render(data: dict[str, Any]) -> str:
    """The human table: a header, one block per GPU, slices, the line of waiters."""
    width = min(shutil.get_terminal_size((100, 20)).columns, 120)
    lines = []
    header = f"jupyter-vgpu · GPUs: {data['gpus_source']}"
    if data["simulated"]:
        header += "  " + "** SIMULATED GPUs, not real hardware **".replace(" ", _KEEP)  # folded whole, if at all
    lines.append(header)
    lines.append(f"slices kept by: {data['location']}")
    if data.get("simulation_set_in"):
        lines.append(
            f"simulated for every process on this ledger by {data['simulation_set_in']} "
            "(./scripts/lab writes it; delete it to use the real GPUs)"
        )
    if not data["available"]:
        lines.append("")
        lines.append(f"No GPU: {data['message']}")
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for row in data["slices"]:
        for uuid in row["gpus"]:
            by_gpu.setdefault(uuid, []).append(row)
    rule = "+" + "-" * (width - 2) + "+"
    tier_width = _tier_width(data["slices"])  # one HOLDER column for every table
    shown = {gpu["uuid"] for gpu in data["gpus"]}
    for gpu in data["gpus"]:
        total = gpu["memory_total"]
        util = f"{gpu['utilization']}%" if gpu["utilization"] is not None else "n/a"
        lines.append(rule)
        lines += _boxed(f"GPU {gpu['index']}  {gpu['name']}  {gpu['uuid']}  util {util}", width)
        bar = _bar(
            [(gpu["memory_reserved"], "#"), (gpu["memory_over_use"], "!"), (gpu["memory_foreign"], "x")], total,
            width=max(8, min(BAR_WIDTH, width - 6)),  # inside the box, however narrow
        )  # fmt: skip
        figures = [
            f"reserved {format_bytes(gpu['memory_reserved'])} / {format_bytes(total)}",
            f"used {format_bytes(gpu['memory_used'])}",
            f"free {format_bytes(gpu['memory_free'])}",
        ]
        lines += _boxed(f"{bar} " + "  ".join(f.replace(" ", _KEEP) for f in figures), width)
        if share := gpu.get("share") or gpu.get("pod_share"):
            lines += _boxed(f"  {share}: slices are fractions of it", width)
        if gpu["memory_over_use"]:
            lines += _boxed(f"  ! = {format_bytes(gpu['memory_over_use'])} used beyond reservations", width)
        if gpu.get("memory_overbooked"):
            lines += _boxed(
                f"  over-full: bursts hold {format_bytes(gpu['memory_overbooked'])} that requests booked; the youngest are asked back",
                width,
            )
        if gpu["memory_foreign"]:
            lines += _boxed(f"  x = {format_bytes(gpu['memory_foreign'])} used by processes without a slice", width)
        for line in _tier_lines(gpu):
            lines += _boxed(f"  {line}", width)
        lines.append(rule)
        rows = by_gpu.get(gpu["uuid"], [])
        if not rows:
            lines.append("  (no slices)")
            continue
        lines += _slice_table(rows, gpu["uuid"], width, tier_width)
    elsewhere = [row for row in data["slices"] if not shown.intersection(row["gpus"])]
    if elsewhere:
        lines.append("")
        lines.append(
            f"{len(elsewhere)} slice{'s' if len(elsewhere) > 1 else ''} in this ledger on GPUs this shell does not see: "
            f"the GPU source differs (here: {data['gpus_source']}). They were reserved by processes that saw other "
            "GPUs, e.g. with JUPYTER_VGPU_SIMULATE set; run `status` with the same setting to see their use."
        )
        lines += _slice_table(elsewhere, None, width, tier_width)
    if data["simulated"] and any(row.get("memory_used") for row in data["slices"]):
        lines.append("USED, on simulated GPUs: what each slice's frameworks hold in the host's memory.")
    if data["waiting"]:
        lines.append("")
        lines.append("Waiting in line:")
        for w in data["waiting"]:
            lines.append(
                f"  #{w['position']:<3} {w['owner'][:9]:<10} {w['request_text']:<14} "
                f"{w['holder_kind']} {w['holder']}  waiting {w['waiting_seconds']:.0f} s"
            )
    lines += elsewhere_lines(data)
    if limits := data.get("your_limits"):
        lines += ["", f"{terms.policy_heading(limits)}:"]
        said = terms.policy_rows(limits)
        label = max(len(name) for name, _ in said)
        lines += [f"  {name:<{label}}  {text}" for name, text in said]
    if not data["slices"] and data["available"]:
        lines.append("No slices. Start one with `jupyter vgpu run -p 0.25 -- COMMAND` or a sliced kernel.")
    return "\n".join(folded for line in lines for folded in _fold(line, width)) + "\n"


def _fold(line: str, width: int, hang: int | None = None) -> list[str]:
    """``line`` folded to ``width``, so nothing runs past the GPUs' boxes: at spaces where it can
    ("16.0 GiB" kept whole), a word longer than a line cut. Continuation lines are indented by
    ``hang`` (default: the line's own indentation and 2)."""
    if len(line) <= width:
        return [line.replace(_KEEP, " ")]
    lead = len(line) - len(line.lstrip())
    indent = " " * (lead + 2 if hang is None else hang)
    kept = _AMOUNT.sub(f"\\1{_KEEP}\\2", line)
    folded = textwrap.wrap(kept, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return [part.replace(_KEEP, " ") for part in folded]


def _boxed(text: str, width: int) -> list[str]:
    """``text`` inside the GPU's box: folded to the box's width (indentation kept), padded."""
    inner = width - 4
    indent = text[: len(text) - len(text.lstrip())]
    kept = _AMOUNT.sub(f"\\1{_KEEP}\\2", text.strip())  # "16.0 GiB" stays on one line
    folded = textwrap.wrap(kept, inner, initial_indent=indent, subsequent_indent=indent + "  ",
                           break_on_hyphens=False) or [""]  # fmt: skip
    return [f"| {line.replace(_KEEP, ' '):<{inner}} |" for line in folded]


#: The narrowest HOLDER column beside a slice's figures; a terminal with less room puts every
#: row's holder on the lines under its figures.
HOLDER_MIN_WIDTH = 24
#: Where a holder starts when it has lines of its own.
HOLDER_INDENT = 6


def _slice_table(rows: list[dict[str, Any]], uuid: str | None, width: int, tier_width: int) -> list[str]:
    """Slices under a GPU (reserved on that GPU), or slices on GPUs not shown (reserved per GPU).

    One layout for every row of a table, chosen by the terminal's width: the holder in a column
    of its own beside the figures (folded within that column); else on the lines under them;
    else, narrower still, the tier (and the context) on a line of their own between the two. ``tier_width``: the TIER column's,
    the same in every table (:func:`_tier_width`)."""
    figures = f"  {'SLICE':<13}{'OWNER':<10}{'RESERVED':>10}{'USED':>11}"
    context_below = len(figures) + 10 > width
    if not context_below:
        figures += f"{'CONTEXT':>10}"
    holder_column = len(figures) + 2 + tier_width
    beside = width - holder_column >= HOLDER_MIN_WIDTH
    tier_below = len(figures) + tier_width > width
    below = " " * HOLDER_INDENT
    if beside:
        lines = [f"{figures}  {'TIER':<{tier_width}}HOLDER"]
    elif tier_below:
        lines = [figures, f"{below}{'CONTEXT, ' if context_below else ''}TIER", f"{below}HOLDER"]
    else:
        lines = [f"{figures}  TIER", f"{below}HOLDER"]
    for row in rows:
        reserved = row["memory_reserved_by_gpu"][uuid] if uuid else row["memory_reserved"]
        where = "" if uuid else f" on GPU {', '.join(str(i) for i in row['gpu_indices'])}"
        context = format_bytes(row["context_allowance"])
        numbers = f"  {row['id']:<13}{row['owner'][:9]:<10}{format_bytes(reserved):>10}{_used(row):>11}"
        if not context_below:
            numbers += f"{context:>10}"
        holder = (
            f"{row['holder_text']} " + f"[{row['request_text']}{where}]".replace(" ", _KEEP)
            + (f" idle {format_duration(row['idle_seconds'])}" if row.get("idle_seconds") is not None else "")
            + (f" burst {format_bytes(row['memory_burst'])}".replace(" ", _KEEP, 1) if row.get("memory_burst") else "")
        )  # fmt: skip
        if beside:
            first, *rest = _fold_column(holder, width - holder_column)
            lines.append(f"{numbers}  {row['tier']:<{tier_width}}{first}".rstrip())
            lines += [" " * holder_column + part for part in rest]
        elif tier_below:
            lines.append(numbers)
            lines += _fold_column(f"{context}, {row['tier']}" if context_below else row["tier"], width, HOLDER_INDENT)
            lines += _fold_column(holder, width, HOLDER_INDENT)
        else:
            lines.append(f"{numbers}  {row['tier']}")
            lines += _fold_column(holder, width, HOLDER_INDENT)
        lines += [part for line in configured_lines(row.get("configured") or []) for part in _fold(f"{'':15}{line}", width, 17)]
    if any(row.get("usage_source") == REPORTED for row in rows):
        lines.append("  * reported by the kernel's frameworks: NVML's process ids do not match it (e.g. in a container)")
    return lines


def _tier_width(rows: list[dict[str, Any]]) -> int:
    """The TIER column's width: the longest tier's and two spaces, at least 20."""
    return max([20] + [len(row["tier"]) + 2 for row in rows])


def _fold_column(text: str, width: int, indent: int = 0) -> list[str]:
    """``text`` folded to ``width``, its lines starting at column ``indent`` (continuations 2
    further in when there is an indent): "16.0 GiB" and a bracketed request kept whole where they
    fit, a word longer than a line cut."""
    kept = _AMOUNT.sub(f"\\1{_KEEP}\\2", text)
    hang = " " * (indent + 2 if indent else 0)
    wrapper = _WordFirst(width, initial_indent=" " * indent, subsequent_indent=hang, break_on_hyphens=False)
    return [part.replace(_KEEP, " ") for part in wrapper.wrap(kept) or [""]]


class _WordFirst(textwrap.TextWrapper):
    """Starts a word longer than a line (a path) on a line of its own before cutting it, so it
    reads whole as far as it can."""

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str], cur_len: int, width: int) -> None:
        if cur_line:
            return  # the line ends here; the next one begins with the word
        super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)


def _used(row: dict[str, Any]) -> str:
    """What a slice uses, as every view says it; ``*`` marks a figure the kernel reported."""
    return format_bytes(row["memory_used"]) + ("*" if row.get("usage_source") == REPORTED else "")


def configured_lines(processes: list[dict[str, Any]]) -> list[str]:
    """One line per process of a slice that configured a framework: which, and how."""
    lines = []
    for process in processes:
        who = "the kernel" if process["kernel"] else (process["command"] or "a process")
        frameworks = frameworks_text(process["frameworks"], details=True, separator="; ")
        lines.append(f"configured in pid {process['pid']} ({who}): {frameworks}")
    return lines


def _tier_lines(gpu: dict[str, Any]) -> list[str]:
    """What enforcement this GPU offers: its MIG devices and who holds each, or MPS."""
    if gpu.get("mig_mode"):
        devices = gpu.get("mig_devices") or []
        if not devices:
            return ["MIG mode, no MIG devices: nothing can be reserved (`nvidia-smi mig -cgi PROFILE -C` creates them)"]
        lines = ["MIG mode: slices are whole MIG devices (hard limit)"]
        for d in devices:
            who = f"slice {d['slice']}" if d.get("slice") else "in use without a slice" if d.get("in_use_without_slice") else "free"
            lines.append(f"  MIG {d['profile']:<10} {format_bytes(d['memory_total']):>10}  {who}  {d['uuid']}")
        return lines
    offered = next((t for t in TIERS if t.offered() == gpu.get("tier")), by_tier(Tier.COOPERATIVE))
    if offered.tier is Tier.MPS:
        return ["MPS: an MPS daemon serves this GPU; slices get a hard memory limit and their share of the SMs"]
    return [f"Slices here reserve {offered.share_note()} (tier: {offered.describe()})"]
