"""The watchdog's notices, printed where the user is looking: the cell that is running.

The Jupyter server's watchdog writes what it says to a slice's holder into the slice's notices
file (:mod:`jupyter_vgpu.slices.reports`). One daemon thread per kernel checks that file's
modification time every :data:`POLL_SECONDS` (an ``os.stat``; the file is read only when it
changed) and prints each new notice on stderr:

- while a cell executes, at once: ipykernel 7 routes a background thread's prints to the
  cell that is executing, so the warning lands under the code that caused it;
- while the kernel is idle, at the start of the next cell, unless the notice is older than
  :data:`IDLE_KEEP_SECONDS` by then (an old warning about a past cell only confuses).

A ``burst`` notice (the server asks an elastic slice's burst back) also has the kernel release,
at once and from this thread, what its frameworks cache (``on_burst``), and says what it did.

When a cell ends with ``KeyboardInterrupt`` shortly after an ``interrupt`` notice, one more
line says the watchdog interrupted it, so the user knows it was not them.

The thread never raises and imports nothing beyond the standard library, the reports module
and the units module.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..slices.reports import notices_path, read_notices
from ..units import format_bytes

#: How often the thread looks at the notices file's modification time.
POLL_SECONDS = 0.5
#: A notice that arrived while the kernel was idle is shown at the next cell if younger than this.
IDLE_KEEP_SECONDS = 600.0
#: A cell interrupted this soon after an ``interrupt`` notice was interrupted by the watchdog.
INTERRUPT_WINDOW_SECONDS = 30.0
PREFIX = "jupyter-vgpu: "


#: What the watchdog does, for a notice that came without a message.
_ACTIONS = {
    "interrupt": "; the watchdog interrupts it.",
    "restart": "; the watchdog restarts it.",
    "shutdown": "; the watchdog shuts it down.",
}


def notice_text(notice: Mapping[str, Any]) -> str:
    """The line a user sees for one notice: ``jupyter-vgpu: <the watchdog's message>``."""
    message = str(notice.get("message") or "").strip()
    return PREFIX + (message or _fallback(notice))


def _fallback(notice: Mapping[str, Any]) -> str:
    used, reserved = notice.get("memory_used"), notice.get("memory_reserved")
    if isinstance(used, int) and isinstance(reserved, int):
        use = f"this kernel uses {format_bytes(used)} of GPU memory; its slice reserves {format_bytes(reserved)}"
    else:
        use = "this kernel uses more GPU memory than its slice reserves"
    return use + _ACTIONS.get(str(notice.get("action")), ".")


def interrupt_text(notice: Mapping[str, Any]) -> str:
    """The line under a cell the watchdog interrupted."""
    message = str(notice.get("message") or "").strip()
    reason = f": {message}" if message else "."
    return f"{PREFIX}the jupyter-vgpu watchdog interrupted this cell, not you{reason}"


def _time(notice: Mapping[str, Any]) -> float | None:
    value = notice.get("t")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class NoticeWatcher:
    """Prints a slice's watchdog notices into the running cell (or the next one)."""

    def __init__(
        self,
        shell: Any,
        ledger_path: str,
        slice_id: str,
        *,
        since: float | None = None,
        on_burst: Callable[[], list[str]] | None = None,
    ) -> None:
        self.shell = shell
        self.on_burst = on_burst  # releases the frameworks' caches; what each did, in words
        self.ledger_path = ledger_path
        self.slice_id = slice_id
        self.path = notices_path(ledger_path, slice_id)
        #: Notices from before this process began (a previous kernel process of the slice) are not
        #: shown; one that came while it was starting is (CI of 3de1153: a server told a kernel
        #: that was still loading this extension, and the notice was dropped as old).
        self.since = _process_started() if since is None else since
        self.executing = False
        self._seen: set[str] = set()
        self._held: list[Mapping[str, Any]] = []  # arrived while idle, for the next cell
        self._interrupts: list[Mapping[str, Any]] = []  # not yet explained
        self._version: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Hook the cell events and start the thread."""
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        self._thread = threading.Thread(target=self._watch, name="jupyter-vgpu notices", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Unhook the cell events and end the thread (it exits within one poll)."""
        self._stop.set()
        for event, callback in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(event, callback)
            except ValueError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * POLL_SECONDS)
        self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.check()
            except Exception:  # a notice is worth less than a kernel thread that keeps going
                pass

    # -- reading --------------------------------------------------------------------------
    def check(self) -> None:
        """Read the notices file if it changed; print new notices now or hold them for the next cell."""
        with self._lock:
            fresh = self._new_notices()
        asked = any(n.get("action") == "burst" and n.get("stage") == "ahead" for n in fresh)
        if asked and self.on_burst is not None:
            done = self.on_burst()
            said = "; ".join(done) if done else "no framework here caches GPU memory it could release"
            fresh.append({"t": time.time(), "action": "burst", "stage": "released", "message": f"{said}."})
        with self._lock:
            for notice in fresh:
                if notice.get("action") == "interrupt":
                    self._interrupts.append(notice)
                if self.executing:
                    _say(notice_text(notice))
                else:
                    self._held.append(notice)

    def _new_notices(self) -> list[Mapping[str, Any]]:
        try:
            stat = os.stat(self.path)
        except OSError:
            return []
        # The watchdog replaces the file: a new inode even where the clock is too coarse to tell.
        version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if version == self._version:
            return []
        notices = read_notices(self.ledger_path, self.slice_id)
        if notices or not stat.st_size:
            self._version = version  # a file that read as nothing is read again next time
        fresh: list[Mapping[str, Any]] = []
        for notice in notices:
            when = _time(notice)
            key = str(notice.get("id") or f"{when}-{notice.get('action')}")
            if when is None or when <= self.since or key in self._seen:
                continue
            self._seen.add(key)
            fresh.append(notice)
        return fresh

    # -- cell events ----------------------------------------------------------------------
    def pre_run_cell(self, info: Any = None) -> None:
        """Show what arrived while the kernel was idle (recent notices only), then mark the cell running."""
        try:
            self.check()
            with self._lock:
                held, self._held = self._held, []
                self.executing = True
            now = time.time()
            for notice in held:
                when = _time(notice) or 0.0
                if now - when < IDLE_KEEP_SECONDS:
                    _say(f"{notice_text(notice)} (at {time.strftime('%H:%M:%S', time.localtime(when))}, while no cell ran)")
        except Exception:
            self.executing = True

    def post_run_cell(self, result: Any = None) -> None:
        """Mark the kernel idle; explain an interrupt that came from the watchdog."""
        try:
            interrupted = isinstance(getattr(result, "error_in_exec", None), KeyboardInterrupt)
            if interrupted:
                self._version = None  # read the file whatever its stat says: an inode can be reused
                self.check()  # the interrupt may follow its notice faster than the thread looks
            now = time.time()
            with self._lock:
                self.executing = False
                recent = [n for n in self._interrupts if now - (_time(n) or 0.0) <= INTERRUPT_WINDOW_SECONDS]
                self._interrupts = [] if interrupted else recent  # each interrupt is explained once
            if interrupted and recent:
                _say(interrupt_text(recent[-1]))
        except Exception:
            self.executing = False


def _process_started() -> float:
    """When this process began: when its start-up hook ran, at interpreter start, in a process
    on a slice (when the extension loads where there is no hook: ``%load_ext`` by hand)."""
    from .startup import STARTED

    return STARTED


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:
        pass


_watcher: NoticeWatcher | None = None


def start(
    shell: Any, ledger_path: str | None, slice_id: str | None, on_burst: Callable[[], list[str]] | None = None
) -> NoticeWatcher | None:
    """Start watching the slice's notices (once per process); None without a slice or a ledger."""
    global _watcher
    if _watcher is not None:
        return _watcher
    if not ledger_path or not slice_id:
        return None
    _watcher = NoticeWatcher(shell, ledger_path, slice_id, on_burst=on_burst)
    _watcher.start()
    return _watcher


def say_at_first_cell(shell: Any, line: str) -> None:
    """Print ``line`` under the first cell that runs (what happened before this kernel started,
    such as the engine that ran the kernel it replaces ending it): once, then the hook is gone."""

    def once(info: Any = None) -> None:
        try:
            shell.events.unregister("pre_run_cell", once)
        except ValueError:
            pass
        _say(PREFIX + line)

    shell.events.register("pre_run_cell", once)


def stop() -> None:
    """Stop watching (``%unload_ext jupyter_vgpu``)."""
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None
