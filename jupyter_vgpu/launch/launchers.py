"""Where a kernel runs: launchers as plug-ins (DESIGN.md, "launch").

A launcher says how a kernel that holds a slice lives (start, interrupt, kill, whether it lives,
where its reports come from) and how it is seen. The provisioner asks the kernelspec's ``launcher``
(``c.VGPUProvisioner.launcher``; default ``local``) for the first; the server's monitor asks the
launcher of a slice's kernel whether its holder lives and for its host process, instead of assuming
a process on this host. A slice's launcher travels with it as the label ``launcher`` (absent:
``local``).

How its kernels are seen, for a launcher whose kernels another engine places (``books_elsewhere``):
its kernels as rows (:meth:`Launcher.rows`, :class:`~.elsewhere.Elsewhere`: one shape and its own
words, which the REST API, the sidebar's card per launcher and ``jupyter vgpu status`` show as they
are), taking one out of the engine's line (:meth:`Launcher.leave_line`), what a restarted server
cleans up (:meth:`Launcher.clean_up`), its settings (under its own key in a kernelspec's provisioner
config, ``"slurm": {"args": [...], "restarts": 1}``: :meth:`Launcher.check_settings`, read back with
:meth:`Launcher.settings`, and ``jupyter vgpu kernelspec install --<option>``), and what the kernel
learns of where it runs (one variable, :data:`~.elsewhere.ENV_ELSEWHERE`). The server, the command line and the kernel name no
launcher: they ask the ones this process made (:func:`made`) or every one (:func:`every`).

``local`` is the kernel as a process of this host, the way jupyter_client's LocalProvisioner starts
it; ``slurm`` (:mod:`.slurm`, a folder) a Slurm job on a node Slurm picks. Adding a launcher is one
module or folder: a :class:`Launcher` subclass, registered under the entry point group
``jupyter_vgpu.launchers`` (name -> class), or in :data:`BUILT_IN`. Entry points are read only when a
name is not built in, so a kernel start with the default pays nothing for them.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..enforcement.base import ENV_ENTER
from ..errors import InvalidRequest
from ..units import shorten

if TYPE_CHECKING:
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    from ..slices import Slice, SliceRequest
    from .elsewhere import Elsewhere

#: The label that names a slice's launcher (absent: ``local``).
LABEL = "launcher"
DEFAULT = "local"
#: The entry point group of launchers that other packages add.
GROUP = "jupyter_vgpu.launchers"
#: The package (distribution) that gives the built-in launchers.
PACKAGE = "jupyter-vgpu"


@dataclass(frozen=True)
class LauncherSettings:
    """A kernel's settings of its launcher, as :meth:`Launcher.check_settings` checked them: its
    options (``args``), its whole-number settings (:attr:`Launcher.counts`; one left out is 0) and
    whatever more it takes (:attr:`Launcher.more_settings`), each parsed."""

    args: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    more: Mapping[str, Any] = field(default_factory=dict)

    def count(self, key: str) -> int:
        return int(self.counts.get(key, 0))


class Launcher(ABC):
    """How and where a kernel that holds a slice runs. Each coroutine gets the provisioner
    (jupyter_client's ``LocalProvisioner`` API) and does what the provisioner's method of that
    name does; ``local`` does exactly what jupyter_client does."""

    #: The name kernelspecs use (``"launcher": "local"``).
    name = ""
    #: What it is, in a few words (``jupyter vgpu kernelspec list`` and the refusal of a wrong name).
    description = ""
    #: Whether the kernel's GPU share is booked by another engine (Slurm) rather than the ledger of
    #: this host: then the provisioner reserves nothing here and asks :meth:`allocate` instead.
    books_elsewhere = False

    async def allocate(self, provisioner: LocalProvisioner, request: SliceRequest, env: dict[str, str]) -> None:
        """For a launcher that :attr:`books_elsewhere`: get the kernel's share from that engine
        before the connection file is written (``pre_launch``, at each start; a restart may keep
        what the first start got). Keeps what it learns in ``provisioner.launch_state``. A
        refusal is a VGPUError in one sentence."""
        return None

    async def cleanup(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        """After the kernel ended (the provisioner's ``cleanup``): give back what :meth:`allocate`
        got, unless the kernel is restarted. Also called when a start fails after allocating."""
        return None

    def command(self, cmd: list[str], env: Mapping[str, str]) -> list[str]:
        """The command that starts the kernel ``cmd`` with the slice's environment ``env``: where
        the slice's tier has a hold (``JUPYTER_VGPU_ENTER``), the kernel enters it before it is
        itself (``python -m jupyter_vgpu.cli.enter``, which ``exec``\\ s, keeping the pid), whatever
        its language and whether or not its Python has jupyter-vgpu."""
        if env.get(ENV_ENTER) and cmd:
            return [sys.executable, "-m", "jupyter_vgpu.cli.enter", "--", *cmd]
        return cmd

    @abstractmethod
    async def launch(self, provisioner: LocalProvisioner, cmd: list[str], **kwargs: Any) -> Any:
        """Start the kernel; returns its connection info (``launch_kernel``)."""

    @abstractmethod
    async def send_signal(self, provisioner: LocalProvisioner, signum: int) -> None:
        """Interrupt (or signal) the kernel."""

    @abstractmethod
    async def kill(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        """End the kernel at once (SIGKILL for a process; ``restart``: it is started again)."""

    @abstractmethod
    async def terminate(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        """Ask the kernel to end (SIGTERM for a process; ``restart``: it is started again)."""

    def has_kernel(self, provisioner: LocalProvisioner) -> bool:
        """Whether the provisioner has a kernel to poll and end (jupyter_client's ``has_process``):
        the process it started, here."""
        return provisioner.process is not None

    @abstractmethod
    async def poll(self, provisioner: LocalProvisioner) -> int | None:
        """None while the kernel runs, else its exit status."""

    @abstractmethod
    def alive(self, pid: int | None, start: float | None = None, stamp: str | None = None) -> bool:
        """Whether the kernel whose slice records holder ``pid`` (with its start and stamp) lives."""

    def host_process(self, pid: int | None) -> int | None:
        """The process on this host whose tree is the kernel (its CPU and memory), or None when the
        kernel does not run here."""
        return None

    # -- how its kernels are seen (no-ops for a launcher whose kernels hold this host's slices) --
    #: The card its kernels are shown in ("Slurm jobs"), and where a kernelspec of it puts its
    #: kernels, in words ("Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, ...").
    title = ""
    runs = ""

    def rows(self, env: Mapping[str, str]) -> list[Elsewhere]:
        """This process's kernels of this launcher that run elsewhere: running, pending in the
        engine's line, ending. Blocking (call it off the event loop). When the engine does not
        answer: :class:`~.elsewhere.Unlisted`, with the rows as last seen."""
        return []

    def user_rows(self, env: Mapping[str, str]) -> tuple[list[Elsewhere], str | None]:
        """For ``jupyter vgpu status``: this user's kernels of this launcher, wherever they were
        started from, and what kept them from being listed (one sentence), if anything."""
        return [], None

    async def leave_line(self, row_id: str, env: Mapping[str, str]) -> bool | None:
        """``DELETE /api/vgpu/waiting/<row_id>``: take a pending (or ending) kernel of this process
        out of the engine's line. True when done; None when the row id is not this launcher's kind.
        One sentence each: InvalidRequest for an id of its kind that is malformed, LeftLine for one
        that is no kernel of this process's in line (it may have started or left), another
        VGPUError when the engine does not answer."""
        return None

    def clean_up(self, env: Mapping[str, str]) -> list[str]:
        """When a server starts and a kernelspec uses this launcher: end what kernels of servers
        that have gone left behind (their jobs hold GPUs nobody uses). What it did, a sentence each."""
        return []

    #: ``jupyter vgpu kernelspec install --<option>`` installs kernelspecs of this launcher, with
    #: ``--<option>-arg ARG`` (once per ARG) for its options, kept in the kernelspec's config under
    #: the launcher's own key as ``args``; ``label`` is the word their display names carry ("Python 3
    #: (1/4 GPU, Slurm)"). Empty ``option``: not offered by that command.
    option = ""
    option_help = ""
    options_help = ""
    label = ""
    #: Its whole-number settings (key under its own key, help), each offered by that command as
    #: ``--<option>-<key with dashes> N``: ``restarts`` -> ``--slurm-restarts 2``.
    counts: tuple[tuple[str, str], ...] = ()
    #: Its other settings (key, what is allowed), each checked by :meth:`check_setting`.
    more_settings: tuple[tuple[str, str], ...] = ()

    def check_options(self, options: Sequence[str]) -> list[str]:
        """The launcher's options of a kernelspec (``jupyter vgpu kernelspec install``), checked;
        one sentence (InvalidRequest) for one not allowed. A launcher without options takes none."""
        if options:
            raise InvalidRequest(f"launcher {self.name} takes no options; got {shorten(options[0])}.")
        return []

    def check_setting(self, key: str, value: Any) -> Any:
        """One of :attr:`more_settings`, parsed; one sentence (InvalidRequest) for a value not allowed."""
        return value

    def check_settings(self, given: Mapping[str, Any]) -> LauncherSettings:
        """Its settings for one kernel (the provisioner asks at the kernel's start, before anything is
        reserved): the mapping under its own key (its name) in the kernelspec's provisioner config,
        over ``c.VGPUProvisioner.launcher_settings[<name>]``. ``args`` goes to :meth:`check_options`,
        each of :attr:`counts` must be a whole number, 0 or more, each of :attr:`more_settings` goes
        to :meth:`check_setting`; a key it does not take, or a value not allowed, is one sentence
        (InvalidRequest) naming it and what is allowed. Extend ``check_setting``, not this."""
        if not isinstance(given, Mapping):
            raise InvalidRequest(f"{self.name} {shorten(given)} is not allowed; use a mapping of its settings, such as {{}}.")
        counts, more = dict.fromkeys((k for k, _ in self.counts), 0), dict.fromkeys((k for k, _ in self.more_settings))
        allowed = self.setting_names()
        args: list[str] = []
        for key, value in given.items():
            if key == "args" and "args" in allowed:
                if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
                    raise InvalidRequest(f"{self.name}_args {shorten(value)} is not allowed; use a list of text, one {self.name} option each.")
                args = self.check_options(list(value))
            elif key in counts:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidRequest(f"{self.name}_{key} {shorten(value)} is not allowed; use a whole number, 0 or more.")
                counts[key] = value
            elif key in more:
                more[key] = self.check_setting(key, value)
            else:
                takes = f"use {', '.join(allowed)}" if allowed else "it takes none"
                raise InvalidRequest(f"launcher {self.name} has no setting {shorten(key)}; {takes}.")
        return LauncherSettings(tuple(args), counts, {k: v for k, v in more.items() if v is not None})

    def setting_names(self) -> list[str]:
        """The keys it takes under its own key: ``args`` where it takes options, its counts, the rest."""
        takes_args = type(self).check_options is not Launcher.check_options
        return [*(["args"] if takes_args else []), *(k for k, _ in self.counts), *(k for k, _ in self.more_settings)]

    def settings(self, provisioner: LocalProvisioner) -> LauncherSettings:
        """The settings :meth:`check_settings` gave for the kernel of ``provisioner``: how a launcher
        reads its options and counts (``self.settings(provisioner).count("restarts")``)."""
        found = getattr(provisioner, "launch_settings", None)
        return found if isinstance(found, LauncherSettings) else LauncherSettings()

    def report_folder(self, ledger_path: str | Path, labels: Mapping[str, str]) -> Path:
        """Where this host reads the reports (``slices.reports``) of the kernel whose slice has
        ``labels``: the ledger's reports folder for a kernel of this host; a launcher whose kernels
        run elsewhere has them write where this host can read (and says where here)."""
        from ..slices.reports import report_dir

        return report_dir(ledger_path)

    def node_jobs(self, node: str) -> Callable[[], Sequence[Slice]] | None:
        """Where this launcher's engine runs jobs on the node ``node`` whose processes book in
        ledgers of their own (a Slurm job's): what reads every slice booked there, which a node
        exporter calls at each reading beside its own ledger (``jupyter vgpu exporter --jobs``).
        None (the default): its kernels book in this host's ledger, or on no node of ours."""
        return None


class LocalLauncher(Launcher):
    """The kernel is a process of this host, started, signalled and watched as jupyter_client's
    LocalProvisioner does; the slice's holder is that process (pid plus start stamp)."""

    name = "local"
    description = "a process on this host"

    async def launch(self, provisioner: LocalProvisioner, cmd: list[str], **kwargs: Any) -> Any:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        return await LocalProvisioner.launch_kernel(provisioner, cmd, **kwargs)

    async def send_signal(self, provisioner: LocalProvisioner, signum: int) -> None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        await LocalProvisioner.send_signal(provisioner, signum)

    async def kill(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        await LocalProvisioner.kill(provisioner, restart=restart)

    async def terminate(self, provisioner: LocalProvisioner, restart: bool = False) -> None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        await LocalProvisioner.terminate(provisioner, restart=restart)

    async def poll(self, provisioner: LocalProvisioner) -> int | None:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner

        status: int | None = await LocalProvisioner.poll(provisioner)
        return status

    def alive(self, pid: int | None, start: float | None = None, stamp: str | None = None) -> bool:
        from ..slices.holders import process_alive

        return process_alive(pid, start, stamp)

    def host_process(self, pid: int | None) -> int | None:
        return pid


#: The launchers this package has, by name: a class, or where to import it from when first asked
#: for (so that a kernel start with ``local`` imports no other).
BUILT_IN: dict[str, type[Launcher] | str] = {"local": LocalLauncher, "slurm": "jupyter_vgpu.launch.slurm:SlurmLauncher"}
_made: dict[str, Launcher] = {}


def _plug_ins() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=GROUP) if ep.name not in BUILT_IN}


def known() -> list[str]:
    """Every launcher name this installation has, built-in ones first."""
    return [*BUILT_IN, *sorted(_plug_ins())]


def package_of(name: str) -> str:
    """The package (distribution) launcher ``name`` comes from: this one for a built-in launcher,
    else the one whose entry point registers it ("" when none does)."""
    if name in BUILT_IN:
        return PACKAGE
    dist = getattr(_plug_ins().get(name), "dist", None)
    return str(getattr(dist, "name", None) or "")


def launcher_named(name: Any) -> Launcher:
    """The launcher ``name``; a name that is none is refused in one sentence that lists the known ones."""
    text = DEFAULT if name is None else name
    if isinstance(text, str) and text in _made:
        return _made[text]
    cls: Any = BUILT_IN.get(text) if isinstance(text, str) else None
    if isinstance(cls, str):
        from importlib import import_module

        module, _, attribute = cls.partition(":")
        cls = getattr(import_module(module), attribute)
    if cls is None and isinstance(text, str):
        entry = _plug_ins().get(text)
        if entry is not None:
            try:
                cls = entry.load()
            except Exception as error:  # a broken plug-in: say which, never a traceback
                raise _not_loaded(text, f"{type(error).__name__}: {error}") from None
            if not (isinstance(cls, type) and issubclass(cls, Launcher)):
                raise _not_loaded(text, f"{entry.value} is no subclass of {Launcher.__module__}.Launcher")
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise InvalidRequest(f"launcher {shorten(name)} is not a launcher here; use one of: {', '.join(known())}.")
    try:
        made = _made[text] = cls()
    except TypeError as error:  # a plug-in that leaves part of the contract out
        raise _not_loaded(text, f"{type(error).__name__}: {error}") from None
    return made


def _not_loaded(name: str, why: str) -> InvalidRequest:
    """The refusal of a registered launcher that cannot be loaded: what went wrong, and the fix."""
    why = why if len(why) <= 160 else f"{why[:157]}..."
    return InvalidRequest(f"launcher {shorten(name)} could not be loaded ({why}); mend or uninstall the package that registers it.")


def made() -> list[Launcher]:
    """The launchers this process has made (its kernels' and its views'): the server asks these for
    its kernels that run elsewhere, and imports no other."""
    return list(_made.values())


def every() -> list[Launcher]:
    """Every launcher this installation has, made (``jupyter vgpu status`` asks each for the user's
    kernels); one that cannot be loaded is left out."""
    found = []
    for name in known():
        try:
            found.append(launcher_named(name))
        except InvalidRequest:
            continue
    return found


def launcher_of(labels: Mapping[str, str]) -> Launcher:
    """The launcher of a slice, by its label (a label that names no launcher here: ``local``'s
    rules, the only ones this host can apply)."""
    try:
        return launcher_named(labels.get(LABEL) or DEFAULT)
    except InvalidRequest:
        return launcher_named(DEFAULT)


def report_folder(ledger_path: str | Path, slice_: Any) -> Path | None:
    """Where the reports of ``slice_``'s kernel are read (its launcher's
    :meth:`Launcher.report_folder`); None for a slice of the default launcher, whose reports lie
    in the ledger's own folder (a kernel start that uses the default looks no launcher up)."""
    labels = getattr(slice_, "labels", None) or {}
    if (labels.get(LABEL) or DEFAULT) == DEFAULT:
        return None
    return launcher_of(labels).report_folder(ledger_path, labels)
