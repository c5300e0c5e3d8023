"""The watchdog's notices in the notebook: in the cell that runs, or at the start of the next one,
and a line under a cell the watchdog interrupted, so the user knows it was not them."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_vgpu.kernel.notices import notice_text
from jupyter_vgpu.slices import Slice
from jupyter_vgpu.slices.reports import add_notice

from .harness import Kernel, Outcome, Workspace, module_kernel

WATCHDOG_SAYS = "this kernel uses 5.0 GiB of its 4.0 GiB slice; the watchdog interrupts it in 2 s."


@pytest.fixture(scope="module")
def sliced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Slice, Kernel]]:
    yield from module_kernel(tmp_path_factory, "notices", fraction=0.25)


def notice(action: str, message: str, *, stage: str = "ahead") -> dict[str, Any]:
    """A notice as the server's watchdog writes it."""
    t = time.time()
    return {
        "id": f"{t}-{action}",
        "t": t,
        "action": action,
        "stage": stage,
        "message": message,
        "memory_used": 5 * 2**30,
        "memory_reserved": 4 * 2**30,
    }


def start_cell(kernel: Kernel, code: str) -> str:
    """Submit ``code`` (which prints ``started`` first) and wait until it runs."""
    msg_id = kernel.submit(f"print('started', flush=True)\n{code}")
    while True:
        try:
            msg = kernel.client.get_iopub_msg(timeout=60)
        except queue.Empty:
            raise AssertionError("the cell did not start") from None
        content = msg["content"]
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream" and "started" in content["text"]:
            return msg_id


def sleeping(pid: int) -> None:
    """Wait until the kernel's main thread sleeps in the cell's ``time.sleep`` (Linux says where a
    thread waits): an interrupt that lands between two instructions of a cell can meet a frame
    without a line number, whose traceback IPython cannot format (run 22: "assert
    isinstance(frame_info.lineno, int)" in ultratb, and no KeyboardInterrupt in the reply)."""
    wchan = Path(f"/proc/{pid}/task/{pid}/wchan")
    if not wchan.exists():
        return  # not Linux: the interrupt lands where it lands
    deadline = time.monotonic() + 60
    while "nanosleep" not in wchan.read_text():
        assert time.monotonic() < deadline, f"the kernel's main thread never slept (it waits in {wchan.read_text()!r})"
        time.sleep(0.02)


def post(sliced: tuple[Workspace, Slice, Kernel], action: str, message: str) -> None:
    workspace, slice_, _ = sliced
    add_notice(workspace.ledger_path, slice_.id, notice(action, message))


def test_a_warning_lands_in_the_running_cell(sliced: tuple[Workspace, Slice, Kernel]) -> None:
    kernel = sliced[2]
    msg_id = start_cell(kernel, "import time; time.sleep(3)")
    post(sliced, "warn", "this kernel uses 4.5 GiB of its 4.0 GiB slice.")
    outcome = kernel.collect(msg_id)
    assert outcome.ok
    assert "jupyter-vgpu: this kernel uses 4.5 GiB of its 4.0 GiB slice." in outcome.stderr


def test_an_interrupted_cell_says_the_watchdog_did_it(sliced: tuple[Workspace, Slice, Kernel]) -> None:
    kernel = sliced[2]
    assert kernel.manager is not None
    pid = kernel.pid
    msg_id = start_cell(kernel, "import time; time.sleep(60)")
    post(sliced, "interrupt", WATCHDOG_SAYS)
    sleeping(pid)
    kernel.manager.interrupt_kernel()
    outcome = kernel.collect(msg_id)
    assert outcome.error is not None and outcome.error["ename"] == "KeyboardInterrupt"
    assert f"jupyter-vgpu: the jupyter-vgpu watchdog interrupted this cell, not you: {WATCHDOG_SAYS}" in outcome.stderr


def test_an_interrupt_by_the_user_is_not_blamed_on_the_watchdog(sliced: tuple[Workspace, Slice, Kernel]) -> None:
    kernel = sliced[2]
    assert kernel.manager is not None
    pid = kernel.pid
    msg_id = start_cell(kernel, "import time; time.sleep(60)")
    sleeping(pid)
    kernel.manager.interrupt_kernel()
    outcome: Outcome = kernel.collect(msg_id)
    assert outcome.error is not None and outcome.error["ename"] == "KeyboardInterrupt"
    assert "watchdog" not in outcome.stderr


def test_a_notice_while_idle_shows_at_the_start_of_the_next_cell(sliced: tuple[Workspace, Slice, Kernel]) -> None:
    kernel = sliced[2]
    kernel.run("pass")
    post(sliced, "warn", "this kernel used 4.2 GiB of its 4.0 GiB slice while idle.")
    outcome = kernel.run("print('next cell')")
    assert outcome.stdout == "next cell\n"
    assert "jupyter-vgpu: this kernel used 4.2 GiB of its 4.0 GiB slice while idle. (at " in outcome.stderr
    assert kernel.run("print('and the one after')").stderr == ""  # shown once


def test_notices_from_before_the_kernel_started_are_not_shown(workspace: Workspace, start: Any) -> None:
    slice_ = workspace.reserve(0.25)
    old = notice("restart", "the watchdog restarts this kernel in 2 s.")
    add_notice(workspace.ledger_path, slice_.id, old)  # what the previous kernel process was told
    kernel = start(workspace.slice_env(slice_))
    assert "restarts this kernel" not in kernel.run("print('first cell')").stderr


class _Shell:
    """What the watcher needs of IPython's shell: its cell events."""

    def __init__(self) -> None:
        self.events = self
        self.hooks: dict[str, Any] = {}

    def register(self, event: str, callback: Any) -> None:
        self.hooks[event] = callback

    def unregister(self, event: str, callback: Any) -> None:
        self.hooks.pop(event, None)


def test_a_notice_left_while_the_extension_was_loading_shows_at_the_first_cell(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI of 3de1153: the server told a kernel whose extension was still loading (a loaded machine)
    and the notice was dropped as one from before the kernel. The process began before it."""
    from jupyter_vgpu.kernel import startup
    from jupyter_vgpu.kernel.notices import NoticeWatcher

    monkeypatch.setattr(startup, "STARTED", time.time())  # the kernel process's start-up hook ran
    slice_ = workspace.reserve(0.25)
    add_notice(workspace.ledger_path, slice_.id, notice("rebook", "the ledger was reset and this kernel's GPU slice could not be booked again."))
    time.sleep(0.05)
    watcher = NoticeWatcher(_Shell(), str(workspace.ledger_path), slice_.id)  # the extension loads after the notice
    watcher.pre_run_cell()
    watcher.post_run_cell()
    assert "jupyter-vgpu: the ledger was reset and this kernel's GPU slice could not be booked again." in capsys.readouterr().err


def test_a_notice_without_a_message_still_says_what_happens() -> None:
    bare = {"action": "shutdown", "memory_used": 5 * 2**30, "memory_reserved": 4 * 2**30}
    assert notice_text(bare) == (
        "jupyter-vgpu: this kernel uses 5.0 GiB of GPU memory; its slice reserves 4.0 GiB; the watchdog shuts it down."
    )


def test_unloading_the_extension_stops_the_notices(workspace: Workspace, start: Any) -> None:
    slice_ = workspace.reserve(0.25)
    kernel = start(workspace.slice_env(slice_))
    assert "jupyter-vgpu notices" in kernel.eval("[t.name for t in __import__('threading').enumerate()]")
    assert kernel.run("%unload_ext jupyter_vgpu").ok
    assert "jupyter-vgpu notices" not in kernel.eval("[t.name for t in __import__('threading').enumerate()]")
    add_notice(workspace.ledger_path, slice_.id, notice("warn", "this kernel uses 4.5 GiB of its 4.0 GiB slice."))
    assert "jupyter-vgpu" not in kernel.run("print('after')").stderr


FAKE_CUPY = """
import sys, types
class Pool:
    released = 0
    def free_bytes(self): return 0 if self.released else 512 * 2**20
    def free_all_blocks(self): self.released += 1
    def total_bytes(self): return 2**30
    def set_limit(self, size): pass
pool = Pool()
sys.modules["cupy"] = types.SimpleNamespace(get_default_memory_pool=lambda: pool, __name__="cupy")
"""


def test_a_burst_notice_has_the_kernel_release_its_frameworks_cache_at_once(sliced: tuple[Workspace, Slice, Kernel]) -> None:
    """The server asks a burst back: the kernel's notice thread has CuPy's pool give its free blocks
    back without waiting for a cell, then says so with the notice at the next cell (issue 42)."""
    kernel = sliced[2]
    assert kernel.run(FAKE_CUPY).ok
    post(sliced, "burst", "train.ipynb uses 2.0 GiB above its 4.0 GiB request while 1 waiting in line: give it back by 12:00:00.")
    time.sleep(3)  # the notice thread looks every 0.5 s; no cell runs meanwhile
    shown = kernel.run("print('next cell')").stderr
    assert "jupyter-vgpu: train.ipynb uses 2.0 GiB above its 4.0 GiB request" in shown
    assert "jupyter-vgpu: CuPy released its memory pool's free blocks (memory its arrays hold stays)." in shown
    assert kernel.eval("pool.released") == 1  # once
    kernel.run("del sys.modules['cupy']")
