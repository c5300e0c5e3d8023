"""Whether the client of a request that is still being answered has gone: a kernel start waiting
in line for its slice stops waiting when the page that asked for it reloaded or closed (the browser
closes the connection of a request it abandons, and so do the proxies in front of a Jupyter server:
JupyterHub's, nginx by default). Tornado does not notice while the handler runs and reads nothing,
so the socket is asked directly: a peek at a copy of its descriptor (plain or TLS alike) that
reads nothing and reads the end of the stream only once the peer closed it."""

from __future__ import annotations

import socket
from typing import Any


def peer_gone(connection: Any) -> bool:
    """True once the client of ``connection`` (a tornado ``HTTP1Connection``) closed it; False while
    it is open, or where this cannot be told (no socket of ours: a test's client, HTTP/2)."""
    stream = getattr(connection, "stream", None)
    if stream is None:
        return False
    if stream.closed():
        return True
    sock = getattr(stream, "socket", None)
    if sock is None:
        return False
    try:
        fileno = sock.fileno()
    except OSError:
        return True
    if fileno < 0:
        return True  # closed
    try:
        with socket.fromfd(fileno, sock.family, sock.type) as copy:
            return copy.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing sent: the client still waits
    except OSError:
        return True  # reset by the peer
