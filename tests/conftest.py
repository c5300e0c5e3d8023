"""Fixtures shared by every test: an isolated ledger on simulated GPUs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def vgpu_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """One simulated 16 GiB GPU and a fresh ledger, inherited by every child process."""
    env = {
        "JUPYTER_VGPU_SIMULATE": "1x16GiB",
        "JUPYTER_VGPU_LEDGER": str(tmp_path / "vgpu" / "ledger.sqlite"),
        # SIGABRT makes a hung command print every thread's stack (jupyter_process.abort_for_stacks)
        "PYTHONFAULTHANDLER": "1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("JUPYTER_VGPU_CONTEXT_ALLOWANCE", raising=False)
    monkeypatch.delenv("JUPYTER_VGPU_BROKER", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)  # messages on one line each, as in a log
    yield env


@pytest.fixture
def simulation_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vgpu_env: dict[str, str]) -> Any:
    """A JSON simulation the test can rewrite (devices and per-pid usage); returns a writer."""
    path = tmp_path / "gpus.json"

    def write(devices: list[dict[str, Any]] | None = None, processes: list[dict[str, Any]] | None = None) -> Path:
        devices = devices or [{"name": "Simulated A100", "memory": "16GiB"}]
        path.write_text(json.dumps({"devices": devices, "processes": processes or []}))
        return path

    write()
    monkeypatch.setenv("JUPYTER_VGPU_SIMULATE", str(path))
    vgpu_env["JUPYTER_VGPU_SIMULATE"] = str(path)
    return write


def _users_own_ledger() -> Path:
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "vgpu" / "ledger.sqlite"


#: The ledger of the user who runs the suite, found before the suite moves Jupyter's folders.
USERS_OWN_LEDGER = _users_own_ledger()
#: Jupyter's and IPython's own folders, which the suite gives each process of it (each xdist worker)
#: under a temporary folder of its own: a test that leaves them as they are shares them with no
#: other worker, and never reaches the user's.
JUPYTER_FOLDERS = {
    "JUPYTER_CONFIG_DIR": "config",
    "JUPYTER_DATA_DIR": "data",
    "JUPYTER_RUNTIME_DIR": "runtime",
    "IPYTHONDIR": "ipython",
}


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a non-interactive shell (`cmd &`, some CI runners)
    # inherits SIGINT ignored, and so would every process the tests start: a test's Ctrl+C would do
    # nothing to its command (run --wait waited on). The tests start their processes as a terminal
    # does, with the default dispositions.
    _restore(_signal_state())
    _note_who_ignores()
    home = Path(tempfile.mkdtemp(prefix=f"vgpu-tests-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-"))
    config.stash[_HOME] = home
    for variable, folder in JUPYTER_FOLDERS.items():
        os.environ[variable] = str(home / folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _TIMINGS
    if _TIMINGS is not None:
        _TIMINGS.close()
        _TIMINGS = None
    home = config.stash.get(_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


_HOME = pytest.StashKey[Path]()


@pytest.fixture(autouse=True, scope="session")
def users_own_ledger_is_never_touched() -> Iterator[None]:
    """Every test works in its own ledger; none may create or change the real one."""
    real = USERS_OWN_LEDGER

    def state() -> tuple[float, int] | None:
        try:
            st = real.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime, st.st_size)

    before = state()
    yield
    assert state() == before, f"the test session wrote to the user's own ledger {real}"


#: Signals whose disposition and mask every process a test starts inherits (an ignored or blocked
#: SIGINT makes a later test's Ctrl+C do nothing).
_INHERITED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _signal_state() -> tuple[list[str], set[int]]:
    ignored = [signal.Signals(s).name for s in _INHERITED_SIGNALS if signal.getsignal(s) == signal.SIG_IGN]
    return ignored, set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(_INHERITED_SIGNALS)


#: Who last set one of them to SIG_IGN in this process (a stack), for the failure that says so.
_IGNORED_BY: dict[str, str] = {}


def _note_who_ignores() -> None:
    """Wrap :func:`signal.signal` so that whoever makes this process ignore one of the inherited
    signals is known by its stack (a module fixture or code between tests is no test's own)."""
    import traceback

    original = signal.signal

    def noting(signum: Any, handler: Any) -> Any:
        if handler == signal.SIG_IGN and signum in _INHERITED_SIGNALS:
            _IGNORED_BY[signal.Signals(signum).name] = "".join(traceback.format_stack(limit=25)[:-1])
        return original(signum, handler)

    signal.signal = noting  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def leaves_signals_as_they_were() -> Iterator[None]:
    """No test runs in, or leaves, a worker that ignores or blocks a signal: the processes of
    every later test on that worker would inherit it (a Ctrl+C test's command then ignored it)."""
    clean: tuple[list[str], set[int]] = ([], set())
    before = _signal_state()
    if before != clean:
        _restore(before)
        pytest.fail(f"this worker was left ignoring {before[0]} and blocking {sorted(before[1])} before this test; {_who(before)}")
    yield
    after = _signal_state()
    if after != clean:
        _restore(after)
        pytest.fail(f"the test left its worker ignoring {after[0]} and blocking {sorted(after[1])}; {_who(after)}")


def _restore(state: tuple[list[str], set[int]]) -> None:
    for name in state[0]:
        signal.signal(signal.Signals[name], signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, state[1])


def _who(state: tuple[list[str], set[int]]) -> str:
    said = [f"{name} was ignored by:\n{_IGNORED_BY.pop(name, '(unknown)')}" for name in state[0]]
    return "\n".join(said) or "blocked by code that did not say"


# -- The suite in parallel: pytest-xdist's `--dist loadgroup` (./scripts/test) ----------------------

#: Session fixtures that hold something of the whole machine, and the group their tests share so
#: that they run one after another on one worker: the Slurm cluster (its daemons), the Unix users
#: (useradd, and the mode of the folders above the interpreter).
MACHINE_WIDE = {"slurm_cluster": "slurm", "system_users": "unix-users"}
#: Modules whose tests share a machine-wide resource that no fixture names: Ray (its clusters'
#: processes and ports), and the tests that build and install the wheel (pip's and yarn's caches;
#: two at once would only take each other's two cores).
MODULE_GROUPS = {"tests/test_ray.py": "ray", "tests/install/test_wheel.py": "install"}


def _group(item: pytest.Item) -> str | None:
    """The xdist group of a test: a machine-wide resource's, else its module's where it shares a
    module-scoped fixture (one lab, one browser, one kernel per module), else none (any worker)."""
    for fixture, group in MACHINE_WIDE.items():
        if fixture in item.fixturenames:
            return group
    module = item.nodeid.split("::", 1)[0]
    if module in MODULE_GROUPS:
        return MODULE_GROUPS[module]
    definitions = getattr(item, "_fixtureinfo", None)
    for name in item.fixturenames:
        defs = definitions.name2fixturedefs.get(name) if definitions is not None else None
        if defs and defs[-1].scope in ("module", "package", "class"):
            return module
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test's group (see :func:`_group`), and run the groups that take longest first,
    so that the last minutes of a run are many short tests spread over every worker."""
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group or item.nodeid, []).append(index)
    weight = {key: sum(_weight(items[i]) for i in indexes) for key, indexes in groups.items()}
    order = sorted(groups, key=lambda key: -weight[key])  # stable: a group keeps its tests' order
    items[:] = [items[i] for key in order for i in groups[key]]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadgroup scheduler, which lives through a worker's crash (a test past its timeout
    ends its worker): as it stands, the controller dies with KeyError when it hands work to the
    replacement before that has collected, and the run's report is lost (pytest-xdist#1189, #1362)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class CrashTolerantScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _reschedule(self, node: Any) -> None:
            if node in self.registered_collections:  # not a replacement still collecting: it gets
                super()._reschedule(node)  # its work once it has (DSession schedules again then)

    return CrashTolerantScheduling(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a worker of `--dist loadgroup`, a group that does not hold would run one module's lab or
    the Slurm cluster on every worker at once: say so rather than run like that. (pytest 9.2 broke
    xdist's grouping silently: pytest-xdist#1386.)"""
    if not getattr(session.config.option, "loadgroup", False):
        return
    loose = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if loose:
        raise pytest.UsageError(f"pytest-xdist did not group {loose[0]} (and {len(loose) - 1} more): see pyproject's pytest pin")


def _weight(item: pytest.Item) -> float:
    """A rough cost of a test, to start the long groups first: what it starts."""
    names = set(item.fixturenames)
    marks = {mark.name for mark in item.iter_markers()}
    if {"slurm_cluster", "system_users"} & names or {"install", "browser", "tensorflow", "hub"} & marks:
        return 5.0
    if "slow" in marks:
        return 3.0
    return 1.0


# -- Where the time goes: `--timings FILE` (.ci/run) --------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--timings",
        metavar="FILE",
        help="write each test's start, end, worker and outcome to FILE (JSON lines), for .ci/timings",
    )


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase of a test, on the process that writes the run's report (xdist's controller)."""
    if _TIMINGS is None:
        return
    test = report.nodeid
    if "@" in test.rsplit("]", 1)[-1]:  # xdist's group, after the test's own id
        test = test.rsplit("@", 1)[0]
    now = time.time()  # a crashed worker's report has no times of its own
    row = {
        "test": test,
        "when": report.when,
        "start": report.start or now,
        "stop": report.stop or now,
        "outcome": report.outcome,
        "worker": getattr(report, "node", None) and report.node.gateway.id,  # type: ignore[attr-defined]
    }
    _TIMINGS.write(json.dumps(row) + "\n")
    _TIMINGS.flush()


_TIMINGS: Any = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _TIMINGS
    path = session.config.getoption("--timings")
    if path and not hasattr(session.config, "workerinput"):  # not on an xdist worker
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _TIMINGS = open(path, "w")  # noqa: SIM115  # closed at the session's end
