"""``%vgpu``: what this kernel has and uses, a live view, and resizing."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display

from ..errors import VGPUError
from ..units import shorten
from .state import establish

if TYPE_CHECKING:
    from .state import KernelState

SUBCOMMANDS = ("status", "devices", "monitor", "resize", "help")


@magics_class
class VGPUMagics(Magics):
    """The ``%vgpu`` line magic; errors a user causes show as one line, never a traceback."""

    @line_magic
    def vgpu(self, line: str) -> None:
        """Show this kernel's GPU slice; `%vgpu help` lists the commands."""
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"%vgpu {shorten(line)} cannot be read ({error}); `%vgpu help` lists the commands.") from None
        command, args = (words[0], words[1:]) if words else ("status", [])
        try:
            run(self.shell, establish(), command, args)
        except VGPUError as error:
            raise UsageError(str(error)) from None


def run(shell: Any, state: KernelState, command: str, args: list[str]) -> None:
    """Carry out one ``%vgpu`` command (what each needs is imported here, at the first ``%vgpu``:
    the extension registers this magic at every sliced kernel's start)."""
    from . import hooks
    from .status import devices_sheet, help_sheet, status_sheet
    from .usage import measure

    if command == "status":
        _no_arguments(command, args)
        hooks.refresh()
        usage = measure(state, with_occupancy=not state.facts.sliced)  # a plain kernel: what others reserved
        state.write_report()
        show(status_sheet(state, usage))
    elif command == "devices":
        _no_arguments(command, args)
        show(devices_sheet(state, measure(state, with_occupancy=True)))
    elif command == "monitor":
        _monitor(shell, state, args)
    elif command == "resize":
        from .resize import resize  # needs the ledger: imported when used

        print(resize(state, " ".join(args)))
    elif command == "help":
        show(help_sheet())
    else:
        raise UsageError(f"%vgpu {shorten(command)} is not a command; use one of: {', '.join(SUBCOMMANDS)} (`%vgpu help`).")


def show(value: Any) -> None:
    """Display ``value`` with every representation it has (text/plain and text/html)."""
    display(value)  # type: ignore[no-untyped-call]


def _no_arguments(command: str, args: list[str]) -> None:
    if args:
        raise UsageError(f"%vgpu {command} takes no arguments (got {shorten(' '.join(args))}).")


def _monitor(shell: Any, state: KernelState, args: list[str]) -> None:
    from . import monitor

    if args == ["stop"]:
        count = monitor.stop_all()
        print(f"Stopped {count} live view{'' if count == 1 else 's'}." if count else "No live view is running.")
        return
    options = {"--interval": monitor.DEFAULT_INTERVAL, "--minutes": monitor.DEFAULT_MINUTES}
    rest = list(args)
    while rest:
        name = rest.pop(0)
        key, _, inline = name.partition("=")
        if key not in options:
            raise UsageError(f"%vgpu monitor does not know {shorten(name)}; use stop, --interval SECONDS or --minutes MINUTES.")
        text = inline or (rest.pop(0) if rest else "")
        try:
            options[key] = float(text)
        except ValueError:
            raise UsageError(f"%vgpu monitor {key} {shorten(text)} is not a number.") from None
    view = monitor.start(shell, state, interval=options["--interval"], minutes=options["--minutes"])
    show(view.widget)
