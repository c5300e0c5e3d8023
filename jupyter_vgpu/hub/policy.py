"""Who may hold how much of the node's GPUs: per-user, per-group and default limits.

Admins write the policy as ``c.VGPUPolicy.*`` in ``jupyterhub_config.py`` or as a JSON file of
the same shape; the broker reads it at start and again on SIGHUP or when the file changes::

    {"default": {"max_per_kernel": "1/2", "max_slices": 4},
     "groups": {"students": {"max_per_kernel": "1/4", "max_total": "1/2", "max_limit": "1/2", "max_wait": 60},
                "staff": {"max_per_kernel": 2, "max_total": 2}},
     "users": {"alice": {"gpus": [0]}},
     "admin_users": ["carol"], "admin_groups": ["wheel"],
     "prometheus_url": "http://prometheus:9090"}

Shares are GPU-fractions (``"1/4"``, ``"25%"``, ``0.25``, ``2`` = two whole GPUs, summed over
a slice's GPUs) or memory (``"8GiB"``, summed over a slice's GPUs). ``max_limit`` caps the limit an
elastic request may burst to (issue 42), written as a share, or 0 / false for no bursting; quotas
(``max_per_kernel``, ``max_total``) count requests only, never limits. For each limit a user's own
entry wins, then the most generous of their groups that sets it, then the default; a limit set
nowhere does not apply, except two the broker always applies (:data:`BROKER_DEFAULTS`): a place in
line waits at most an hour (``max_wait``) and a user has at most 8 places in line at once
(``max_waiting``), so nobody's long wait holds a node's line. Root is never limited.

Three limits are applied by each user's server rather than the broker, which hands them over in
its ``info``: ``idle_reclaim_after``, ``burst_reclaim_notice`` (the longest notice a burst someone
needs gets) and ``burst_reclaim_action`` (the mildest action at its end). A user's own server
setting can only be stricter (:mod:`jupyter_vgpu.slices.terms`). ``prometheus_url`` is the node's,
not a limit: the site's Prometheus every user's server reads the cluster view from, where the
user's own server sets none (``c.VGPUServer.prometheus_url``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traitlets import Dict, List, Unicode
from traitlets.config import Config, Configurable
from traitlets.config.loader import PyFileConfigLoader

from ..errors import InvalidConfig, InvalidRequest
from ..metrics.prometheus import check_url
from ..slices.terms import BURST_ACTIONS, action_gives_back, action_words, seconds_words
from ..units import ALLOWED_WAITS, describe_fraction, format_bytes, parse_bytes, parse_seconds, share_number, shorten

LIMITS = (
    "max_per_kernel", "max_total", "max_limit", "max_slices", "gpus", "max_wait", "max_waiting",
    "idle_reclaim_after", "burst_reclaim_notice", "burst_reclaim_action",
)  # fmt: skip

#: Limits that apply where the policy sets none (the policy can raise or lower them).
BROKER_DEFAULTS: dict[str, Any] = {"max_wait": 3600.0, "max_waiting": 8}
SHARES = 'a GPU share such as "1/4", "25%", 0.5 or 2 (GPUs), or memory such as "8GiB"'


@dataclass(frozen=True)
class Share:
    """An amount of GPU: ``gpus`` (GPU-fractions, summed over GPUs) or ``memory`` bytes."""

    gpus: float | None = None
    memory: int | None = None

    @classmethod
    def parse(cls, value: Any, *, what: str) -> Share:
        if isinstance(value, bool) or value is None:
            raise InvalidConfig(f"{what} {shorten(value)} is not {SHARES}.")
        text = str(value).strip() if isinstance(value, str) else ""
        if text and text[-1].isalpha():  # a size ("nan" and "inf" end here too, and are not one)
            try:
                return cls(memory=parse_bytes(text, what=what))
            except InvalidRequest:
                raise InvalidConfig(f"{what} {shorten(value)} is not {SHARES}.") from None
        try:
            number = share_number(value)  # the grammar of units.parse_fraction, without its bound of 1
        except ZeroDivisionError:
            raise InvalidConfig(f"{what} {shorten(value)} divides by zero; use {SHARES}.") from None
        except ValueError:
            raise InvalidConfig(f"{what} {shorten(value)} is not {SHARES}.") from None
        if not math.isfinite(number) or number <= 0:
            raise InvalidConfig(f"{what} {shorten(value)} must be more than zero; use {SHARES}.")
        return cls(gpus=number)

    @classmethod
    def parse_limit(cls, value: Any, *, what: str) -> Share:
        """``max_limit``: a share as :meth:`parse` reads it, or 0 / false for no bursting at all
        (:data:`NO_BURST`); any other value raises :class:`InvalidConfig` in one sentence."""
        if value is False:
            return NO_BURST
        try:
            if not isinstance(value, bool) and share_number(value) == 0:
                return NO_BURST
        except (ValueError, ZeroDivisionError):
            pass
        try:
            return cls.parse(value, what=what)
        except InvalidConfig:
            raise InvalidConfig(
                f"{what} {shorten(value)} is not allowed; use the largest limit one kernel may burst to, {SHARES}, "
                "or 0 or false for no bursting."
            ) from None

    @property
    def no_burst(self) -> bool:
        """Whether this is ``max_limit`` 0: no limit above a request at all."""
        return self.memory is None and not self.gpus

    def describe(self) -> str:
        if self.memory is not None:
            return format_bytes(self.memory)
        return describe_gpus(self.gpus or 0.0)

    def exceeded_by(self, gpus: float, memory: int) -> bool:
        """Whether an amount (GPU-fractions and bytes of the same slices) is over this share."""
        if self.memory is not None:
            return memory > self.memory
        return gpus > (self.gpus or 0.0) + 1e-9

    def spent(self, gpus: float, memory: int) -> str:
        """An amount in this share's unit, for messages."""
        return format_bytes(memory) if self.memory is not None else describe_gpus(gpus)


#: ``max_limit`` 0 (or false): a kernel may not burst beyond its request.
NO_BURST = Share(gpus=0.0)


def describe_gpus(amount: float) -> str:
    """``1/4 GPU``, ``1 GPU``, ``2 GPUs``, ``1.5 GPUs``, ``0 GPU``."""
    if amount <= 0:
        return "0 GPU"
    if amount < 1:
        return f"{describe_fraction(amount)} GPU"
    if abs(amount - round(amount)) < 1e-9:
        whole = round(amount)
        return f"{whole} GPU" if whole == 1 else f"{whole} GPUs"
    return f"{amount:.3g} GPUs"


@dataclass(frozen=True)
class Limits:
    """One entry of the policy (a user's, a group's or the default); None = not set here."""

    max_per_kernel: Share | None = None
    max_total: Share | None = None
    #: The largest limit one kernel may burst to (summed over its GPUs, as ``max_per_kernel``);
    #: :data:`NO_BURST` (0 or false): no limit above a request at all.
    max_limit: Share | None = None
    max_slices: int | None = None
    gpus: tuple[str, ...] | None = None
    max_wait: float | None = None
    max_waiting: int | None = None
    #: Seconds a kernel's slice may stay idle before the user's server reclaims it for someone
    #: who waits (0: never); the server takes the smaller of its own setting and this.
    idle_reclaim_after: float | None = None
    #: The longest notice a user's server gives a burst someone needs (its own setting may only
    #: be shorter), and the action at its end (its own may only give more back): slices.terms.
    burst_reclaim_notice: float | None = None
    burst_reclaim_action: str | None = None

    @classmethod
    def parse(cls, data: Any, *, where: str) -> Limits:
        if not isinstance(data, dict):
            raise InvalidConfig(f"{where} must be a mapping of limits ({', '.join(LIMITS)}), not {shorten(data)}.")
        unknown = sorted(set(data) - set(LIMITS))
        if unknown:
            raise InvalidConfig(f"{where}: unknown limit {shorten(unknown[0])}; the limits are {', '.join(LIMITS)}.")
        values: dict[str, Any] = {}
        for key in ("max_per_kernel", "max_total"):
            if data.get(key) is not None:
                values[key] = Share.parse(data[key], what=f"{where}.{key}")
        if data.get("max_limit") is not None:
            values["max_limit"] = Share.parse_limit(data["max_limit"], what=f"{where}.max_limit")
        for key in ("max_slices", "max_waiting"):
            if data.get(key) is not None:
                count = data[key]
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise InvalidConfig(f"{where}.{key} {shorten(count)} is not allowed; use a whole number, 0 or more.")
                values[key] = count
        if data.get("gpus") is not None:
            gpus = data["gpus"]
            if isinstance(gpus, (str, int)):
                gpus = [gpus]
            if not isinstance(gpus, list) or any(isinstance(g, bool) or not isinstance(g, (str, int)) for g in gpus):
                raise InvalidConfig(f"{where}.gpus {shorten(data['gpus'])} is not allowed; use a list of GPU indices or UUIDs.")
            values["gpus"] = tuple(str(g).strip() for g in gpus)
        for key in ("max_wait", "idle_reclaim_after", "burst_reclaim_notice"):
            if data.get(key) is None:
                continue
            seconds = data[key]
            if isinstance(seconds, str):
                raise InvalidConfig(f"{where}.{key} {shorten(seconds)} is not allowed; use {ALLOWED_WAITS} (a number, not text).")
            try:
                values[key] = parse_seconds(seconds, what=f"{where}.{key}")
            except InvalidRequest as error:
                raise InvalidConfig(str(error)) from None
        if (action := data.get("burst_reclaim_action")) is not None:
            if action not in BURST_ACTIONS:
                raise InvalidConfig(
                    f"{where}.burst_reclaim_action {shorten(action)} is not allowed; use one of {', '.join(map(repr, BURST_ACTIONS))}."
                )
            values["burst_reclaim_action"] = action
        return cls(**values)


@dataclass(frozen=True)
class Quota:
    """The limits in force for one user, each with the entry it came from (for messages)."""

    user: str
    limits: dict[str, tuple[Any, str]] = field(default_factory=dict)  # limit -> (value, "group students")
    unlimited: bool = False

    def get(self, name: str) -> tuple[Any, str]:
        return self.limits.get(name, (None, ""))

    def describe(self) -> list[dict[str, Any]]:
        """Each limit in force, for the user it applies to (the broker's ``info``; ``%vgpu`` and
        ``jupyter vgpu status`` show them through :func:`jupyter_vgpu.slices.terms.policy_rows`):
        its name, its value as JSON, its words and where it came from."""
        return [
            {"name": name, "value": _as_json(value), "text": _limit_text(name, value), "from": source}
            for name in LIMITS
            if (found := self.limits.get(name)) is not None
            for value, source in [found]
        ]


def _as_json(value: Any) -> Any:
    if isinstance(value, Share):
        return {"memory": value.memory} if value.memory is not None else {"gpus": value.gpus}
    return list(value) if isinstance(value, tuple) else value


def _limit_text(name: str, value: Any) -> str:
    if name == "max_limit":
        return "no bursting above a request" if value.no_burst else value.describe()
    if isinstance(value, Share):
        return value.describe()
    if name == "gpus":
        return ", ".join(value)
    if name in ("max_wait", "idle_reclaim_after", "burst_reclaim_notice"):
        return seconds_words(float(value))
    if name == "burst_reclaim_action":
        return f"{value}: {action_words(value)}"
    return str(value)


def _generosity(name: str, value: Any) -> tuple[float, ...]:
    if name in ("max_per_kernel", "max_total", "max_limit"):  # max_limit 0 (no bursting): the least
        share: Share = value
        return (1.0, float(share.memory)) if share.memory is not None else (0.0, float(share.gpus or 0.0))
    if name == "gpus":
        return (float(len(value)),)
    if name == "idle_reclaim_after":  # longer is more generous, and 0 (never) the most
        return (math.inf if value == 0 else float(value),)
    if name == "burst_reclaim_action":  # the less it gives back, the more generous
        return (-float(action_gives_back(value)),)
    return (float(value),)


@dataclass(frozen=True)
class Policy:
    """A parsed policy: who gets how much, and who administers."""

    default: Limits = field(default_factory=Limits)
    groups: dict[str, Limits] = field(default_factory=dict)
    users: dict[str, Limits] = field(default_factory=dict)
    admin_users: frozenset[str] = frozenset()
    admin_groups: frozenset[str] = frozenset()
    source: str = "no policy"
    #: The site's Prometheus for every user's cluster view ("": none).
    prometheus_url: str = ""

    @classmethod
    def parse(cls, data: Any, *, source: str) -> Policy:
        """Validate a policy mapping; every mistake raises :class:`InvalidConfig` naming it."""
        if not isinstance(data, dict):
            raise InvalidConfig(f"The policy in {source} must be a mapping with default, groups, users; got {type(data).__name__}.")
        known = {"default", "groups", "users", "admin_users", "admin_groups", "prometheus_url"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidConfig(f"The policy in {source} has an unknown key {shorten(unknown[0])}; use {', '.join(sorted(known))}.")
        try:
            default = Limits.parse(data.get("default") or {}, where="default")
            tables: dict[str, dict[str, Limits]] = {}
            for kind in ("groups", "users"):
                table = data.get(kind) or {}
                if not isinstance(table, dict):
                    raise InvalidConfig(f"{kind} must map names to limits, not {shorten(table)}.")
                tables[kind] = {str(name): Limits.parse(entry, where=f"{kind}.{name}") for name, entry in table.items()}
            admins = {}
            for kind in ("admin_users", "admin_groups"):
                names = data.get(kind) or []
                if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
                    raise InvalidConfig(f"{kind} must be a list of names, not {shorten(names)}.")
                admins[kind] = frozenset(str(n) for n in names)
            url = data.get("prometheus_url") or ""
            if not isinstance(url, str):
                raise InvalidConfig(f"prometheus_url must be the URL of the site's Prometheus, not {shorten(url)}.")
            url = check_url(url, "prometheus_url") if url.strip() else ""
        except InvalidConfig as error:
            raise InvalidConfig(f"The policy in {source} is not valid: {error}") from None
        return cls(default, tables["groups"], tables["users"], admins["admin_users"], admins["admin_groups"], source, url)

    def quota(self, user: str, groups: list[str]) -> Quota:
        """The limits for ``user`` (member of ``groups``), each with where it came from."""
        if user == "root":
            return Quota(user, unlimited=True)
        limits: dict[str, tuple[Any, str]] = {}
        own = self.users.get(user, Limits())
        for name in LIMITS:
            value = getattr(own, name)
            if value is not None:
                limits[name] = (value, f"user {user}")
                continue
            candidates = [(getattr(self.groups[g], name), g) for g in groups if g in self.groups]
            candidates = [(v, g) for v, g in candidates if v is not None]
            if candidates:
                value, group = max(candidates, key=lambda c: _generosity(name, c[0]))
                limits[name] = (value, f"group {group}")
            elif (value := getattr(self.default, name)) is not None:
                limits[name] = (value, "default")
            elif name in BROKER_DEFAULTS:
                limits[name] = (BROKER_DEFAULTS[name], "the broker's default")
        return Quota(user, limits)

    def is_admin(self, user: str, groups: list[str]) -> bool:
        return user == "root" or user in self.admin_users or bool(self.admin_groups.intersection(groups))


class VGPUPolicy(Configurable):
    """GPU quotas of a JupyterHub node (``c.VGPUPolicy.*`` in ``jupyterhub_config.py``).

    The broker enforces them; each mapping is ``{name: {limit: value}}`` with the limits
    ``max_per_kernel``, ``max_total`` (GPU-fractions such as "1/4" or 2, or memory such as "8GiB"),
    ``max_limit`` (the largest limit one kernel may burst to, written the same way; 0 or false: no
    bursting), ``max_slices`` (slices at once), ``gpus`` (allowed GPU indices or UUIDs), ``max_wait``
    (seconds in line; 3600 where none is set), ``max_waiting`` (places in line at once; 8 where
    none is set), ``idle_reclaim_after`` (seconds), ``burst_reclaim_notice`` (seconds) and
    ``burst_reclaim_action`` ("restart", "interrupt", "shutdown" or "warn").
    """

    default = Dict(help="Limits for every user without an entry of their own or of a group.").tag(config=True)
    groups = Dict(help="Limits per Unix group; a user in several groups gets the most generous value of each limit.").tag(config=True)
    users = Dict(help="Limits per user; they win over the user's groups and the default.").tag(config=True)
    admin_users = List(Unicode(), help="Users who may see and release every slice (root always may).").tag(config=True)
    admin_groups = List(Unicode(), help="Unix groups whose members may see and release every slice.").tag(config=True)
    prometheus_url = Unicode(
        "",
        help="""The site's Prometheus (http://prometheus:9090), which scrapes every node's exporter or
        broker: every user's server reads its cluster view from it where the user's own
        c.VGPUServer.prometheus_url is not set (docs/cluster.md).""",
    ).tag(config=True)
    policy_file = Unicode(
        "",
        help="""A JSON file with the same keys (default, groups, users, admin_users, admin_groups);
        when set, it replaces the values above. The broker re-reads it when it changes.""",
    ).tag(config=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "default": dict(self.default),
            "groups": dict(self.groups),
            "users": dict(self.users),
            "admin_users": list(self.admin_users),
            "admin_groups": list(self.admin_groups),
            "prometheus_url": self.prometheus_url,
        }


def load_policy(path: str | Path) -> Policy:
    """Read a policy from a JSON file or from the ``c.VGPUPolicy`` section of a Python config
    file (``jupyterhub_config.py``). Raises :class:`InvalidConfig` with the file and the mistake."""
    source = Path(path)
    if not source.is_file():
        raise InvalidConfig(f"The policy file {source} does not exist.")
    if source.suffix == ".py":
        try:
            config: Config = PyFileConfigLoader(source.name, path=str(source.parent)).load_config()
        except Exception as error:
            raise InvalidConfig(f"The config file {source} cannot be read: {error}") from None
        settings = VGPUPolicy(config=config)
        if settings.policy_file:
            linked = Path(settings.policy_file)
            return load_policy(linked if linked.is_absolute() else source.parent / linked)
        return Policy.parse(settings.as_dict(), source=str(source))
    try:
        try:
            data = json.loads(source.read_text())
        except OSError as error:
            raise InvalidConfig(f"The policy file {source} cannot be read: {error.strerror or error}.") from None
        except ValueError as error:
            raise InvalidConfig(f"The policy file {source} is not valid JSON: {error}.") from None
        return Policy.parse(data, source=str(source))
    except RecursionError:  # a file of nested brackets: refused like any bad file, never a traceback
        raise InvalidConfig(
            f"The policy file {source} nests lists or mappings too deeply to be read; a policy is a mapping of "
            "default, groups and users, each a mapping of limits."
        ) from None
