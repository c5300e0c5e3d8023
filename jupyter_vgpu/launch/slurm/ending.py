"""Kernel jobs this process shut down whose cancel Slurm has not confirmed (issue 39, S2).

A kernel shut down while slurmctld does not answer leaves its job holding its GPU shards. Such a
job is handed over here (:func:`hand_over`): its cancel is retried every :data:`RETRY` seconds,
on a thread of its own, until Slurm confirms the job holds nothing (ended, or forgotten), and
until then the views list it as ending (:func:`ending_text`) with a cancel that tries again at once
(:func:`cancel_now`). Nothing here runs on a GPU node.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import client as slurmctl

#: Seconds between two tries of a cancel Slurm has not confirmed.
RETRY = 5.0

log = logging.getLogger("jupyter_vgpu.slurm")


@dataclass
class Ending:
    """A job whose kernel was shut down and whose cancel Slurm has not confirmed."""

    job_id: str
    kernel_id: str
    record: Any  # the kernel's SlurmKernel (what the views show of it)
    since: float
    problem: str
    tries: int = 1


#: Jobs being ended, by job id.
ENDING: dict[str, Ending] = {}
_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None


def ending_text(ending: Ending) -> str:
    """What the views say of an ending job, in one sentence."""
    return (
        f"Shut down {time.time() - ending.since:.0f} s ago, but Slurm has not confirmed the cancel of job {ending.job_id} "
        f"({ending.problem}); it still holds its GPU share, and its cancel is tried again every {RETRY:g} s."
    )


def hand_over(job_id: str, kernel_id: str, record: Any, problem: str) -> None:
    """Retry the cancel of ``job_id`` until Slurm confirms it, listing it as ending until then."""
    global _thread
    with _lock:
        ENDING[job_id] = Ending(job_id, kernel_id, record, time.time(), problem.rstrip("."))
        if _thread is None:
            _thread = threading.Thread(target=_retry, args=(dict(os.environ),), name="jupyter-vgpu-slurm-cancel", daemon=True)
            _thread.start()


def try_cancel(job_id: str, env: dict[str, str]) -> bool:
    """Cancel ``job_id`` once more; whether Slurm confirms it ended (it then leaves :data:`ENDING`).
    A controller that still does not answer is noted on the job, never raised."""
    ending = ENDING.get(job_id)
    try:
        slurmctl.cancel(job_id, env, confirm=True)
        gone = slurmctl.gone(job_id, env)
    except slurmctl.SlurmDown as error:
        if ending is not None:
            ending.problem, ending.tries = str(error).rstrip("."), ending.tries + 1
        return False
    if gone:
        with _lock:
            if ENDING.pop(job_id, None) is not None:
                log.info("jupyter-vgpu: Slurm confirms the cancel of job %s after %d tries.", job_id, ending.tries if ending else 1)
    return gone


def cancel_now(job_id: str, env: dict[str, str]) -> bool | None:
    """The user's cancel of an ending job: tried at once. None when ``job_id`` is not ending here;
    else whether Slurm confirmed it."""
    if job_id not in ENDING:
        return None
    return try_cancel(job_id, env)


def _retry(env: dict[str, str]) -> None:
    global _thread
    while True:
        with _lock:
            jobs = list(ENDING)
            if not jobs:
                _thread = None  # the next hand-over starts another
                return
        for job_id in jobs:
            try_cancel(job_id, env)
        _wake.wait(RETRY)
        _wake.clear()
