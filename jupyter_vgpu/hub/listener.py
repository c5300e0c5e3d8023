"""The broker's Unix socket: one JSON request per line, the caller known from ``SO_PEERCRED``.

The socket is world-writable (0666, in a directory only root may change): the peer credential
check, not the file mode, is the boundary.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import socketserver
import struct
import threading
from pathlib import Path

from ..errors import InvalidRequest, LedgerError
from ..slices.remote import MAX_MESSAGE, error_to_wire
from .broker import Broker, PolicySource, log


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process that connected (Linux ``SO_PEERCRED``)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class _Connection(socketserver.StreamRequestHandler):
    server: BrokerServer

    def handle(self) -> None:
        try:
            caller = self.server.broker.caller(*peer_credentials(self.connection))
        except OSError as error:
            log.warning("jupyter-vgpu broker: cannot read peer credentials: %s", error)
            return
        while True:
            line = self.rfile.readline(MAX_MESSAGE)
            if not line:
                return
            try:
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("not a mapping")
            except ValueError:
                answer = error_to_wire(InvalidRequest("The broker reads one JSON object per line."))
            else:
                answer = self.server.broker.handle(caller, message)
            try:
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()
            except OSError:
                return


class BrokerServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The broker's Unix socket: world-writable, one thread per connection."""

    daemon_threads = True

    def __init__(self, path: str | Path, broker: Broker) -> None:
        self.broker = broker
        self.path = Path(path)
        _prepare_socket_path(self.path)
        super().__init__(str(self.path), _Connection)
        os.chmod(self.path, 0o666)

    def server_close(self) -> None:
        super().server_close()
        try:
            self.path.unlink()
        except OSError:
            pass


def _prepare_socket_path(path: Path) -> None:
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o755)
        os.chmod(path.parent, 0o755)
    if path.exists() or path.is_socket():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # left behind by a broker that died
        else:
            raise LedgerError(f"Another jupyter-vgpu broker already listens on {path}.")
        finally:
            probe.close()


def install_reload_signal(source: PolicySource) -> None:
    """SIGHUP re-reads the policy (the main thread only; later handlers stay as they are)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, lambda signum, frame: source.reload())
