"""dcgm-exporter's HPC job mapping, written from the node's readings (``jupyter vgpu exporter
--dcgm-job-mapping-dir``, ``jupyter vgpu broker --metrics-dcgm-job-mapping-dir``).

dcgm-exporter's ``--hpc-job-mapping-dir`` reads, at each of its collections, one file per GPU named
by the GPU's index (``<gpu>.<gi>`` for a MIG GPU instance, from 4.5.3-4.8.2 on), holding job ids one
per line, and repeats every figure of that GPU once per id with the label ``hpc_job``. Here the job
ids are the ids of the slices on that GPU, so a site labels DCGM's per-GPU figures with our slices
(and through ``jupyter_vgpu_slice_info``, with their users).

What is written, at each reading of the node (the sampler's, no second one):

* ``<gpu>`` for every GPU of the node: every slice on that GPU, MIG slices included (the whole GPU's
  figures are every slice's on it, as a shared GPU's are);
* ``<gpu>.<gi>`` for every MIG GPU instance: the MIG slices in it;
* a file only when its contents change, through a temporary file in the folder (a name that starts
  with a dot, which dcgm-exporter skips) renamed over it, so dcgm-exporter never reads half a file;
* a GPU with no slice gets an empty file, never none: dcgm-exporter lists the folder then opens each
  file, and fails the whole collection when one is gone in between, while since 4.3.1-4.4.0 (#533)
  it reads an empty file as no job (earlier releases drop the figures of a GPU whose file is empty);
* no id twice in a file (dcgm-exporter up to 4.5.3-4.8.2 answers HTTP 500 then, #730);
* a reading that failed changes nothing; when the page stops, every file is emptied (no ended slice
  keeps labelling DCGM's figures).

The folder is created if missing (mode 755: dcgm-exporter, often another user or a container, reads
it) and must be a real folder of this process's user that nobody else can write to: another user
could otherwise put a link where a file goes. It is this exporter's alone; a numbered file in it is
taken for one of ours and emptied when no GPU of the node has that name.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..enforcement import Tier
from ..errors import InvalidRequest
from ..gpus import Snapshot
from ..slices.records import Slice
from ..units import shorten

log = logging.getLogger("jupyter_vgpu.exporter")

#: dcgm-exporter's file names: a GPU's index, or ``<gpu>.<gi>`` for a MIG GPU instance.
FILE_NAME = re.compile(r"^\d+(\.\d+)?$", re.ASCII)
_TEMPORARY = ".jupyter-vgpu-"


def job_files(snapshot: Snapshot, slices: Sequence[Slice]) -> dict[str, tuple[str, ...]]:
    """Each file's slice ids, in the slices' order: every GPU's file and every MIG GPU instance's,
    empty where no slice is."""
    files: dict[str, list[str]] = {}
    by_uuid = {gpu.uuid: gpu for gpu in snapshot.gpus}
    for gpu in snapshot.gpus:
        files[str(gpu.index)] = []
        for device in gpu.mig_devices:
            if device.gpu_instance_id is not None:
                files[f"{gpu.index}.{device.gpu_instance_id}"] = []
    for slice_ in slices:
        for position, uuid in enumerate(slice_.gpus):
            on = by_uuid.get(uuid)
            if on is None:  # not on this node's GPUs now: dcgm-exporter has no figures to label
                continue
            names = [str(on.index)]
            if slice_.tier is Tier.MIG and position < len(slice_.mig_devices):
                instance = next((d.gpu_instance_id for d in on.mig_devices if d.uuid == slice_.mig_devices[position]), None)
                if instance is not None:
                    names.append(f"{on.index}.{instance}")
            for name in names:
                if slice_.id not in files[name]:
                    files[name].append(slice_.id)
    return {name: tuple(ids) for name, ids in files.items()}


class JobMapping:
    """The job mapping files in ``folder``, kept as the readings say (see the module's text).

    Opening checks the folder, creating it if missing, and raises :class:`InvalidRequest` (one
    sentence naming the writer as ``who`` and the folder's option as ``option``) when it is not a
    folder this process may use."""

    def __init__(self, folder: str | Path, *, who: str = "The exporter", option: str = "--dcgm-job-mapping-dir") -> None:
        self.folder = Path(folder)
        self._fd = _open_folder(self.folder, who, option)
        #: What each file holds as far as this process knows; None: a file of an earlier run, unread.
        self._written: dict[str, bytes | None] = {}
        self._said: dict[str, str] = {}  # a problem per file, said once until it changes
        for entry in os.scandir(self._fd):
            if entry.name.startswith(_TEMPORARY) and entry.is_file(follow_symlinks=False):
                if entry.stat(follow_symlinks=False).st_mtime < time.time() - 60:  # not one being written now
                    os.unlink(entry.name, dir_fd=self._fd)  # left by a run that stopped mid-write
            elif FILE_NAME.match(entry.name):
                self._written[entry.name] = None

    def write(self, files: Mapping[str, Sequence[str]]) -> None:
        """Bring every file to ``files`` (name: slice ids); a file of ours that ``files`` leaves out
        is emptied. Only files whose contents change are written."""
        for name in sorted(set(files) | set(self._written)):
            ids = files.get(name, ())
            data = "".join(f"{id_}\n" for id_ in ids).encode()
            if self._written.get(name) != data:
                self._replace(name, data)

    def close(self) -> None:
        """Empty every file (the slices' figures are no longer followed), then let the folder go."""
        if self._fd < 0:
            return
        try:
            self.write({})
        finally:
            self.release()

    def release(self) -> None:
        """Let the folder go and leave the files as they are (a page that never started: what is
        there is an earlier run's, or another exporter's that holds the port)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _replace(self, name: str, data: bytes) -> None:
        temporary = f"{_TEMPORARY}{name}-{secrets.token_hex(4)}"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=self._fd)
            try:
                os.fchmod(fd, 0o644)  # whatever the umask: dcgm-exporter reads it
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            try:
                os.replace(temporary, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)  # a link there is replaced, never followed
            except OSError:
                os.unlink(temporary, dir_fd=self._fd)
                raise
        except OSError as error:
            problem = f"{self.folder / name} cannot be written ({error.strerror or shorten(error)}); dcgm-exporter's figures of that GPU keep its last job ids"
            if self._said.get(name) != problem:
                self._said[name] = problem
                log.warning("jupyter-vgpu: %s.", problem)
            self._written[name] = None  # try again at the next reading
            return
        if self._said.pop(name, None):
            log.info("jupyter-vgpu: %s can be written again.", self.folder / name)
        self._written[name] = data


def _open_folder(folder: Path, who: str, option: str) -> int:
    """The folder, opened (never through a link); created with mode 755 if missing."""

    def refuse(why: str) -> InvalidRequest:
        return InvalidRequest(f"{who} cannot write dcgm-exporter's job mapping in {folder}: {why}.")

    try:
        if not os.path.lexists(folder):
            folder.mkdir(parents=True, mode=0o755)
            os.chmod(folder, 0o755)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if os.path.islink(folder):
            raise refuse(f"it is a link; give {option} the folder itself") from None
        if os.path.lexists(folder) and not folder.is_dir():
            raise refuse(f"it is not a folder; give {option} a folder") from None
        raise refuse(f"{error.strerror or shorten(error)}; give {option} a folder this user may create or use") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        what = f"it belongs to uid {st.st_uid}" if st.st_uid != os.geteuid() else f"other users may write to it (mode {stat.S_IMODE(st.st_mode):o})"
        raise refuse(f"{what}; give {option} a folder of uid {os.geteuid()} that nobody else can write to (mode 755)")
    return fd
