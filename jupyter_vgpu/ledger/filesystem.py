"""Which file system a ledger lives on: SQLite's locks are not safe on network file systems
(sqlite.org/howtocorrupt.html, section 2.1), and clusters share homes over NFS, Lustre or GPFS.

A ledger there is warned about in one sentence, once per folder and process, not refused: one
user on one machine (a workstation whose home is on NFS) has used it that way without harm, and
refusing would stop every kernel of theirs; what breaks is several machines writing one file,
which is what a Slurm job's default (a folder on the node's own disk, ``config.job_ledger_path``)
avoids.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("jupyter_vgpu")

#: The mounts table read (a seam for tests: a real NFS mount is not needed to test the warning).
MOUNTS = Path("/proc/mounts")

#: File system types that are shared over the network (as /proc/mounts names them).
NETWORK = {
    "nfs", "nfs4", "lustre", "cifs", "smb3", "smbfs", "gpfs", "beegfs", "glusterfs", "fuse.glusterfs",
    "ceph", "fuse.ceph", "fuse.ceph-fuse", "afs", "ncpfs", "fuse.sshfs", "pvfs2", "orangefs", "ocfs2", "gfs2",
}  # fmt: skip

_warned: set[str] = set()


def network_filesystem(folder: Path) -> str | None:
    """The type of the network file system ``folder`` is on (``nfs4``), or None (a local one,
    or the mounts table cannot be read)."""
    try:
        text = MOUNTS.read_text()
    except OSError:
        return None
    where = os.path.realpath(folder)
    best, kind = "", ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]  # the deepest mount point holding the folder (the last one mounted wins)
    return kind if kind in NETWORK else None


def warn_if_shared(ledger: Path) -> str | None:
    """Say once (per folder and process) that ``ledger`` is on a network file system; returns the
    sentence, or None where the folder is local."""
    folder = str(ledger.parent)
    kind = network_filesystem(ledger.parent)
    if kind is None:
        return None
    sentence = (
        f"jupyter-vgpu: the ledger {ledger} is on a network file system ({kind}), where SQLite's locks are not "
        "safe: point JUPYTER_VGPU_LEDGER (or c.VGPU.ledger_path) at a folder on this machine's own disk, such as /tmp."
    )
    if folder not in _warned:
        _warned.add(folder)
        log.warning(sentence)
    return sentence
