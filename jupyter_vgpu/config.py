"""Settings shared by every jupyter-vgpu process of a user: where the ledger lives, the
CUDA-context allowance, and which GPUs (real or simulated) to use.

Read from (later wins): ``jupyter_vgpu_config.json`` in the ledger's folder (the simulated GPUs
every process keeping its slices there shares: ``./scripts/lab`` writes them), then
``jupyter_vgpu_config.{json,py}`` in Jupyter's config path, the host application's own config
(``c.VGPU.*`` in ``jupyter_server_config.py``), then environment variables, so that a kernel, the
server and ``jupyter vgpu`` (in any shell on the same ledger) all agree.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_config_path, jupyter_data_dir
from traitlets import Float, Unicode, default, validate
from traitlets.config import Config, Configurable
from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

from .errors import InvalidConfig, InvalidRequest
from .gpus.context import UNKNOWN as UNKNOWN_ALLOWANCE
from .ownfiles import write_json
from .units import format_bytes, parse_bytes

ENV_LEDGER = "JUPYTER_VGPU_LEDGER"
ENV_SIMULATE = "JUPYTER_VGPU_SIMULATE"
ENV_CONTEXT = "JUPYTER_VGPU_CONTEXT_ALLOWANCE"
ENV_HAMI = "JUPYTER_VGPU_HAMI_CORE"
ENV_CGROUP_ROOT = "JUPYTER_VGPU_CGROUP_ROOT"  # gpus.memory_cgroups
ENV_SLURM_SHARDS = "JUPYTER_VGPU_SLURM_SHARDS_PER_GPU"  # gpus.slurmshare

#: The context allowance chosen per GPU from its compute capability (jupyter_vgpu.gpus.context).
AUTO = "auto"


class VGPU(Configurable):
    """Node-wide jupyter-vgpu settings (``c.VGPU.<name>``)."""

    ledger_path = Unicode(
        help=f"""Path of the SQLite ledger that records every GPU slice of this user (or node,
        when a broker owns it). The Jupyter server, its kernels and `jupyter vgpu` commands must
        agree on it. Environment variable {ENV_LEDGER} overrides it. Default:
        <jupyter data dir>/vgpu/ledger.sqlite; inside a Slurm job, a folder of the job's on the
        node's own disk, in a private folder of the user's ($XDG_RUNTIME_DIR when it is the user's,
        else $TMPDIR/jupyter-vgpu-<uid>, /tmp without TMPDIR): job-<cluster>-<job id>/ledger.sqlite, since
        SQLite's locks are not safe on the network file systems clusters share homes over.""",
    ).tag(config=True)

    simulate = Unicode(
        "",
        help=f"""Run on simulated GPUs instead of NVML: "2x16GiB" (count x memory) or the path
        of a JSON file describing devices and per-process usage. Everything the user sees then
        says the GPUs are simulated. Environment variable {ENV_SIMULATE} overrides it.""",
    ).tag(config=True)

    context_allowance = Unicode(
        help=f"""GPU memory counted inside every slice for the CUDA context each process creates
        (a context costs memory outside any framework limit). Framework limits are set to the
        slice minus this allowance. A size such as "512MiB", or "auto" (the default): an
        allowance per GPU by its compute capability, from published context sizes (docs/gpu.md),
        {format_bytes(UNKNOWN_ALLOWANCE)} where that is unknown. Environment variable {ENV_CONTEXT}
        overrides it.""",
    ).tag(config=True)

    hami_core_library = Unicode(
        "",
        help=f"""Path of HAMi-core's libvgpu.so (built with its build.sh): slices on GPUs without
        MIG get the "enforced (HAMi-core)" tier, a memory limit their processes cannot lift.
        A library that is missing or not a shared library is named in one sentence and slices stay
        cooperative. Environment variable {ENV_HAMI} overrides it.""",
    ).tag(config=True)

    cgroup_root = Unicode(
        "",
        help=f"""Where the cgroup v2 hierarchy is mounted (default /sys/fs/cgroup): the MPS
        memory-partitioning tier makes one cgroup per slice under its "jupyter-vgpu" cgroup.
        Environment variable {ENV_CGROUP_ROOT} overrides it.""",
    ).tag(config=True)

    tiers = Unicode(
        "",
        help="""The enforcement tiers slices may get, comma-separated, from "mig", "mps-partition",
        "hami-core", "mps", "cooperative" (e.g. "mig,cooperative" to keep MPS out of the way); the strongest of
        them that applies on a slice's GPUs is used, cooperative where none does. Empty: all.
        Environment variable JUPYTER_VGPU_TIERS overrides it.""",
    ).tag(config=True)

    slurm_shards_per_gpu = Unicode(
        "",
        help=f"""Inside a Slurm job with GPU shards (--gres=shard:N), how many shards each GPU of
        the node has: one number for every GPU ("32"), or one per GPU index ("40,24") where
        gres.conf splits a node's GPUs unevenly. The job's budget on its GPU is its shards / this
        x the GPU's memory. Empty (the default): asked of Slurm (`scontrol show node`, the node's
        shards / its GPUs). Environment variable {ENV_SLURM_SHARDS} overrides it.""",
    ).tag(config=True)

    @validate("slurm_shards_per_gpu")
    def _check_slurm_shards(self, proposal: Any) -> str:
        from .gpus.slurmshare import parse_shards_per_gpu

        value = str(proposal["value"])
        if value.strip():
            parse_shards_per_gpu(value, "c.VGPU.slurm_shards_per_gpu")
        return value

    poll_interval = Float(
        0.25,
        help="Seconds between attempts of a request that waits in line for a slice.",
    ).tag(config=True)

    @default("ledger_path")
    def _default_ledger_path(self) -> str:
        return os.environ.get(ENV_LEDGER) or str(job_ledger_path(os.environ) or Path(jupyter_data_dir()) / "vgpu" / "ledger.sqlite")

    @default("simulate")
    def _default_simulate(self) -> str:
        return os.environ.get(ENV_SIMULATE, "")

    @default("context_allowance")
    def _default_context(self) -> str:
        return os.environ.get(ENV_CONTEXT) or AUTO

    @validate("context_allowance")
    def _check_context(self, proposal: Any) -> str:
        value = str(proposal["value"])
        if value.strip().lower() != AUTO:
            try:
                parse_bytes(value, what="c.VGPU.context_allowance")
            except InvalidRequest as error:
                raise InvalidConfig(f"{error} Or use {AUTO!r}.") from None
        return value

    @property
    def context_allowance_bytes(self) -> int | None:
        """The allowance in bytes, or None for "by each GPU's compute capability"."""
        source = os.environ.get(ENV_CONTEXT) or self.context_allowance
        if source.strip().lower() == AUTO:
            return None
        try:
            return parse_bytes(source, what=ENV_CONTEXT)
        except InvalidRequest as error:
            raise InvalidConfig(f"{error} Or use {AUTO!r}.") from None

    @property
    def resolved_ledger_path(self) -> Path:
        """The ledger path, environment first (kernels and commands inherit it)."""
        return Path(os.environ.get(ENV_LEDGER) or self.ledger_path).expanduser()

    @property
    def resolved_simulate(self) -> str:
        """The simulation spec in force ('' for real NVML), environment first."""
        return os.environ.get(ENV_SIMULATE, self.simulate)


def job_ledger_path(env: Mapping[str, str]) -> Path | None:
    """Inside a Slurm job on its node, the job's own ledger on the node's disk (homes on clusters
    are shared over NFS or Lustre, where SQLite's locks are not safe), in a folder of this user's
    (:mod:`.jobfolder`); None elsewhere. No safe folder, or a job id that is not Slurm's, is one
    sentence (InvalidConfig)."""
    from .gpus.slurmshare import in_job
    from .jobfolder import job_ledger_path as in_user_folder

    if not in_job(env):
        return None
    return in_user_folder(env)


def file_config() -> Config:
    """``jupyter_vgpu_config.{json,py}`` from Jupyter's config path, lowest priority first."""
    merged = Config()
    for directory in reversed(jupyter_config_path()):
        for loader_class, name in (
            (JSONFileConfigLoader, "jupyter_vgpu_config.json"),
            (PyFileConfigLoader, "jupyter_vgpu_config.py"),
        ):
            if not (Path(directory) / name).is_file():
                continue
            try:
                merged.merge(loader_class(name, path=directory).load_config())
            except Exception as error:
                raise InvalidConfig(f"{Path(directory) / name} cannot be read: {error}") from None
    return merged


#: What every process whose slices are kept in one ledger shares: this file in the ledger's folder.
#: Only ``VGPU.simulate`` is read from it, and only from a file of this user's (or root's) that
#: no one else may write: the folder may be one others can write into, and a setting such as the
#: HAMi-core library would run its code in every kernel.
LEDGER_CONFIG = "jupyter_vgpu_config.json"
SHARED_SETTINGS = ("simulate",)


def ledger_config_path(settings: VGPU) -> Path:
    """The shared settings file of the ledger ``settings`` name."""
    return settings.resolved_ledger_path.parent / LEDGER_CONFIG


def ledger_config(path: Path) -> Config:
    """The settings a ledger's shared file (:data:`LEDGER_CONFIG`) gives, :data:`SHARED_SETTINGS`
    only; empty when there is none, or it is not a file of this user's (or root's) that only its
    owner may write."""
    try:
        st = path.stat()
    except OSError:
        return Config()  # none; a name too long, a folder not ours to read: opening the ledger says so
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
        return Config()
    try:
        loaded = JSONFileConfigLoader(path.name, path=str(path.parent)).load_config()
    except Exception as error:
        raise InvalidConfig(f"{path} cannot be read: {error}") from None
    section = loaded.get("VGPU", Config())
    return Config({"VGPU": {name: section[name] for name in SHARED_SETTINGS if name in section}})


def share_simulation(spec: str, settings: VGPU | None = None) -> Path:
    """Make every process on this ledger run on the simulated GPUs ``spec`` (``""``: on what NVML
    finds), by writing them into the ledger's shared settings (:data:`LEDGER_CONFIG`); other
    settings there are kept. Returns the file. ``./scripts/lab`` calls it at each start, so a
    shell outside JupyterLab sees the GPUs the demo's kernels hold slices of."""
    path = ledger_config_path(settings or load_settings())
    if spec and Path(spec).expanduser().exists():
        spec = str(Path(spec).expanduser().resolve())  # a JSON file: the same file from any folder
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        data = {}
    section = data.setdefault("VGPU", {}) if isinstance(data, dict) else {}
    if spec:
        section["simulate"] = spec
    else:
        section.pop("simulate", None)
    if not section:
        data.pop("VGPU", None)
    if data:
        write_json(path, data, prefix=LEDGER_CONFIG)  # 0600: the owner's alone (ledger_config reads no other)
    else:
        path.unlink(missing_ok=True)
    return path


def shared_simulation(settings: VGPU) -> Path | None:
    """The ledger's shared file when the simulated GPUs in force come from it (not from
    ``JUPYTER_VGPU_SIMULATE`` nor the user's own config), else None: what ``status`` names."""
    if ENV_SIMULATE in os.environ or not settings.simulate:
        return None
    path = ledger_config_path(settings)
    shared = ledger_config(path)
    return path if shared.VGPU.get("simulate") == settings.simulate else None


def load_settings(config: Config | None = None) -> VGPU:
    """The settings in force: the ledger's shared file, config files, then ``config`` (a host
    app's), then env."""
    merged = file_config()
    if config is not None:
        merged.merge(config)
    settings = VGPU(config=merged)
    shared = ledger_config(ledger_config_path(settings))
    if shared.VGPU:
        shared.merge(merged)  # what the user's own config says wins
        settings = VGPU(config=shared)
    if settings.tiers and not os.environ.get("JUPYTER_VGPU_TIERS"):
        os.environ["JUPYTER_VGPU_TIERS"] = settings.tiers  # enforcement.allowed_tiers, here and in children
    if settings.hami_core_library and not os.environ.get(ENV_HAMI):
        # where the tiers (enforcement.hamicore) and every child process look for it
        os.environ[ENV_HAMI] = settings.hami_core_library
    if settings.cgroup_root and not os.environ.get(ENV_CGROUP_ROOT):
        os.environ[ENV_CGROUP_ROOT] = settings.cgroup_root  # gpus.memory_cgroups, here and in children
    if settings.slurm_shards_per_gpu.strip() and not os.environ.get(ENV_SLURM_SHARDS):
        os.environ[ENV_SLURM_SHARDS] = settings.slurm_shards_per_gpu  # gpus.slurmshare, here and in children
    return settings
