"""Unix accounts: the groups a user belongs to, as the node's name service says (the hub policy's
groups, and `jupyter vgpu report --by group`)."""

from __future__ import annotations

import grp
import os
import pwd


def user_groups(user: str) -> list[str]:
    """The names of every group ``user`` belongs to (primary first); [] for unknown users."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return []
    names = []
    for gid in [entry.pw_gid, *[g for g in _grouplist(user, entry.pw_gid) if g != entry.pw_gid]]:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


def _grouplist(user: str, gid: int) -> list[int]:
    try:
        return list(os.getgrouplist(user, gid))
    except OSError:
        return [gid]
