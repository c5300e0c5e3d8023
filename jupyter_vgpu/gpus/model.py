"""What a snapshot of the GPUs holds: GPUs, their MIG devices and processes, at one instant.
Read by :mod:`.inventory` (NVML), seen through a scheduler's share by :mod:`.lenses`."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GPUProcess:
    """A process NVML sees on a GPU (host pid; ``used`` is None when NVML cannot tell).

    ``mig_device`` is the UUID of the MIG device it runs in (None outside MIG mode);
    ``mps_server`` marks the MPS server, which holds memory on behalf of its clients.
    ``slice_id`` is set by a node broker, which knows every slice's holder: the slice the
    process counts against. It sends another user's process with ``pid`` 0 (withheld).
    """

    pid: int
    used: int | None
    utilization: int | None = None
    mig_device: str | None = None
    mps_server: bool = False
    slice_id: str | None = None


@dataclass(frozen=True)
class MIGDevice:
    """A MIG device (a GPU instance with its compute instance) an admin created on a GPU."""

    index: int  # NVML's MIG device index under the parent GPU
    uuid: str  # MIG-..., what CUDA_VISIBLE_DEVICES takes
    profile: str  # 1g.10gb
    memory_total: int
    memory_used: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class GPU:
    """One physical GPU at the time of the snapshot.

    In MIG mode ``mig_devices`` lists its instances (processes stay listed on the GPU, each
    with its ``mig_device``); ``mps`` is True when an MPS control daemon serves it.
    """

    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int | None
    utilization: int | None
    mig_mode: bool | None
    processes: tuple[GPUProcess, ...] = ()
    mig_devices: tuple[MIGDevice, ...] = ()
    mps: bool = False
    #: What the driver keeps for itself (NVML's ``reserved``): no process can have it.
    memory_reserved_by_driver: int = 0
    compute_capability: tuple[int, int] | None = None
    #: Telemetry, read only when a snapshot asks for it (the dashboard's monitor), else None;
    #: also None where NVML has no answer (MIG mode, a board without the sensor).
    power_draw: float | None = None  # W
    power_limit: float | None = None  # W (the enforced limit)
    temperature: int | None = None  # °C, the GPU die
    pcie_tx: int | None = None  # bytes/s over the last 20 ms NVML samples
    pcie_rx: int | None = None  # bytes/s
    #: In a pod a scheduler placed on a shared GPU (gpus.podshare): what it gave the pod, in
    #: words ("this pod's share: 4.0 GiB of 16.0 GiB (HAMi)"), the card's own memory, and the
    #: share of the SMs. ``memory_total`` is then the pod's share.
    pod_share: str | None = None
    card_memory: int | None = None
    sm_limit: int | None = None
    #: A scheduler's share of this GPU in words, a pod's (``pod_share``) or a Slurm job's
    #: (gpus.slurmshare: "Slurm job 1234: 16/32 shards of GPU 0, 8.0 GiB"); and the Slurm job.
    share: str | None = None
    slurm_job: str | None = None
    #: Where this process can give a slice a driver-enforced memory limit (MPS memory
    #: partitioning, gpus.memory_cgroups): the backend, "dmem" (the kernel's controller) or "driver"
    #: (the driver's fallback on kernels without it); None where it cannot.
    memory_partitioning: str | None = None

    def __post_init__(self) -> None:
        # Accept the plain dicts and lists of a JSON round trip (the broker's wire).
        if any(isinstance(m, dict) for m in self.mig_devices):
            devices = tuple(MIGDevice(**m) if isinstance(m, dict) else m for m in self.mig_devices)
            object.__setattr__(self, "mig_devices", devices)
        if self.compute_capability is not None and not isinstance(self.compute_capability, tuple):
            object.__setattr__(self, "compute_capability", tuple(self.compute_capability))

    @property
    def memory_usable(self) -> int:
        """What processes can have: the total less what the driver keeps."""
        return max(0, self.memory_total - self.memory_reserved_by_driver)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["processes"] = [asdict(p) for p in self.processes]
        data["mig_devices"] = [asdict(m) for m in self.mig_devices]
        return data


@dataclass(frozen=True)
class Snapshot:
    """The inventory at one instant.

    ``available`` is False when there is no GPU (or no driver); ``message`` then says why in
    words a user can act on.
    """

    gpus: tuple[GPU, ...]
    simulated: bool
    available: bool
    driver: str | None = None
    message: str | None = None
    taken_at: float = field(default_factory=time.time)

    def by_uuid(self) -> dict[str, GPU]:
        return {gpu.uuid: gpu for gpu in self.gpus}

    def find(self, ident: str | int) -> GPU | None:
        """A GPU by index (``0``, ``"0"``) or UUID (``GPU-...``), or None."""
        text = str(ident).strip()
        for gpu in self.gpus:
            if text == str(gpu.index) or text == gpu.uuid or (len(text) >= 8 and gpu.uuid.startswith(text)):
                return gpu
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulated": self.simulated,
            "available": self.available,
            "driver": self.driver,
            "message": self.message,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }


def instance_key(device: MIGDevice) -> tuple[int | None, str]:
    """What a MIG device's memory belongs to: its GPU instance (compute instances share it)."""
    return (device.gpu_instance_id, device.uuid if device.gpu_instance_id is None else "")


__all__ = ["GPU", "GPUProcess", "MIGDevice", "Snapshot", "instance_key"]
