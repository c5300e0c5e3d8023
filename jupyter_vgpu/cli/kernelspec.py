"""``jupyter vgpu kernelspec install | list | remove``: sliced kernels for the kernel picker.

A sliced kernelspec is a copy of an installed one (``python3`` by default: its argv, env,
metadata such as ``supported_encryption`` and logos are kept) whose metadata names the
``vgpu-provisioner`` with the slice to reserve, and whose display name says the slice:
"Python 3 (1/4 GPU)", "Python 3 (8 GiB GPU)", "Python 3 (2 GPUs)", and an elastic slice its limit:
"Python 3 (1/4 GPU, up to 1/2)".
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from ..errors import InvalidRequest
from ..launch.launchers import DEFAULT, Launcher, every, known, launcher_named, package_of
from ..launch.workarounds import PROVISIONER_NAME, names_vgpu_provisioner
from ..slices import SliceRequest
from ..slices.request import CLI_NAMES
from ..units import describe_fraction, exact_bytes, format_bytes, parse_seconds, shorten

DEFAULT_SET = ("1/4", "1/2", "1")


def add_parser(commands: Any, *, launchers: bool = True) -> None:
    parser = commands.add_parser("kernelspec", help="install, list or remove sliced kernelspecs")
    sub = parser.add_subparsers(dest="kernelspec_command", metavar="ACTION", parser_class=type(parser))

    install = sub.add_parser(
        "install",
        help="install a kernelspec that reserves a slice (or --defaults: 1/4, 1/2 and a full GPU)",
    )
    amount = install.add_mutually_exclusive_group()
    amount.add_argument("-p", "--fraction", metavar="FRACTION", help="share of each GPU: 0.25, 1/4 or 25%%")
    amount.add_argument("-m", "--memory", metavar="MEMORY", help="memory per GPU, e.g. 8GiB")
    amount.add_argument("--defaults", action="store_true", help="install 1/4, 1/2 and full-GPU kernels")
    install.add_argument(
        "--limit", metavar="LIMIT", help="elastic slice: what the kernel may burst to, of the request's kind (1/2, 8GiB); only the request is booked"
    )
    install.add_argument("-n", "--gpus", default="1", metavar="N", help="number of GPUs (default 1)")
    install.add_argument("--logical-devices", default="1", metavar="K", help="TensorFlow logical devices per GPU")
    install.add_argument("--wait", default="0", metavar="SECONDS", help="wait in line up to SECONDS at kernel start")
    install.add_argument("--source", default="python3", metavar="KERNEL", help="kernelspec to copy (default python3)")
    install.add_argument("--name", help="kernelspec name (default derived, e.g. python3-vgpu-1-4)")
    install.add_argument("--display-name", help='name in the kernel picker (default e.g. "Python 3 (1/4 GPU)")')
    install.add_argument("--replace", action="store_true", help="replace a kernelspec of the same name that differs")
    for launcher in offered_launchers() if launchers else ():  # a launcher's own option: its kernels run elsewhere
        install.add_argument(f"--{launcher.option}", action="store_true", dest=f"launcher_{launcher.name}", help=launcher.option_help)
        install.add_argument(
            f"--{launcher.option}-arg", action="append", default=[], metavar="ARG", dest=f"launcher_{launcher.name}_args",
            help=launcher.options_help,
        )  # fmt: skip
        for key, text in launcher.counts:
            install.add_argument(f"--{count_flag(launcher, key)}", metavar="N", dest=f"launcher_{launcher.name}__{key}", help=text)
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument("--sys-prefix", action="store_true", help="install into this Python environment")
    where.add_argument("--prefix", metavar="PREFIX", help="install under PREFIX/share/jupyter/kernels")
    install.set_defaults(handler=install_command)

    listing = sub.add_parser("list", help="list sliced kernelspecs and the launchers installed")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=list_command)

    remove = sub.add_parser("remove", help="remove sliced kernelspecs by name (or --all)")
    remove.add_argument("names", nargs="*", metavar="NAME")
    remove.add_argument("--all", action="store_true", help="remove every sliced kernelspec")
    remove.set_defaults(handler=remove_command)
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)


def _base_display(display_name: str) -> str:
    # "Python 3 (ipykernel)" -> "Python 3"
    return re.sub(r"\s*\([^)]*\)\s*$", "", display_name).strip() or display_name


def count_flag(launcher: Launcher, key: str) -> str:
    """The option that sets one of a launcher's counts: ``<option>-restarts`` for ``restarts``."""
    return f"{launcher.option}-{key.replace('_', '-')}"


def offered_launchers() -> list[Launcher]:
    """The launchers ``kernelspec install`` offers an option for (each of its own)."""
    return [launcher for launcher in every() if launcher.option]


def describe_slice(request: SliceRequest, wait: float = 0.0, label: str = "") -> str:
    """What the picker shows in parentheses: ``1/4 GPU``, ``8 GiB GPU``, ``2 GPUs``, ``1/2 GPU, waits 60 s``,
    ``1/4 GPU, <launcher label>``."""
    if request.memory is not None:
        share = f"{_size(request.memory)} GPU"
    else:
        assert request.fraction is not None
        share = "GPU" if request.fraction >= 1 else f"{describe_fraction(request.fraction)} GPU"
        if request.fraction >= 1 and request.gpus == 1:
            share = "1 GPU"
    if request.gpus > 1:
        share = f"{request.gpus} GPUs" if request.fraction == 1 else f"{request.gpus} × {share}"
    if request.elastic:  # a size as the request's is written: "1 GiB GPU, up to 3 GiB", not "3.0 GiB"
        limit = _size(request.limit_memory) if request.limit_memory is not None else request.describe_limit()
        share += f", up to {limit}"
    if request.logical_devices > 1:
        share += f", {request.logical_devices} devices"
    if wait:
        share += f", waits {wait:g} s"
    if label:
        share += f", {label}"
    return share


def _size(amount: int) -> str:
    """``1 GiB``, ``1.5 GiB``, ``512 MiB``: a kernel name's size, whole GiB without a decimal."""
    return format_bytes(amount, precision=0 if amount % (1 << 30) == 0 else 1)


def default_name(source: str, request: SliceRequest, wait: float = 0.0, launcher: str = "") -> str:
    if request.memory is not None:
        part = format_bytes(request.memory, precision=1).replace(" ", "").replace(".0", "").replace(".", "_").lower()
    else:
        assert request.fraction is not None
        part = "1" if request.fraction >= 1 else describe_fraction(request.fraction).replace("/", "-").replace("%", "pct")
        part = part if request.fraction < 1 else "full"
    name = f"{source}-vgpu-{part}"
    if request.limit_memory is not None:
        name += "-to-" + format_bytes(request.limit_memory, precision=1).replace(" ", "").replace(".0", "").replace(".", "_").lower()
    elif request.limit_fraction is not None:
        name += "-to-" + ("full" if request.limit_fraction >= 1 else describe_fraction(request.limit_fraction).replace("/", "-").replace("%", "pct"))
    if request.gpus > 1:
        name += f"-x{request.gpus}"
    if request.logical_devices > 1:
        name += f"-ld{request.logical_devices}"
    if wait:
        name += f"-wait{wait:g}".replace(".", "_")
    if launcher:
        name += f"-{launcher}"
    return name


def install(
    request: SliceRequest,
    *,
    source: str = "python3",
    name: str | None = None,
    display_name: str | None = None,
    wait: float = 0.0,
    user: bool = False,
    prefix: str | None = None,
    manager: KernelSpecManager | None = None,
    replace: bool = False,
    keep: bool = False,
    launcher: tuple[str, Sequence[str]] | None = None,
    launcher_counts: Mapping[str, int] | None = None,
) -> tuple[str, str, str, str]:
    """Install one sliced kernelspec; returns (name, display name, path, what happened:
    ``installed``, ``replaced``, ``unchanged`` or ``kept``). An existing kernelspec of the same
    name that differs is replaced only with ``replace``; with ``keep`` it stays (``--defaults``,
    which ``scripts/lab`` runs at every start); otherwise the install is refused, saying so.
    ``launcher``: the kernels start through this launcher (its name) with these options of its own,
    and ``launcher_counts``, its whole-number settings (:attr:`~jupyter_vgpu.launch.launchers.Launcher.counts`)."""
    manager = manager or KernelSpecManager()
    try:
        spec = manager.get_kernel_spec(source)
    except NoSuchKernel:
        known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise InvalidRequest(f"No kernelspec named {shorten(source)} to copy; installed: {known}.") from None
    source_dir = Path(spec.resource_dir)
    try:
        data: dict[str, Any] = json.loads((source_dir / "kernel.json").read_text())
    except (OSError, ValueError):
        data = spec.to_dict()
    config: dict[str, Any] = {}
    if request.fraction is not None:
        config["gpu_fraction"] = request.fraction
    if request.memory is not None:
        config["gpu_memory"] = exact_bytes(request.memory)  # what was asked, to the byte
    if request.limit_fraction is not None:
        config["gpu_fraction_limit"] = request.limit_fraction
    if request.limit_memory is not None:
        config["gpu_memory_limit"] = exact_bytes(request.limit_memory)
    if request.gpus != 1:
        config["gpus"] = request.gpus
    if request.logical_devices != 1:
        config["logical_devices"] = request.logical_devices
    if wait:
        config["wait_timeout"] = wait
    chosen = launcher_named(launcher[0]) if launcher is not None else None
    if chosen is not None and launcher is not None:
        config["launcher"] = chosen.name
        own: dict[str, Any] = {"args": options} if (options := chosen.check_options(list(launcher[1]))) else {}
        own.update(launcher_counts or {})
        if own:  # its settings, under its own key (docs/launchers.md)
            config[chosen.name] = own
    metadata = dict(data.get("metadata") or {})
    metadata["kernel_provisioner"] = {"provisioner_name": PROVISIONER_NAME, "config": config}
    described = describe_slice(request, wait, label=chosen.label if chosen is not None else "")
    metadata["jupyter_vgpu"] = {"slice": described, "source": source}
    data["metadata"] = metadata
    data["display_name"] = display_name or f"{_base_display(str(data.get('display_name') or source))} ({described})"
    kernel_name = name or default_name(source, request, wait, launcher=chosen.name if chosen is not None else "")
    if not re.fullmatch(r"[a-zA-Z0-9._-]+", kernel_name):
        raise InvalidRequest(f"Kernelspec name {shorten(kernel_name)} may use only letters, digits, '.', '_' and '-'.")
    action = "installed"
    existing = _installed_at(manager, kernel_name, user=user, prefix=prefix)
    if existing is not None:
        try:
            before = json.loads((Path(existing) / "kernel.json").read_text())
        except (OSError, ValueError):
            before = None
        if before == json.loads(json.dumps(data)):
            return kernel_name, str(data["display_name"]), existing, "unchanged"
        if keep:
            return kernel_name, str((before or {}).get("display_name") or kernel_name), existing, "kept"
        if not replace:
            config_before = ((before or {}).get("metadata") or {}).get("kernel_provisioner", {}).get("config")
            raise InvalidRequest(
                f"A kernelspec named {kernel_name} is already installed in {existing}"
                + (f" ({json.dumps(config_before)})" if config_before else "")
                + "; add --replace to replace it, or --name to install beside it."
            )
        action = "replaced"
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / kernel_name
        shutil.copytree(source_dir, staged)
        (staged / "kernel.json").write_text(json.dumps(data, indent=1))
        try:
            path = manager.install_kernel_spec(str(staged), kernel_name, user=user, prefix=prefix, replace=True)
        except PermissionError as error:
            raise InvalidRequest(
                f"Cannot write the kernelspec to {error.filename}: permission denied; use --user or --sys-prefix."
            ) from None
    return kernel_name, str(data["display_name"]), path, action


def _installed_at(manager: KernelSpecManager, kernel_name: str, *, user: bool, prefix: str | None) -> str | None:
    """The folder of a kernelspec of this name where this install would write it, if there is one
    (one of the same name elsewhere is not replaced: it is another installation's)."""
    try:
        target = Path(manager._get_destination_dir(kernel_name, user=user, prefix=prefix))
    except Exception:  # jupyter_client's own helper, private: fall back to where Jupyter finds it
        found = manager.find_kernel_specs().get(kernel_name)
        return str(found) if found else None
    return str(target) if (target / "kernel.json").is_file() else None


def sliced_specs(manager: KernelSpecManager | None = None) -> dict[str, dict[str, Any]]:
    """Installed kernelspecs that use the vgpu-provisioner: name -> {display_name, config, path}."""
    manager = manager or KernelSpecManager()
    found = {}
    for name, path in sorted(manager.find_kernel_specs().items()):
        try:
            data = json.loads((Path(path) / "kernel.json").read_text())
        except (OSError, ValueError):
            continue
        if names_vgpu_provisioner(data.get("metadata")):
            prov = data["metadata"]["kernel_provisioner"]
            found[name] = {"display_name": data.get("display_name"), "config": prov.get("config") or {}, "path": path}
    return found


def install_command(args: argparse.Namespace) -> int:
    prefix = sys.prefix if args.sys_prefix else args.prefix
    seconds = parse_seconds(args.wait, what="--wait")
    launcher, counts = None, {}
    for offered in offered_launchers():
        chosen, options = getattr(args, f"launcher_{offered.name}", False), getattr(args, f"launcher_{offered.name}_args", [])
        given = {key: value for key, _ in offered.counts if (value := getattr(args, f"launcher_{offered.name}__{key}", None)) is not None}
        if (options or given) and not chosen:
            flag = f"--{offered.option}-arg" if options else f"--{count_flag(offered, next(iter(given)))}"
            raise InvalidRequest(f"{flag} is for kernels started as {offered.title or offered.description}; add --{offered.option}.")
        if chosen:
            if launcher is not None:
                raise InvalidRequest(f"A kernelspec has one launcher; choose --{offered.option} or the other.")
            launcher, counts = (offered.name, options), {key: _whole(count_flag(offered, key), value) for key, value in given.items()}
    if args.defaults:
        if args.name or args.display_name or args.limit:
            raise InvalidRequest("--defaults installs several kernelspecs; it cannot take --name, --display-name or --limit.")
        requests = [SliceRequest.parse(f, gpus=args.gpus, logical_devices=args.logical_devices, names=CLI_NAMES) for f in DEFAULT_SET]
    else:
        if args.fraction is None and args.memory is None:
            raise InvalidRequest("Say how much GPU: -p FRACTION (e.g. 1/4), -m MEMORY (e.g. 8GiB) or --defaults.")
        requests = [SliceRequest.parse(
                args.fraction, args.memory, gpus=args.gpus, logical_devices=args.logical_devices, names=CLI_NAMES, limit=args.limit
            )
        ]
    for request in requests:
        name, display, path, action = install(
            request,
            source=args.source,
            name=args.name,
            display_name=args.display_name,
            wait=seconds,
            user=args.user,
            prefix=prefix,
            replace=args.replace,
            keep=args.defaults and not args.replace,
            launcher=launcher,
            launcher_counts=counts,
        )
        if action == "kept":
            print(f"Kept your kernelspec {name} ({display!r}) in {path}; --replace installs the default over it.")
        elif action == "unchanged":
            print(f"Kernelspec {name} ({display!r}) is already installed in {path}.")
        else:
            print(f"{action.capitalize()} kernelspec {name} ({display!r}) in {path}")
    return 0


def list_command(args: argparse.Namespace) -> int:
    specs, launchers = sliced_specs(), installed_launchers()
    if args.json:
        json.dump({"kernelspecs": specs, "launchers": launchers}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if specs:
        print("Sliced kernelspecs:")
        shown = [(name, str(info["display_name"]), str(info["path"])) for name, info in specs.items()]
        print("\n".join(columns([("NAME", "DISPLAY NAME", "PATH"), *shown])))
    else:
        print("No sliced kernelspecs. Install some with `jupyter vgpu kernelspec install --defaults --user`.")
    print("Launchers (where a kernelspec's kernels run; docs/launchers.md):")
    table = [("NAME", "INSTALL WITH", "PACKAGE", "ITS KERNELS RUN AS")]
    for found in launchers:
        option = found["option"] or ("(default)" if found["name"] == DEFAULT else "-")
        table.append((found["name"], option, found["package"] or "?", found["error"] or found["description"]))
    print("\n".join(columns(table)))
    return 0


def installed_launchers() -> list[dict[str, Any]]:
    """Every launcher installed here, built-in ones first: its name, what its kernels run as, the
    ``kernelspec install`` option of its kernelspecs (None where it has none), the package it
    comes from, and why it could not be loaded (None where it could)."""
    found = []
    for name in known():
        try:
            launcher: Launcher | None = launcher_named(name)
            error = None
        except InvalidRequest as refusal:  # a broken plug-in is listed with its sentence
            launcher, error = None, str(refusal)
        option = f"--{launcher.option}" if launcher is not None and launcher.option else None
        description = launcher.description if launcher is not None else ""
        found.append({"name": name, "description": description, "option": option, "package": package_of(name), "error": error})
    return found


def columns(rows: Sequence[Sequence[str]], indent: str = "  ", gap: int = 2) -> list[str]:
    """``rows`` as lines of aligned columns: each column as wide as its widest cell and ``gap``
    spaces apart, so a long cell moves the next column on instead of running into it."""
    widths = [max(len(row[i]) for row in rows) + gap for i in range(len(rows[0]) - 1)]
    return [indent + "".join(f"{cell:<{width}}" for cell, width in zip(row, widths)) + row[-1] for row in rows]


def remove_command(args: argparse.Namespace) -> int:
    manager = KernelSpecManager()
    specs = sliced_specs(manager)
    names = list(specs) if args.all else list(args.names)
    if not names:
        raise InvalidRequest("Name the kernelspecs to remove (see `jupyter vgpu kernelspec list`) or use --all.")
    for name in names:
        if name not in specs:
            raise InvalidRequest(f"{shorten(name)} is not a sliced kernelspec; sliced ones: {', '.join(specs) or 'none'}.")
    for name in names:
        path = manager.remove_kernel_spec(name)
        print(f"Removed kernelspec {name} from {path}")
    return 0


def _whole(flag: str, value: str) -> int:
    """A launcher's whole-number setting as given on the command line (``--<option>-restarts 2``)."""
    if not (value.strip().isascii() and value.strip().isdigit()) or len(value.strip()) > 6:
        raise InvalidRequest(f"--{flag} {shorten(value)} is not a whole number of times; use 0 or more (2).")
    return int(value)
