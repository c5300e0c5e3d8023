"""What ``JUPYTER_VGPU_SIMULATE`` describes: simulated GPUs, their MIG devices and processes.

Two forms:

* ``"2x16GiB"``: two idle GPUs of 16 GiB each (``"16GiB"`` alone means one); ``"2x16GiB@node-a"``: the
  same on a simulated machine named ``node-a`` (see below);
* the path of a JSON file (re-read by :class:`~.simulated_nvml.SimulatedNVML` whenever it changes, so
  tests and demos can move usage live)::

    {"devices": [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40GiB", "utilization": 35}],
     "processes": [{"gpu": 0, "pid": 4242, "memory": "3GiB", "utilization": 20}]}

Per device: ``uuid``, ``name``, ``utilization``, ``used`` (memory in use that no listed process
accounts for: the driver, another container), ``reserved`` (what the driver keeps for itself, as
NVML's v2 memory query reports), ``compute_capability`` (``"9.0"``), ``memory_query``
(``"no-permission"``: the parent's memory query is refused, as in a MIG container) and
``privileged`` (in MIG mode the whole-GPU process lists answer only to privileged callers) and
``memory_partitioning`` (true: the driver offers MPS memory partitioning, as r615 does; its
limits live in the process that set them).

A GPU in MIG mode lists its MIG devices, the way ``nvidia-smi -L`` and the MIG tables show them::

    "mig": [{"profile": "3g.20gb", "memory": "19968MiB", "uuid": "MIG-...",
             "gpu_instance_id": 2, "compute_instance_id": 0}]

Ids are optional: without them each entry gets a GPU instance of its own, except compute
instances (``1c.3g.20gb``) which share one GPU instance until its compute slices are used up. Every
compute instance of a GPU instance reports that instance's whole memory, as NVML does.

A process runs on ``gpu`` (index or UUID), in a MIG device (``"mig"``: its UUID or position), may
be an MPS client (``"mps": true`` or ``"type": "M+C"``), has a ``name`` (``nvidia-cuda-mps-server``
is the MPS server) and a ``utilization_history`` of ``[seconds_ago, percent]`` samples still in
the driver's buffer. Keys of recorded fixtures (``source``, ``notes``) are ignored.

A simulated machine may have a name (``@node-a``, or the JSON file's ``"node"``): its GPUs' UUIDs
derive from it, as real GPUs' UUIDs differ from machine to machine, and the Prometheus series'
``hostname`` label defaults to it, so that tests and demos run several nodes on one machine
(docs/cluster.md, "Prometheus"). Every process of a node reads the same variable, so they agree.
"""

from __future__ import annotations

import json
import os
import re
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig, InvalidRequest
from ..units import format_bytes, parse_bytes, shorten

_SHORT = re.compile(r"^\s*(?:(\d+)\s*[xX]\s*)?([^\s@]+)(?:@(\S*))?\s*$", re.ASCII)
ALLOWED = 'a device spec such as "2x16GiB" (count x memory, and @name for a named machine) or the path of a JSON file'
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", re.ASCII)
NODE_ALLOWED = "1 to 63 letters, digits, dots, dashes or underscores, starting with a letter or digit"
_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.", re.ASCII)


@dataclass
class SimulatedProcess:
    """One process on a simulated GPU (what a JSON ``processes`` entry describes)."""

    pid: int
    used: int | None
    utilization: int = 0
    mig: int | None = None  # index of the MIG device it runs in
    name: str = "python"
    mps_client: bool = False
    history: list[tuple[float, int]] = field(default_factory=list)  # (seconds ago, percent)


@dataclass
class SimulatedMIG:
    """One MIG device (a compute instance in a GPU instance) of a simulated GPU in MIG mode."""

    uuid: str
    profile: str
    memory_total: int  # the GPU instance's memory (shared by its compute instances)
    gpu_instance_id: int
    compute_instance_id: int = 0


@dataclass
class SimulatedDevice:
    """One simulated GPU (what a JSON ``devices`` entry describes)."""

    index: int
    uuid: str
    name: str
    memory_total: int
    utilization: int = 0
    base_used: int = 0
    reserved: int = 0
    compute_capability: tuple[int, int] | None = None
    memory_query_refused: bool = False
    privileged: bool = False
    memory_partitioning: bool = False
    processes: list[SimulatedProcess] = field(default_factory=list)
    mig: list[SimulatedMIG] | None = None  # None: not in MIG mode


def _stable_uuid(index: int, memory: int, name: str, node: str | None = None) -> str:
    # Same spec -> same UUIDs across processes, so the server, kernels and commands agree; a named
    # machine's differ from every other machine's (the unnamed keep the UUIDs they always had).
    machine = f"{node}/" if node else ""
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"jupyter-vgpu/{machine}{index}/{memory}/{name}"))


def _is_json(text: str) -> bool:
    return text.endswith(".json") or os.sep in text or is_file(text)


def simulated_node(spec: str) -> str | None:
    """The simulated machine's name ``spec`` gives (``@node-a``, a JSON file's ``"node"``), or None."""
    text = spec.strip()
    if _is_json(text):
        return _node_of_file(Path(text).expanduser())
    match = _SHORT.match(text) if len(text) <= 160 else None
    return _node(match.group(3), spec) if match else None


def _node(name: Any, spec: str) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or not _NODE.match(name):
        raise InvalidConfig(
            f"JUPYTER_VGPU_SIMULATE={shorten(spec)} names the machine {shorten(name)}; a machine's name is {NODE_ALLOWED}."
        )
    return name


def parse_spec(spec: str) -> list[SimulatedDevice]:
    """Devices described by ``JUPYTER_VGPU_SIMULATE`` (short form or JSON file)."""
    text = spec.strip()
    if _is_json(text):
        return _load_json(Path(text).expanduser())
    match = _SHORT.match(text) if len(text) <= 160 else None
    if not match:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={shorten(spec)} is not {ALLOWED}.")
    node = _node(match.group(3), spec)
    count = int(match.group(1) or 1)
    if not 1 <= count <= 64:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={shorten(spec)} asks for {shorten(count)} GPUs; use 1 to 64.")
    try:
        memory = parse_bytes(match.group(2), what="JUPYTER_VGPU_SIMULATE memory")
    except InvalidRequest:
        raise InvalidConfig(f"JUPYTER_VGPU_SIMULATE={shorten(spec)} is not {ALLOWED}.") from None
    name = f"Simulated GPU {format_bytes(memory, precision=0).replace(' ', '')}"
    return [
        SimulatedDevice(index=i, uuid=_stable_uuid(i, memory, name, node), name=name, memory_total=memory)
        for i in range(count)
    ]


def is_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _size(value: Any, where: str, what: str) -> int:
    try:
        return parse_bytes(value, what=what)
    except InvalidRequest as error:
        raise InvalidConfig(f"{where}: {error}") from None


#: Largest simulation file read (a recorded layout of eight GPUs and their processes is a few KiB).
MAX_SIMULATION_FILE = 4 * 1024 * 1024


def _load_json(path: Path) -> list[SimulatedDevice]:
    data, where = _read_json(path)
    node = _node(data.get("node"), str(path))
    devices = [_device(index, entry, where, node) for index, entry in enumerate(data["devices"])]
    by_key = {str(d.index): d for d in devices} | {d.uuid: d for d in devices}
    for number, proc in enumerate(data.get("processes") or []):
        if not isinstance(proc, dict) or "pid" not in proc:
            raise InvalidConfig(f'{where}: process {number} needs "pid" and "gpu".')
        device = by_key.get(str(proc.get("gpu", 0)))
        if device is None:
            raise InvalidConfig(f"{where}: process {number} names gpu {shorten(proc.get('gpu'))}, which is not listed.")
        used = None if proc.get("memory") is None else _size(proc["memory"], where, f"process {number} memory")
        history = [(float(ago), int(util)) for ago, util in proc.get("utilization_history") or []]
        device.processes.append(
            SimulatedProcess(
                pid=int(proc["pid"]),
                used=used,
                utilization=int(proc.get("utilization", 0)),
                mig=_process_mig(proc.get("mig"), device, where=f"{where}: process {number}"),
                name=str(proc.get("name") or "python"),
                mps_client=bool(proc.get("mps")) or str(proc.get("type", "")).upper() == "M+C",
                history=history,
            )
        )
    return devices


def _read_json(path: Path) -> tuple[dict[str, Any], str]:
    where = f"JUPYTER_VGPU_SIMULATE file {path}"
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_SIMULATION_FILE + 1)
    except FileNotFoundError:
        raise InvalidConfig(f"{where} does not exist; use {ALLOWED}.") from None
    except OSError as error:
        raise InvalidConfig(f"{where} cannot be read: {error.strerror or error}.") from None
    if len(text) > MAX_SIMULATION_FILE:
        raise InvalidConfig(f"{where} is larger than {MAX_SIMULATION_FILE >> 20} MiB; use {ALLOWED}.")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InvalidConfig(f"{where} cannot be read as JSON: {str(error)[:200]}.") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list) or not data["devices"]:
        raise InvalidConfig(f'{where} needs a non-empty "devices" list.')
    return data, where


def _node_of_file(path: Path) -> str | None:
    data, _ = _read_json(path)
    return _node(data.get("node"), str(path))


def _device(index: int, entry: Any, where: str, node: str | None = None) -> SimulatedDevice:
    if not isinstance(entry, dict) or "memory" not in entry:
        raise InvalidConfig(f'{where}: device {index} needs "memory" (e.g. "16GiB").')
    here = f"{where}: device {index}"
    memory = _size(entry["memory"], here, "memory")
    name = str(entry.get("name") or f"Simulated GPU {format_bytes(memory, precision=0).replace(' ', '')}")
    uuid = str(entry.get("uuid") or _stable_uuid(index, memory, name, node))
    capability = None
    if entry.get("compute_capability"):
        major, _, minor = str(entry["compute_capability"]).partition(".")
        try:
            capability = (int(major), int(minor or 0))
        except ValueError:
            raise InvalidConfig(f'{here}: compute_capability {shorten(entry["compute_capability"])} is not like "9.0".') from None
    return SimulatedDevice(
        index=index,
        uuid=uuid,
        name=name,
        memory_total=memory,
        utilization=int(entry.get("utilization", 0)),
        base_used=_size(entry["used"], here, "used") if entry.get("used") else 0,
        reserved=_size(entry["reserved"], here, "reserved") if entry.get("reserved") else 0,
        compute_capability=capability,
        memory_query_refused=entry.get("memory_query") == "no-permission",
        privileged=bool(entry.get("privileged")),
        memory_partitioning=entry.get("memory_partitioning") is True,
        mig=_load_mig(entry.get("mig"), where=here, parent=uuid, memory=memory),
    )


def _load_mig(entries: Any, *, where: str, parent: str, memory: int) -> list[SimulatedMIG] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise InvalidConfig(f'{where}: "mig" must be a list of {{"profile": "1g.10gb", "memory": "9.75GiB"}}.')
    result: list[SimulatedMIG] = []
    next_gi, open_gi, room = 1, -1, 0  # the GPU instance compute instances are being added to
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or "profile" not in entry or "memory" not in entry:
            raise InvalidConfig(f'{where}: MIG device {number} needs "profile" (e.g. "1g.10gb") and "memory".')
        size = _size(entry["memory"], where, f"MIG device {number} memory")
        profile = str(entry["profile"])
        gi, ci = entry.get("gpu_instance_id"), entry.get("compute_instance_id")
        if gi is None:
            # Infer the GPU instance: "1c.3g.20gb" compute instances fill a 3g instance's 3 slices.
            match = _PROFILE.match(profile)
            slices, width = (int(match.group(1) or match.group(2)), int(match.group(2))) if match else (1, 1)
            if match and match.group(1) and open_gi >= 0 and room >= slices:
                gi, room = open_gi, room - slices
            else:
                while any(m.gpu_instance_id == next_gi for m in result):
                    next_gi += 1
                gi, next_gi = next_gi, next_gi + 1
                open_gi, room = (gi, width - slices) if match and match.group(1) else (-1, 0)
            ci = sum(1 for m in result if m.gpu_instance_id == gi)
        uuid = str(entry.get("uuid") or "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{parent}/mig/{number}")))
        result.append(SimulatedMIG(uuid, profile, size, int(gi), int(ci or 0)))
    per_instance = {m.gpu_instance_id: m.memory_total for m in result}
    if sum(per_instance.values()) > memory:
        raise InvalidConfig(f"{where}: its GPU instances hold more memory than the GPU has.")
    return result


def _process_mig(value: Any, device: SimulatedDevice, *, where: str) -> int | None:
    if value is None:
        return None
    for number, mig in enumerate(device.mig or []):
        if str(value) in (str(number), mig.uuid):
            return number
    raise InvalidConfig(f"{where} names MIG device {shorten(value)}, which GPU {device.index} does not have.")


def describe(spec: str) -> str:
    """One line for headers: ``2 x 16 GiB`` (``2 x 16 GiB on node-a`` for a named machine)."""
    devices = parse_spec(spec)
    sizes = {d.memory_total for d in devices}
    node = simulated_node(spec)
    where = f" on {node}" if node else ""
    if len(sizes) == 1:
        return f"{len(devices)} x {format_bytes(sizes.pop(), precision=0)}{where}"
    return ", ".join(format_bytes(d.memory_total, precision=0) for d in devices) + where
