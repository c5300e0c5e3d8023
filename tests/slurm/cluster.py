"""A real Slurm cluster on loopback for the tests: munged with its own key and socket, slurmctld
and two slurmd (``slurmd -N node1``, ``-N node2``) on this one machine, all under a private folder.

Each node has two GPUs split into 64 shards (``Gres=gpu:2,shard:64``: 32 per GPU). The GPUs are
character devices made with ``mknod`` (Slurm sets no ``CUDA_VISIBLE_DEVICES`` for plain files);
nothing drives them: jobs see simulated GPUs through ``JUPYTER_VGPU_SIMULATE``, which ``srun`` and
``sbatch`` pass on from the submitting environment. Debian 12 ships Slurm 22.05 (``slurmctld``,
``slurmd``, ``slurm-client``, ``munge``); ``scripts/test`` installs them when it runs as root.

Every client call has a timeout: Slurm's commands wait for a controller that is down.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

NODES = ("node1", "node2")
GPUS_PER_NODE = 2
SHARDS_PER_NODE = 64
SHARDS_PER_GPU = SHARDS_PER_NODE // GPUS_PER_NODE
CPUS_PER_NODE = 16
#: What jobs see: two simulated 16 GiB GPUs on each node (NVML lists every GPU of the node).
SIMULATE = f"{GPUS_PER_NODE}x16GiB"
DAEMONS = ("munged", "slurmctld", "slurmd")
#: Set to a port number to put the cluster's three ports there (base, base+1, base+2) instead
#: of ports the system hands out.
PORTS_VARIABLE = "JUPYTER_VGPU_TEST_SLURM_PORT"


class ClusterError(RuntimeError):
    """The cluster did not come up (the message carries the daemons' logs)."""


def missing() -> str | None:
    """Why this machine cannot run the test cluster, or None when it can."""
    absent = [name for name in ("munged", "slurmctld", "slurmd", "srun", "scontrol") if not _which(name)]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): apt-get install slurmctld slurmd slurm-client munge"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root (slurmd must start jobs), and this is not root"
    with tempfile.TemporaryDirectory() as folder:
        try:
            os.mknod(os.path.join(folder, "nvidia0"), 0o600 | 0o020000, os.makedev(195, 0))
        except OSError as error:
            return f"cannot make GPU character devices here (mknod: {error.strerror})"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def spare_port(offset: int = 10) -> int:
    """A port for a server a test starts beside the cluster (in the cluster's range when
    ``JUPYTER_VGPU_TEST_SLURM_PORT`` fixes one: that plus ``offset``)."""
    return _ports(offset + 1)[offset]


def _ports(count: int) -> list[int]:
    base = os.environ.get(PORTS_VARIABLE, "").strip()
    if base:
        return [int(base) + i for i in range(count)]
    from jupyter_process import free_port

    return [free_port() for _ in range(count)]


class SlurmCluster:
    """munged, slurmctld and two slurmd under ``folder``; :meth:`start` brings them up and waits
    until both nodes are idle, :meth:`stop` ends every process it started."""

    nodes = NODES
    gpus_per_node = GPUS_PER_NODE
    shards_per_gpu = SHARDS_PER_GPU
    simulate = SIMULATE

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / "slurm.conf"
        self.munge_socket = folder / "munge" / "munge.socket"
        self.controller_port, *self.node_ports = _ports(1 + len(NODES))
        self._munged: subprocess.Popen[bytes] | None = None
        self._controller: subprocess.Popen[bytes] | None = None
        self._slurmd: dict[str, subprocess.Popen[bytes]] = {}
        # What every client command and (srun passing it on) every job gets: this cluster, the
        # simulated GPUs, and a TMPDIR of its own, so that a job's node-local ledger
        # ($TMPDIR/jupyter-vgpu-<job id>) is not a previous cluster's job of the same id.
        self.env: dict[str, str] = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_", "JUPYTER_VGPU_"))},
            "SLURM_CONF": str(self.conf),
            "JUPYTER_VGPU_SIMULATE": SIMULATE,
            "TMPDIR": str(folder / "tmp"),
        }
        self.env["PATH"] = self.env.get("PATH", "") + ":/usr/sbin:/sbin"

    # -- configuration ------------------------------------------------------------------------

    def _write_config(self) -> None:
        for sub in ("munge", "state", "log", "tmp"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder / "munge", 0o755)  # munged wants its socket reachable
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        host = socket.gethostname()
        lines = [
            "ClusterName=vgputest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.controller_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.folder / 'state'}",
            f"SlurmdSpoolDir={self.folder / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.folder / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.folder / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.folder / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "SwitchType=switch/none",
            "LaunchParameters=use_interactive_step",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu,shard",
            "ReturnToService=2",
            "MessageTimeout=5",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            "KillWait=2",
            # Slurm's default, as sites have it: an ended job's state and reason stay readable for
            # 300 s (at 2 s a loaded machine read "no longer remembers why" for a cancelled job).
            "MinJobAge=300",
        ]
        gres = ["AutoDetect=off"]
        for name, port in zip(NODES, self.node_ports):
            lines.append(
                f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS_PER_NODE} "
                f"Gres=gpu:{GPUS_PER_NODE},shard:{SHARDS_PER_NODE} State=UNKNOWN"
            )
            devices = self.folder / "dev" / name
            devices.mkdir(parents=True, exist_ok=True)
            for index in range(GPUS_PER_NODE):
                path = devices / f"nvidia{index}"
                if not path.exists():
                    os.mknod(path, 0o600 | 0o020000, os.makedev(195, index))
            gres.append(f"NodeName={name} Name=gpu File={devices}/nvidia[0-{GPUS_PER_NODE - 1}]")
            gres.append(f"NodeName={name} Name=shard Count={SHARDS_PER_NODE}")
        lines.append(f"PartitionName=gpu Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.folder / "gres.conf").write_text("\n".join(gres) + "\n")

    # -- daemons --------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        log = (self.folder / "log" / f"{name}.out").open("ab")
        with log:
            return subprocess.Popen(
                list(argv), env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def start(self, timeout: float = 30.0) -> float:
        """Start every daemon and wait until both nodes are idle; returns the seconds it took."""
        began = time.monotonic()
        self._write_config()
        munge = self.folder / "munge"
        self._munged = self._spawn(
            "munged",
            [_which("munged") or "munged", "--foreground", "--force", f"--socket={self.munge_socket}",
             f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
             f"--log-file={self.folder / 'log' / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
        )  # fmt: skip
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged did not open its socket")
        self.start_controller(timeout=timeout)
        for name in NODES:
            (self.folder / "spool" / name).mkdir(parents=True, exist_ok=True)
            self._slurmd[name] = self._spawn(f"slurmd-{name}", [_which("slurmd") or "slurmd", "-D", "-N", name])
        self.wait_idle(timeout=max(1.0, timeout - (time.monotonic() - began)))
        return time.monotonic() - began

    def start_controller(self, timeout: float = 30.0) -> None:
        """Start slurmctld (again, after :meth:`stop_controller`) and wait until it answers."""
        if self._controller is not None and self._controller.poll() is None:
            return
        self._controller = self._spawn("slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-i"])
        self._wait(self._controller_answers, timeout, "slurmctld does not answer")
        if self._slurmd:
            # A restarted controller knows its nodes as "unknown" until they register again, which
            # they do at once when told to reconfigure (else at the next ping, tens of seconds on).
            self.run("scontrol", "reconfigure", timeout=10)
            self._wait(lambda: "unknown" not in " ".join(self.node_states().values()), timeout, "the nodes did not register")

    def stop_controller(self, timeout: float = 10.0) -> None:
        """End slurmctld, so that client commands find no controller (they then wait: use timeouts)."""
        if self._controller is not None:
            _end(self._controller, timeout)
            self._controller = None

    def _controller_answers(self) -> bool:
        if self._controller is not None and self._controller.poll() is not None:
            raise ClusterError(f"slurmctld exited with status {self._controller.returncode}\n{self.logs()}")
        try:
            return self.run("scontrol", "ping", timeout=5, check=False).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def node_states(self) -> dict[str, str]:
        """Each node's state as ``sinfo`` reports it (``idle``, ``mixed``, ``down*``...)."""
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N %T", timeout=10).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until every node is idle (no job, registered with slurmctld)."""

        def idle() -> bool:
            for name, process in self._slurmd.items():
                if process.poll() is not None:
                    raise ClusterError(f"slurmd -N {name} exited with status {process.returncode}\n{self.logs()}")
            states = self.node_states()
            return all(states.get(name) == "idle" for name in NODES)

        self._wait(idle, timeout, "the nodes did not become idle")

    def _wait(self, ready: object, timeout: float, what: str) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} within {timeout:.0f} s\n{self.logs()}")
            time.sleep(0.05)

    def logs(self, tail: int = 30) -> str:
        """The last lines of every daemon's log, to explain a failure."""
        parts = []
        for path in sorted((self.folder / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # -- clients --------------------------------------------------------------------------------

    def run(
        self, *args: str, timeout: float = 30.0, check: bool = True, env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """A Slurm client command (``srun``, ``scontrol``, ``squeue``...) against this cluster;
        raises subprocess.TimeoutExpired after ``timeout`` seconds, and CalledProcessError on a
        failure when ``check``. It runs in the cluster's folder, so a batch job's output file
        (``slurm-<id>.out``) lands there, never in the source tree."""
        return subprocess.run(
            list(args), env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout,
            check=check, input=input, stdin=None if input is not None else subprocess.DEVNULL, cwd=self.folder,
        )  # fmt: skip

    def jobs(self) -> list[str]:
        """The ids of every job slurmctld still knows as pending or running."""
        out = self.run("squeue", "--noheader", "--format=%i", timeout=10).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def cancel_all(self, timeout: float = 20.0) -> None:
        """Cancel every job and wait until ``squeue`` lists none and both nodes are idle."""
        self.run("scancel", "--full", "--user=root", timeout=10, check=False)
        deadline = time.monotonic() + timeout
        while self.jobs():
            if time.monotonic() > deadline:
                raise ClusterError(f"jobs left after scancel within {timeout:.0f} s: {', '.join(self.jobs())}")
            time.sleep(0.1)
        self.wait_idle(timeout=max(1.0, deadline - time.monotonic()))

    # -- teardown -------------------------------------------------------------------------------

    def stop(self) -> None:
        """End every job and daemon this cluster started, and whatever they left running."""
        if self._controller is not None and self._controller.poll() is None:
            try:
                self.run("scancel", "--full", "--user=root", timeout=5, check=False)
            except subprocess.TimeoutExpired:
                pass
        for process in [*self._slurmd.values(), self._controller]:
            if process is not None:
                _end(process, 10)
        for pid in self._leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._munged is not None:
            _end(self._munged, 10)
        self._slurmd.clear()
        self._controller = self._munged = None

    def _leftovers(self) -> list[int]:
        """Every process still running with this cluster's ``SLURM_CONF``: slurmstepd (slurmd forks it
        and it outlives slurmd) and the jobs' own processes (srun passes the environment on)."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found


def _end(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout``, to the process and its session."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            process.wait(5)
    _kill_group(process.pid)  # what it forked into its session and left behind


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
