"""A Slurm job's own folder on its node, for its ledger (DESIGN.md, "Every mechanism has a second
user": a folder in a shared place is per user, created exclusively, checked, and removed with its
owner).

A node's temporary folder is shared by every user, and Slurm's job ids are sequential: a folder
named by the job id alone can be made by anyone before the job starts (or be left by an earlier
job of the same id, from another cluster on the machine or a controller whose state was cleared).
So every job folder lives in a folder of this user's own (:func:`user_base`): ``$XDG_RUNTIME_DIR``
when it is this user's, else ``<TMPDIR or /tmp>/jupyter-vgpu-<uid>``, made 0700 and then checked
(owned by this user, open to no one else, not a link); when someone took that name first, the
next fresh one (``jupyter-vgpu-<uid>.1`` ...). Inside it:

* ``job-<cluster>-<job id>``: the job's ledger for every process of the job that names none
  (a batch script's ``jupyter vgpu run`` steps share it: :func:`job_ledger_path`);
* ``kernel-<cluster>-<job id>-<random>``: the ledger of one kernel's start by the ``slurm``
  launcher (:func:`kernel_folder`), made exclusively (``mkdtemp``), removed when the kernel ends
  (:mod:`.launch.node` waits for it), and swept at the next start on the node if a SIGKILL left it
  (:func:`sweep`: its starter, named in the folder, has gone).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from .errors import InvalidConfig
from .units import shorten

JOB = "SLURM_JOB_ID"
CLUSTER = "SLURM_CLUSTER_NAME"
#: Slurm's job ids are numbers (an array's or a heterogeneous job's parts have numeric ids too).
JOB_ID = re.compile(r"[0-9]{1,10}")
#: Who made a kernel folder: ``<pid> <start time in clock ticks>`` (a folder whose maker has gone
#: is stale).
STARTER = ".starter"
#: The ledger's name in a job's or a kernel's folder.
LEDGER = "ledger.sqlite"
#: Where Slurm's commands read their configuration without ``SLURM_CONF``.
DEFAULT_CONF = "/etc/slurm/slurm.conf"


def job_id(env: Mapping[str, str]) -> str:
    """``SLURM_JOB_ID``, checked: it names folders, so only Slurm's job id syntax is allowed."""
    value = env.get(JOB, "").strip()
    if not JOB_ID.fullmatch(value):
        raise InvalidConfig(f"{JOB}={shorten(value)} is not a Slurm job id; Slurm sets a number such as 1234.")
    return value


def _cluster(env: Mapping[str, str]) -> str:
    """The cluster's name in folder names: ``SLURM_CLUSTER_NAME``, which Slurm sets in a batch
    script but not in every step (``srun --jobid=N`` from outside the job has none), else the
    ``ClusterName`` of slurm.conf (``SLURM_CONF``, else /etc/slurm/slurm.conf), so that every
    process of one job finds the same folder; else "slurm". Lowercase, as Slurm keeps it."""
    name = env.get(CLUSTER, "").strip() or _configured_cluster(env.get("SLURM_CONF", "").strip() or DEFAULT_CONF)
    return re.sub(r"[^a-z0-9_-]", "_", name.lower())[:64] or "slurm"


def _configured_cluster(conf: str) -> str:
    """``ClusterName`` in the slurm.conf at ``conf`` ("" when it says none or cannot be read)."""
    try:
        with open(conf, errors="replace") as handle:
            for line in handle:
                key, _, value = line.split("#", 1)[0].partition("=")
                if key.strip().lower() == "clustername":
                    return value.strip()
    except OSError:
        return ""
    return ""


def not_private(path: Path, uid: int) -> str | None:
    """Why ``path`` is not a private folder of ``uid`` (in words), or None when it is one."""
    try:
        st = os.lstat(path)
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != uid:
        return f"belongs to uid {st.st_uid}, not to you (uid {uid})"
    if st.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


#: How many names :func:`user_base` tries when the first is taken (``jupyter-vgpu-<uid>.1`` ...).
FRESH_NAMES = 64


def _runtime_dir(env: Mapping[str, str], uid: int) -> Path | None:
    """``$XDG_RUNTIME_DIR`` when it is a private folder of ``uid``'s."""
    runtime = env.get("XDG_RUNTIME_DIR", "").strip()
    if runtime and os.path.isabs(runtime) and not_private(Path(runtime), uid) is None:
        return Path(runtime)
    return None


def _base_names(env: Mapping[str, str], uid: int) -> Iterator[Path]:
    """The names :func:`user_base` tries in turn: ``<TMPDIR or /tmp>/jupyter-vgpu-<uid>``, then
    ``.1``, ``.2`` ... up to :data:`FRESH_NAMES`."""
    tmp = env.get("TMPDIR", "").strip() or "/tmp"
    first = Path(tmp if os.path.isabs(tmp) else "/tmp") / f"jupyter-vgpu-{uid}"
    for number in range(FRESH_NAMES + 1):
        yield first if number == 0 else first.with_name(f"{first.name}.{number}")


def user_base(env: Mapping[str, str]) -> Path:
    """This user's private folder on this node for job folders: ``$XDG_RUNTIME_DIR`` when it is
    this user's, else ``<TMPDIR or /tmp>/jupyter-vgpu-<uid>``, made 0700 (or found so). A folder of
    that name that is not this user's private one is never used, never taken over: the next name
    (``jupyter-vgpu-<uid>.1``, ``.2`` ...) is made instead, exclusively, so that every process of
    the job finds the same one (hardening round five, M3: one ``mkdir`` by another user locked this
    one out of Slurm). When every name is taken, one sentence (InvalidConfig) says so."""
    uid = os.geteuid()
    runtime = _runtime_dir(env, uid)
    if runtime is not None:
        return runtime
    taken = ""
    for base in _base_names(env, uid):
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass  # checked below: ours from an earlier job (or this job's other process), or taken
        except OSError as error:
            raise InvalidConfig(
                f"Cannot make {base} for this Slurm job's ledger ({error.strerror}); set TMPDIR to a folder of yours on the node."
            ) from None
        problem = not_private(base, uid)
        if problem is None:
            return base
        taken = taken or f"{base} {problem}"
    raise InvalidConfig(
        f"{taken}, and so are the next {FRESH_NAMES} names, so this Slurm job has no safe folder for its ledger on this node; "
        "remove them, or set TMPDIR to a folder of yours on the node."
    )


def found_user_base(env: Mapping[str, str], uid: int) -> Path | None:
    """The folder :func:`user_base` gives the processes of ``uid`` that have ``env``, found and
    never made (a node exporter looking for a job's ledgers): None where there is none yet. A
    folder of that name that is not ``uid``'s private one is passed over, as :func:`user_base`
    passes it over, so nobody else can put a folder in its place."""
    runtime = _runtime_dir(env, uid)
    if runtime is not None:
        return runtime
    for base in _base_names(env, uid):
        if not os.path.lexists(base):
            return None  # user_base would have made this one: none of the next names is the user's
        if not_private(base, uid) is None:
            return base
    return None


def job_ledgers(base: Path, env: Mapping[str, str], uid: int) -> list[Path]:
    """The ledgers of the Slurm job that ``env`` names in ``uid``'s folder ``base``: the job's
    (``job-<cluster>-<job id>``) and its kernels' (``kernel-<cluster>-<job id>-*``), those whose
    folder is ``uid``'s private one and holds a ledger file."""
    prefix = f"{_cluster(env)}-{job_id(env)}"
    folders = [base / f"job-{prefix}", *sorted(base.glob(f"kernel-{prefix}-*"))]
    return [folder / LEDGER for folder in folders if not_private(folder, uid) is None and os.path.isfile(folder / LEDGER)]


def job_ledger_path(env: Mapping[str, str]) -> Path:
    """The ledger every process of this job shares when it names none:
    ``<user base>/job-<cluster>-<job id>/ledger.sqlite``."""
    return user_base(env) / f"job-{_cluster(env)}-{job_id(env)}" / LEDGER


def _starter_alive(folder: Path) -> bool:
    try:
        pid, start = (folder / STARTER).read_text().split()
        return _start_time(int(pid)) == start
    except (OSError, ValueError):
        return False


def _start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None


def sweep(base: Path, uid: int | None = None) -> list[Path]:
    """Remove this user's kernel folders in ``base`` whose starter has gone (a SIGKILL left them);
    the folders removed. Only private folders of this user's are touched."""
    uid = os.geteuid() if uid is None else uid
    removed = []
    for entry in base.glob("kernel-*"):
        if not_private(entry, uid) is None and not _starter_alive(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def kernel_folder(env: Mapping[str, str]) -> Path:
    """A new folder of this kernel's start, made exclusively in :func:`user_base` and marked with
    this process as its starter (it removes the folder when the kernel ends). Refused in one
    sentence (InvalidConfig) when no safe folder can be had."""
    base = user_base(env)
    sweep(base)
    try:
        folder = Path(tempfile.mkdtemp(prefix=f"kernel-{_cluster(env)}-{job_id(env)}-", dir=base))
    except OSError as error:
        raise InvalidConfig(f"Cannot make a folder for this kernel's ledger in {base} ({error.strerror}).") from None
    (folder / STARTER).write_text(f"{os.getpid()} {_start_time(os.getpid())}")
    return folder


def remove(folder: Path) -> None:
    """Remove a kernel folder of this user's (never a link, never another user's)."""
    if not_private(folder, os.geteuid()) is None:
        shutil.rmtree(folder, ignore_errors=True)
