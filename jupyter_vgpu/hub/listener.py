"""The broker's Unix socket: one JSON request per line, the caller known from ``SO_PEERCRED``.

The socket is world-writable (0666, in a directory only root may change): the peer credential
check, not the file mode, is the boundary. Every caller may be hostile, so everything is
bounded: connections in all (:data:`MAX_CONNECTIONS`) and per user (:data:`MAX_PER_USER`), the
size of a request (:data:`MAX_REQUEST`), how long a connection may sit idle (:data:`IDLE_SECONDS`)
and how many requests one connection may send (:data:`MAX_REQUESTS`). Connections are accepted
until the backlog is empty at every wake-up and each user may open :data:`RATE_PER_SECOND` a
second (a burst of :data:`RATE_BURST`), so one user's flood is turned away as fast as it comes
and costs the others latency, not failures (clients wait for room in the backlog).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import socketserver
import stat
import threading
import time
from pathlib import Path

from ..errors import InvalidRequest, LedgerError, VGPUError
from ..ledger.wire import error_to_wire, peer_credentials
from .broker import Broker, PolicySource, log

#: Connections served at once, in all and per user; one more is answered with an error and closed.
MAX_CONNECTIONS = 64
MAX_PER_USER = 16
#: The longest request line (a request is a few hundred bytes; labels are bounded too).
MAX_REQUEST = 64 * 1024
#: Seconds a connection may wait between two requests (clients send theirs at once).
IDLE_SECONDS = 10.0
#: Requests per connection (clients send one).
MAX_REQUESTS = 100
#: Connections a user may open per second on average, and in a burst; more are closed at once,
#: before a thread is started for them, so one user's flood costs the others only latency.
#: (A server polls a few times a second; a kernel waiting in line four times.)
RATE_PER_SECOND = 100.0
RATE_BURST = 200.0
#: The socket's listen backlog: connections the kernel queues while the broker accepts.
BACKLOG = 1024
#: A user's connections turned away are logged at most once in this many seconds.
REFUSALS_SAID_EVERY = 60.0


class _Connection(socketserver.StreamRequestHandler):
    server: BrokerServer
    timeout = IDLE_SECONDS

    def handle(self) -> None:
        try:
            caller = self.server.broker.caller(*peer_credentials(self.connection))
        except OSError as error:
            log.warning("jupyter-vgpu broker: cannot read peer credentials: %s", error)
            return
        for _ in range(MAX_REQUESTS):
            try:
                line = self.rfile.readline(MAX_REQUEST + 1)
            except OSError:  # idle too long, or the peer went away
                return
            if not line:
                return
            if len(line) > MAX_REQUEST:
                self._answer(error_to_wire(InvalidRequest(f"A request is at most {MAX_REQUEST} bytes.")))
                return
            try:
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("not a mapping")
            except (ValueError, RecursionError):
                answer = error_to_wire(InvalidRequest("The broker reads one JSON object per line."))
            else:
                answer = self.server.broker.handle(caller, message)
            if not self._answer(answer):
                return

    def _answer(self, answer: dict[str, object]) -> bool:
        try:
            self.wfile.write(json.dumps(answer).encode() + b"\n")
            self.wfile.flush()
        except OSError:
            return False
        return True


class BrokerServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The broker's Unix socket: world-writable, one thread per connection."""

    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, path: str | Path, broker: Broker) -> None:
        self.broker = broker
        self.path = Path(path)
        self._open: dict[socket.socket, int] = {}  # connection -> its user's uid
        self._counts_lock = threading.Lock()
        self._buckets: dict[int, tuple[float, float]] = {}  # uid -> (tokens, when)
        self._refusals_said: dict[int, float] = {}  # uid -> when a refusal of theirs was last logged
        _prepare_socket_path(self.path)
        # The socket is made world-writable as it is made (umask), never by a chmod on its path
        # afterwards, which would follow a link swapped in between. The folder is the broker's alone.
        umask = os.umask(0o111)
        try:
            super().__init__(str(self.path), _Connection)
        finally:
            os.umask(umask)
        self.socket.setblocking(False)  # accept until the backlog is empty (see _handle_request_noblock)

    def _handle_request_noblock(self) -> None:
        """Accept every waiting connection at each wake-up, not one (socketserver's way): a flood
        of connections is turned away (rate, caps) as fast as it comes, so the backlog has room for
        everyone else."""
        for _ in range(BACKLOG):
            try:
                request, client_address = self.get_request()
            except OSError:
                return  # nothing more waits
            request.setblocking(True)
            if self.verify_request(request, client_address):
                try:
                    self.process_request(request, client_address)
                except Exception:
                    self.handle_error(request, client_address)
                    self.shutdown_request(request)
                except BaseException:
                    self.shutdown_request(request)
                    raise
            else:
                self.shutdown_request(request)

    def verify_request(self, request: object, client_address: object) -> bool:
        """Serve a connection only while its user, and everyone, stay under the caps."""
        assert isinstance(request, socket.socket)
        try:
            _, uid, _ = peer_credentials(request)
        except OSError:
            return False
        with self._counts_lock:
            if not self._within_rate(uid):
                why = (
                    f"The jupyter-vgpu broker takes at most {RATE_PER_SECOND:g} connections a second from one user; "
                    "slow down and try again."
                )
            else:
                total = len(self._open)
                mine = sum(1 for owner in self._open.values() if owner == uid)
                if total < MAX_CONNECTIONS and (uid == 0 or mine < MAX_PER_USER):
                    self._open[request] = uid
                    return True
                why = (
                    f"The jupyter-vgpu broker serves at most {MAX_PER_USER} connections per user and {MAX_CONNECTIONS} "
                    "in all; close some and try again."
                )
        try:
            request.setblocking(False)  # never wait on a caller that does not read
            request.send(json.dumps(error_to_wire(VGPUError(why))).encode() + b"\n")
        except OSError:
            pass
        now = time.monotonic()
        if now - self._refusals_said.get(uid, -REFUSALS_SAID_EVERY) >= REFUSALS_SAID_EVERY:  # said, not flooded
            self._refusals_said[uid] = now
            log.warning("jupyter-vgpu broker: turned away a connection of uid %s: %s", uid, why)
        return False

    def _within_rate(self, uid: int) -> bool:
        """Take one token from ``uid``'s bucket (root is not limited); under ``_counts_lock``."""
        if uid == 0:
            return True
        now = time.monotonic()
        tokens, then = self._buckets.get(uid, (RATE_BURST, now))
        tokens = min(RATE_BURST, tokens + (now - then) * RATE_PER_SECOND)
        if tokens < 1.0:
            self._buckets[uid] = (tokens, now)
            return False
        self._buckets[uid] = (tokens - 1.0, now)
        if len(self._buckets) > 4096:  # bounded: forget full buckets
            self._buckets = {u: b for u, b in self._buckets.items() if b[0] < RATE_BURST}
        return True

    def shutdown_request(self, request: object) -> None:
        with self._counts_lock:
            self._open.pop(request, None)  # type: ignore[call-overload]
        super().shutdown_request(request)  # type: ignore[arg-type]

    def server_close(self) -> None:
        super().server_close()
        try:
            self.path.unlink()
        except OSError:
            pass


def _prepare_socket_path(path: Path) -> None:
    """Make sure only the broker's user can change what the socket's path names: its folder is a
    real folder of that user that nobody else can write to (else another user could swap the
    socket for a link, or listen there first). A socket left by a broker that died is removed; nothing
    else at the path ever is (a typo in ``--socket`` must not delete a file)."""
    if not os.path.lexists(path.parent):
        path.parent.mkdir(parents=True, mode=0o755)
        os.chmod(path.parent, 0o755)
    st = os.lstat(path.parent)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        what = (
            "a link" if stat.S_ISLNK(st.st_mode)
            else f"owned by uid {st.st_uid}" if st.st_uid != os.geteuid()
            else f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        )  # fmt: skip
        raise LedgerError(
            f"The broker's socket folder {path.parent} is {what}; use a folder of uid {os.geteuid()} that nobody else "
            "can write to (the default /run/jupyter-vgpu is made so)."
        )
    if os.path.lexists(path):
        mode = os.lstat(path).st_mode
        if not stat.S_ISSOCK(mode):
            what = "a folder" if stat.S_ISDIR(mode) else "a link" if stat.S_ISLNK(mode) else "a file that is not a socket"
            raise LedgerError(
                f"The broker's socket path {path} is {what}, which the broker never removes; give the path of the socket "
                "to make, e.g. /run/jupyter-vgpu/broker.sock."
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            pass  # left behind by a broker that died
        else:
            raise LedgerError(f"Another jupyter-vgpu broker already listens on {path}.")
        finally:
            probe.close()
        path.unlink()


def install_reload_signal(source: PolicySource) -> None:
    """SIGHUP re-reads the policy (the main thread only; later handlers stay as they are)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, lambda signum, frame: source.reload())
