"""Serving a Prometheus page over HTTP: ``/metrics`` (prometheus_client's own WSGI app: the text
format, OpenMetrics when asked, gzip), a line at ``/`` that points there, 404 elsewhere.

A thread per request, so a slow scraper never holds another up; the figures come from a reading
taken beforehand, so a request only formats them.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from ..errors import InvalidRequest

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a line per scrape would flood the log
        return None


class MetricsServer:
    """Listens on ``address``:``port`` (0: any free port; :attr:`port` says which) and serves
    ``registry`` once :meth:`serve_forever` runs. Raises :class:`InvalidRequest`, one sentence,
    when the address cannot be listened on (the port is taken, the address is not this machine's):
    the sentence names the listener as ``who`` and its options as ``options`` + ``port``/``address``."""

    def __init__(
        self, registry: CollectorRegistry, address: str, port: int, *, title: str = "jupyter-vgpu",
        who: str = "The exporter", options: str = "--",
    ) -> None:  # fmt: skip
        metrics = make_wsgi_app(registry)
        index = f"{title}: Prometheus metrics at /metrics\n".encode()

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO") or "/"
            if path == "/metrics":
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            if path == "/":
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [index]
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"Not found: the metrics are at /metrics\n"]

        server_class = _Server6 if ":" in address else _Server
        try:
            self.httpd = make_server(address, port, app, server_class=server_class, handler_class=_QuietHandler)
        except OSError as error:
            raise InvalidRequest(_why_not(address, port, error, who, options)) from None
        self.address = address
        self.port = int(self.httpd.server_address[1])
        self._done = threading.Event()

    def url(self, host: str | None = None) -> str:
        """``http://host:port/metrics``: ``host`` or the address listened on (an IPv6 one in brackets)."""
        host = host or self.address
        return f"http://[{host}]:{self.port}/metrics" if ":" in host else f"http://{host}:{self.port}/metrics"

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (from another thread or a signal handler)."""
        try:
            self.httpd.serve_forever(poll_interval=0.5)
        finally:
            self.httpd.server_close()
            self._done.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever`; safe from a signal handler (it does not wait here)."""
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()

    def close(self) -> None:
        """Stop listening, when :meth:`serve_forever` never ran (it closes the socket when it ends)."""
        self.httpd.server_close()


def _why_not(address: str, port: int, error: OSError, who: str, options: str) -> str:
    where = f"port {port} on {address}"
    if error.errno == errno.EADDRINUSE:
        return f"{who} cannot listen on {where}: another program uses it; give another {options}port (0: any free port)."
    if error.errno == errno.EACCES:
        return f"{who} may not listen on {where}: ports below 1024 need root; give {options}port 1024 or above."
    if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(error, socket.gaierror):
        return f"{who} cannot listen on {where}: {address} is not an address of this machine; give {options}address 0.0.0.0 for all of them."
    return f"{who} cannot listen on {where}: {error.strerror or error}."
