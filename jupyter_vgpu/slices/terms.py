"""The terms a user holds slices on: a hub policy's limits for them (as the node broker hands
them to every client in its ``info``) and the reclaim terms a user's server applies.

A hub policy sets the most a user gets: the longest idle time before a slice is reclaimed, the
longest notice before a burst someone needs is taken back, the mildest action at its end. A
user's own server setting (``c.VGPUServer.idle_reclaim_after``, ``burst_reclaim_notice``,
``burst_reclaim_action``) can only be stricter, never escape it (issue 49). The server, the
command line (``jupyter vgpu status``) and the kernel (``%vgpu``) read the policy from here, so
all three say the same terms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..units import format_duration

#: What a kernel still bursting at the end of its notice gets (``burst_reclaim_action``).
BURST_ACTIONS = ("restart", "interrupt", "shutdown", "warn")
#: How much of a burst each action gives back: a user's own action may give back more than the
#: policy's, never less (an interrupt keeps what the kernel holds; a warning keeps everything).
_GIVES_BACK = {"warn": 0, "interrupt": 1, "restart": 2, "shutdown": 3}
_ACTION_WORDS = {
    "restart": "the kernel is restarted (it keeps its slice, back at its request)",
    "interrupt": "the running cell is interrupted",
    "shutdown": "the kernel is shut down (the notebook is kept)",
    "warn": "a warning only",
}

#: How each of a policy's limits reads to the user it applies to, in the order shown.
LIMIT_WORDS = {
    "max_per_kernel": "per kernel",
    "max_total": "in all, at once",
    "max_limit": "largest limit to burst to",
    "max_slices": "slices at once",
    "gpus": "GPUs allowed",
    "max_wait": "longest wait in line",
    "max_waiting": "places in line at once",
    "idle_reclaim_after": "idle time before a slice someone needs is reclaimed",
    "burst_reclaim_notice": "notice before a burst someone needs is taken back",
    "burst_reclaim_action": "then, to a kernel still bursting",
}


def action_gives_back(action: str) -> int:
    """The rank of ``action`` by how much of a burst it gives back (warn 0 ... shutdown 3)."""
    return _GIVES_BACK[action]


def action_words(action: str) -> str:
    return _ACTION_WORDS[action]


def seconds_words(seconds: float) -> str:
    """``15 s``, ``1 h 0 min``; ``never`` for 0 (the idle reclaim's "off")."""
    return "never" if seconds == 0 else format_duration(seconds)


def policy_limit(info: Mapping[str, Any] | None, name: str) -> tuple[Any, str] | None:
    """A limit of the hub policy for this user, with where it came from (``"group students"``),
    from the node broker's ``info``; None where the policy sets none (or there is no broker)."""
    limits = info.get("limits") if isinstance(info, Mapping) else None
    if not isinstance(limits, list):
        return None
    for entry in limits:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry.get("value"), str(entry.get("from") or "the hub policy")
    return None


def idle_reclaim_after(own: float, info: Mapping[str, Any] | None) -> float:
    """The server's ``idle_reclaim_after``, or the hub policy's for this user where that is set
    and stricter: 0 means never."""
    found = policy_limit(info, "idle_reclaim_after")
    if found is None and isinstance(info, Mapping):  # a broker of before the limits list
        found = (info.get("idle_reclaim_after"), "")
    policy = found[0] if found else None
    if not isinstance(policy, (int, float)) or isinstance(policy, bool) or policy <= 0:
        return own
    return float(policy) if own <= 0 else min(own, float(policy))


@dataclass(frozen=True)
class BurstTerms:
    """What a kernel's burst gets when someone needs it: ``notice`` seconds, then ``action``;
    ``source`` says whose terms they are (this server's settings or the hub policy's entry)."""

    notice: float
    action: str
    source: str = "this server's settings"

    @property
    def by_policy(self) -> bool:
        return self.source != "this server's settings"

    def describe(self) -> str:
        """``15 s notice, then the kernel is restarted (...) (the hub policy: user alice)``."""
        return f"{seconds_words(self.notice) if self.notice else 'no'} notice, then {action_words(self.action)} ({self.source})"


def burst_terms(own_notice: float, own_action: str, info: Mapping[str, Any] | None) -> BurstTerms:
    """The burst terms a user's server applies: its own, where the hub policy sets nothing or
    they are stricter (a shorter notice, an action that gives more back); else the policy's."""
    notice, action, sources = own_notice, own_action, []
    if (found := policy_limit(info, "burst_reclaim_notice")) is not None:
        value, source = found
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value < notice:
            notice = float(value)
            sources.append(source)
    if (found := policy_limit(info, "burst_reclaim_action")) is not None:
        value, source = found
        if value in _GIVES_BACK and _GIVES_BACK[str(value)] > _GIVES_BACK[action]:
            action = str(value)
            sources.append(source)
    if not sources:
        return BurstTerms(notice, action)
    return BurstTerms(notice, action, "the hub policy: " + ", ".join(dict.fromkeys(sources)))


def policy_rows(info: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The hub policy's limits for this user, a row each (``("per kernel", "1/4 GPU (group
    students)")``); [] without a broker. Root: one row saying nothing limits it."""
    if not isinstance(info, Mapping) or "limits" not in info:
        return []
    if info.get("unlimited"):
        return [("limits", f"none: {info.get('user') or 'root'} is never limited")]
    rows = []
    for entry in info.get("limits") or []:
        if isinstance(entry, Mapping) and entry.get("name") in LIMIT_WORDS:
            rows.append((LIMIT_WORDS[str(entry["name"])], f"{entry.get('text')} ({entry.get('from')})"))
    return rows or [("limits", "none set for you")]


def policy_heading(info: Mapping[str, Any] | None) -> str:
    """``Your limits on this node (hub policy /etc/jupyterhub/vgpu.json, user alice)``."""
    source = info.get("policy") if isinstance(info, Mapping) else None
    user = info.get("user") if isinstance(info, Mapping) else None
    return f"Your limits on this node (the hub policy, {source or 'no policy'}; user {user or '?'})"
