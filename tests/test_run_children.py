"""`jupyter vgpu run` keeps its slice while any process its command started still runs (issue 30).

A process left in the background (`sleep 100 &`) or a daemon that forked twice and left the session
keeps the slice's environment and limits: freeing the slice under it would let the next request get
memory it still uses. `run` is the subreaper of its command's tree, says once which processes hold
the slice, waits for them, and ends them all on Ctrl+C; it exits with the command's own code. A
process that another service starts is not its to wait for. Real processes, real ledger; every wait
is bounded by a timeout, never timed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hub.conftest import wait_until  # type: ignore[import-not-found]
from jupyter_process import abort_for_stacks

CLI = [sys.executable, "-m", "jupyter_vgpu.cli"]


def slices() -> list[dict[str, object]]:
    """The slices as another process sees them: `jupyter vgpu status --json`."""
    done = subprocess.run([*CLI, "status", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["slices"])


@pytest.fixture
def started(tmp_path: Path, vgpu_env: dict[str, str]) -> Iterator[list[subprocess.Popen[str]]]:
    """`run` processes a test starts (each in a session of its own, as a terminal's job is), ended
    with whatever they left if the test fails."""
    runs: list[subprocess.Popen[str]] = []
    yield runs
    for run in runs:
        if run.poll() is None:
            for process in psutil.Process(run.pid).children(recursive=True):
                process.kill()
            run.kill()
            run.wait(30)


def start_run(started: list[subprocess.Popen[str]], tmp_path: Path, *command: str) -> subprocess.Popen[str]:
    err = (tmp_path / "run.err").open("w")
    run = subprocess.Popen(
        [*CLI, "run", "-p", "0.5", "--", *command], stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
    )
    started.append(run)
    return run


def said(tmp_path: Path) -> str:
    return (tmp_path / "run.err").read_text()


def test_a_background_process_keeps_the_slice_until_it_ends(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    gate = tmp_path / "gate"
    script = f"(while [ ! -e {gate} ]; do sleep 0.05; done) & echo $!; exit 3"
    run = start_run(started, tmp_path, "bash", "-c", script)
    assert run.stdout is not None
    background = int(run.stdout.readline())
    wait_until(lambda: "so its slice stays reserved" in said(tmp_path), timeout=60, what="run saying what holds the slice")
    text = said(tmp_path)  # the background loop, and the sleep it may be in at the moment
    assert "jupyter vgpu: the command exited (3); " in text and f"still running (pid {background} bash" in text, text
    assert run.poll() is None and psutil.pid_exists(background)
    held = slices()
    assert len(held) == 1 and held[0]["fraction"] == 0.5  # another process sees the slice still reserved
    gate.touch()
    assert run.wait(60) == 3  # the command's own exit code
    assert slices() == []


DAEMON = textwrap.dedent(
    """
    import os, sys, time
    gate, where = sys.argv[1], sys.argv[2]
    if os.fork():
        sys.exit(0)
    os.setsid()  # a session of its own: out of the terminal's reach
    if os.fork():
        os._exit(0)
    with open(where + ".tmp", "w") as out:
        out.write(str(os.getpid()))
    os.replace(where + ".tmp", where)  # whole or not at all
    while not os.path.exists(gate):
        time.sleep(0.05)
    """
)


def test_a_daemon_that_forked_twice_and_left_the_session_keeps_the_slice_too(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    gate, where = tmp_path / "gate", tmp_path / "daemon.pid"
    run = start_run(started, tmp_path, sys.executable, "-c", DAEMON, str(gate), str(where))
    try:
        wait_until(lambda: "so its slice stays reserved" in said(tmp_path), timeout=60, what="run waiting for the daemon")
    except AssertionError:  # once in a loaded run of the whole suite: what run said, and where it was
        alive = run.poll() is None
        if alive:
            abort_for_stacks(run)  # its threads' stacks, in run.err
        raise AssertionError(f"run {'was still running' if alive else f'exited {run.returncode}'} and said:\n{said(tmp_path)}") from None
    # run speaks once the command has ended and a process of it lives on: the daemon may not have
    # written its pid yet, nor its parent (the first fork) have ended (run 9 of issue 45 read the
    # file before it was there). Wait for both: run adopts the daemon when its parent ends.
    wait_until(where.exists, timeout=60, what="the daemon's pid")
    daemon = psutil.Process(int(where.read_text()))
    wait_until(lambda: daemon.ppid() in (run.pid, 1), timeout=60, what="the daemon's parent (the first fork) ended")
    assert os.getsid(daemon.pid) != os.getsid(run.pid) and daemon.ppid() == run.pid, daemon.ppid()  # adopted by run
    assert len(slices()) == 1
    gate.touch()
    assert run.wait(60) == 0
    assert slices() == []


def test_ctrl_c_ends_every_process_the_command_left_and_frees_the_slice(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    run = start_run(started, tmp_path, "bash", "-c", "sleep 300 & echo $!; exit 0")
    assert run.stdout is not None
    background = int(run.stdout.readline())
    wait_until(lambda: "Ctrl+C ends it" in said(tmp_path), timeout=60, what="run waiting for the sleep")
    os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl+C does: the whole foreground group
    assert run.wait(60) == 0  # the command's own exit code
    wait_until(lambda: not psutil.pid_exists(background), timeout=30, what="the sleep ended")
    assert slices() == []


def test_sigint_to_run_while_the_command_runs_ends_the_command_and_what_it_started(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    run = start_run(started, tmp_path, "bash", "-c", "sleep 300 & echo $!; sleep 300")
    assert run.stdout is not None
    background = int(run.stdout.readline())
    wait_until(lambda: len(slices()) == 1, timeout=60, what="the slice reserved")
    os.kill(run.pid, signal.SIGINT)  # `kill -INT`, no terminal: run passes it on
    assert run.wait(60) == 128 + signal.SIGINT  # bash ended by the interrupt, as a shell reports it
    wait_until(lambda: not psutil.pid_exists(background), timeout=30, what="the background sleep ended")
    assert slices() == []


SERVICE = textwrap.dedent(
    """
    import subprocess, sys
    with open(sys.argv[1]) as asked:
        asked.readline()
    sleeper = subprocess.Popen(["sleep", "300"])
    print(sleeper.pid, flush=True)
    sleeper.wait()
    """
)


def test_a_process_another_service_starts_is_not_waited_for(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    fifo = tmp_path / "ask"
    os.mkfifo(fifo)
    service = subprocess.Popen([sys.executable, "-c", SERVICE, str(fifo)], stdout=subprocess.PIPE, text=True)
    try:
        run = start_run(started, tmp_path, "sh", "-c", f"echo go > {fifo}")
        assert run.wait(60) == 0 and "still running" not in said(tmp_path)
        assert service.stdout is not None
        sleeper = int(service.stdout.readline())
        assert psutil.pid_exists(sleeper)  # the service's, not the command's: run did not wait for it
        assert slices() == []
    finally:
        for process in psutil.Process(service.pid).children(recursive=True):
            process.kill()
        service.kill()
        service.wait(30)


def test_help_says_the_slice_is_kept_while_any_process_the_command_started_runs() -> None:
    done = subprocess.run([*CLI, "run", "--help"], capture_output=True, text=True, timeout=60)
    text = " ".join(done.stdout.split())
    assert "as long as any process it started runs" in text and "Ctrl+C, SIGTERM and SIGHUP end them all" in text
