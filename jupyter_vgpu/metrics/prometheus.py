"""Asking a site's Prometheus: its HTTP API's instant queries (``/api/v1/query``), read with the
standard library, each failure one sentence that names the server.

Prometheus has no per-user access control: only the server (and an admin's commands) ask it, and
what they pass on to a user is theirs to filter (:mod:`.cluster`).
"""

from __future__ import annotations

import base64
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import InvalidConfig, VGPUError
from ..units import shorten

#: The site's Prometheus where no URL is given (``status --cluster``, c.VGPUServer.prometheus_url).
ENV_PROMETHEUS = "JUPYTER_VGPU_PROMETHEUS"
#: The longest reply read (a cluster of 64 nodes of 8 GPUs, every series, is a few hundred KiB).
MAX_REPLY = 64 * 1024 * 1024


class PrometheusUnavailable(VGPUError):
    """Prometheus could not be asked or did not answer: one sentence naming its URL (REST: 503)."""


@dataclass(frozen=True)
class Point:
    """One sample: a series' labels (``__name__`` among them), its time and its value."""

    labels: Mapping[str, str]
    at: float
    value: float

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


def check_url(url: str, setting: str) -> str:
    """``url`` without a trailing slash, or :class:`InvalidConfig` naming ``setting``."""
    text = url.strip().rstrip("/")
    try:
        parts = urllib.parse.urlsplit(text)
        _ = parts.port  # a port that is not a number raises
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query and not parts.fragment
    except ValueError:  # a port that is not a number
        ok = False
    if not ok:
        raise InvalidConfig(
            f"{setting} {shorten(url)} is not the URL of a Prometheus server: give http:// or https://, a host and "
            "optionally a port and path, e.g. http://prometheus:9090."
        )
    return text


class Prometheus:
    """A Prometheus server at ``url`` (``http://host:9090``, or with a path prefix; user and
    password in the URL are sent as basic authentication and never shown)."""

    def __init__(self, url: str, *, timeout: float = 10.0, setting: str = "the Prometheus URL") -> None:
        parts = urllib.parse.urlsplit(check_url(url, setting))
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port is not None:
            netloc += f":{parts.port}"
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))  # what messages name
        self._headers = {"Accept": "application/json"}
        if parts.username is not None:
            secret = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
        self.timeout = timeout

    def query(self, promql: str, *, at: float | None = None) -> list[Point]:
        """An instant query's samples: a vector's (at the evaluation time), or every raw sample of
        a range selector's matrix (each with its own time)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        points: list[Point] = []
        kind = data.get("resultType")
        try:
            for entry in data.get("result") or []:
                labels = _labels(entry)
                samples = [entry["value"]] if kind == "vector" else entry.get("values") or [] if kind == "matrix" else []
                for at_, text in samples:
                    value = _number(text)
                    if value == value:  # not NaN
                        points.append(Point(labels, float(at_), value))
        except (AttributeError, KeyError, TypeError, ValueError):
            raise PrometheusUnavailable(f"Prometheus at {self.url} answered a result that is not a vector or matrix of samples.") from None
        return points

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> list[tuple[Mapping[str, str], list[tuple[float, float]]]]:
        """A range query's series: each one's labels and its ``(time, value)`` points (NaN left out)."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = self._get("/api/v1/query_range", params)
        found: list[tuple[Mapping[str, str], list[tuple[float, float]]]] = []
        try:
            for entry in data.get("result") or []:
                labels = _labels(entry)
                points = [(float(at), value) for at, text in entry.get("values") or [] if (value := _number(text)) == value]
                found.append((labels, points))
        except (AttributeError, KeyError, TypeError, ValueError):
            raise PrometheusUnavailable(f"Prometheus at {self.url} answered a result that is not a matrix of samples.") from None
        return found

    def series(self, match: str, *, start: float, end: float) -> list[Mapping[str, str]]:
        """The label sets of every series ``match`` selects that has a sample between ``start`` and
        ``end``, from Prometheus's index alone (``/api/v1/series``: no sample is read)."""
        data = self._get("/api/v1/series", {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}, kind=list)
        if not all(isinstance(entry, dict) for entry in data):
            raise PrometheusUnavailable(f"Prometheus at {self.url} answered a list of series that are not label sets.")
        return list(data)

    def _get(self, path: str, params: Mapping[str, str], kind: type = dict) -> Any:
        request = urllib.request.Request(f"{self.url}{path}?{urllib.parse.urlencode(params)}", headers=self._headers)
        where = f"Prometheus at {self.url}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                body = reply.read(MAX_REPLY + 1)
        except urllib.error.HTTPError as error:
            detail = _error_of(error.read(4096)) or error.reason
            if error.code in (401, 403):
                raise PrometheusUnavailable(f"{where} refused the query ({error.code}): give a user and password it accepts in the URL.") from None
            raise PrometheusUnavailable(f"{where} answered {error.code}: {shorten(detail, 200)}.") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError):
                raise PrometheusUnavailable(f"{where} did not answer within {self.timeout:g} s.") from None
            text = getattr(reason, "strerror", None) or str(reason)
            raise PrometheusUnavailable(f"{where} cannot be reached: {str(text)[:200]}.") from None
        if len(body) > MAX_REPLY:
            raise PrometheusUnavailable(f"{where} answered more than {MAX_REPLY >> 20} MiB.")
        try:
            reply_json = orjson.loads(body)  # a third of the standard library's time on 64 nodes' series
        except ValueError:
            raise PrometheusUnavailable(f"{where} did not answer as Prometheus's HTTP API does (is it Prometheus?).") from None
        if not isinstance(reply_json, dict) or reply_json.get("status") != "success" or not isinstance(reply_json.get("data"), kind):
            problem: Any = reply_json.get("error") if isinstance(reply_json, dict) else None
            raise PrometheusUnavailable(f"{where} could not answer the query: {shorten(problem or reply_json, 200)}.")
        return reply_json["data"]


def _labels(entry: Mapping[str, Any]) -> Mapping[str, str]:
    """A series' labels as the API gives them: a JSON object of strings, used as it is (copying
    each made building 64 nodes' points four times slower)."""
    labels = entry.get("metric") or {}
    if not isinstance(labels, dict):
        raise TypeError("a series' labels are not an object")
    return labels


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _error_of(body: bytes) -> str | None:
    try:
        reply = json.loads(body)
    except ValueError:
        return None
    return str(reply.get("error")) if isinstance(reply, dict) and reply.get("error") else None


def string(text: str) -> str:
    """A PromQL string literal of ``text`` (JSON's escapes are PromQL's, as Go's)."""
    return json.dumps(text)
