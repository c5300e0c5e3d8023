"""The shape of the code the layer table promises (README.md, "Development"): layers that import downwards only, no import
circle, one ledger contract with two complete implementations, one holder vocabulary with the UI."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest

from jupyter_vgpu.ledger.broker_client import BrokerLedger
from jupyter_vgpu.ledger.contract import OPERATIONS, Ledger
from jupyter_vgpu.ledger.sqlite import SQLiteLedger
from jupyter_vgpu.slices.records import HOLDER_KINDS

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_vgpu"
UI = Path(__file__).resolve().parents[1] / "labextension" / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def imports() -> dict[str, frozenset[str]]:
    """Module -> the modules it imports at its top level or in a function (lazy imports count:
    they are dependencies too). Imports for type checkers only (``if TYPE_CHECKING:``) do not.
    Parsed once per test session: every case reads the same graph, and none may change it."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                graph[module].add(target)
                for alias in node.names:
                    graph[module].add(f"{target}.{alias.name}")
            elif isinstance(node, ast.Import):
                graph[module].update(alias.name for alias in node.names)
    return {module: frozenset(targets) for module, targets in graph.items()}


def _in(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


FORBIDDEN = [
    ("jupyter_vgpu.enforcement", "jupyter_vgpu.slices"),  # below slices: placement and the environment ask it
    ("jupyter_vgpu.enforcement", "jupyter_vgpu.gpus.inventory"),  # a GPU only as a Protocol; a tier's hardware mechanism (gpus.memory_cgroups) it may use
    ("jupyter_vgpu.gpus", "jupyter_vgpu.enforcement"),  # the hardware sits below the tiers
    ("jupyter_vgpu.enforcement", "jupyter_vgpu.kernel"),
    ("jupyter_vgpu.enforcement", "jupyter_vgpu.server"),
    ("jupyter_vgpu.frameworks", "jupyter_vgpu.slices"),  # below slices: the environment asks the registry
    ("jupyter_vgpu.frameworks", "jupyter_vgpu.kernel"),  # the kernel's state only for type checkers
    ("jupyter_vgpu.frameworks", "jupyter_vgpu.server"),
    ("jupyter_vgpu.gpus", "jupyter_vgpu.slices"),
    ("jupyter_vgpu.gpus", "jupyter_vgpu.server"),
    ("jupyter_vgpu.slices", "jupyter_server"),
    ("jupyter_vgpu.slices", "jupyter_vgpu.ledger"),  # the model knows nothing of the book (SQLite, sockets)
    ("jupyter_vgpu.gpus", "jupyter_vgpu.ledger"),
    ("jupyter_vgpu.enforcement", "jupyter_vgpu.ledger"),  # the ledger calls the tiers' hooks, never the reverse
    ("jupyter_vgpu.ledger", "jupyter_vgpu.server"),
    ("jupyter_vgpu.ledger", "jupyter_vgpu.hub"),
    ("jupyter_vgpu.ledger", "jupyter_vgpu.kernel"),
    ("jupyter_vgpu.ledger", "jupyter_vgpu.cli"),
    ("jupyter_vgpu.ledger", "jupyter_vgpu.launch"),
    ("jupyter_vgpu.ledger", "jupyter_vgpu.provisioner"),
    ("jupyter_vgpu.ledger", "jupyter_server"),
    ("jupyter_vgpu.slices", "jupyter_vgpu.server"),
    ("jupyter_vgpu.slices", "jupyter_vgpu.hub"),
    ("jupyter_vgpu.slices", "jupyter_vgpu.provisioner"),
    ("jupyter_vgpu.kernel", "jupyter_vgpu.server"),
    ("jupyter_vgpu.kernel", "jupyter_vgpu.hub"),
    ("jupyter_vgpu.provisioner", "jupyter_vgpu.server"),
    ("jupyter_vgpu.server", "jupyter_vgpu.provisioner"),  # its helpers live in jupyter_vgpu.launch
    ("jupyter_vgpu.launch", "jupyter_vgpu.provisioner"),
    ("jupyter_vgpu.launch", "jupyter_vgpu.server"),
    ("jupyter_vgpu.server", "jupyter_vgpu.hub"),
    ("jupyter_vgpu.server", "jupyterhub"),
    ("jupyter_vgpu.cli", "jupyterhub"),
    # The Prometheus series and the node's sampler serve the node exporter (a command) and the server alike.
    ("jupyter_vgpu.metrics", "jupyter_server"),
    ("jupyter_vgpu.metrics", "jupyter_vgpu.server"),
    ("jupyter_vgpu.metrics", "jupyter_vgpu.hub"),
    ("jupyter_vgpu.metrics", "jupyter_vgpu.cli"),
    ("jupyter_vgpu.metrics", "jupyter_vgpu.provisioner"),
    ("jupyter_vgpu.cli.exporter", "jupyter_vgpu.server"),
    ("jupyter_vgpu.cli.exporter", "jupyter_server"),
]


@pytest.mark.parametrize(("layer", "below"), FORBIDDEN, ids=[f"{a}-not-{b}" for a, b in FORBIDDEN])
def test_a_layer_does_not_import_what_sits_above_it(layer: str, below: str) -> None:
    offending = sorted(
        f"{module} imports {target}"
        for module, targets in imports().items()
        if _in(module, layer)
        for target in targets
        if _in(target, below)
    )
    assert offending == []


def _launcher_plug_ins() -> list[str]:
    """The launcher plug-ins this package has (one folder each under jupyter_vgpu/launch/)."""
    return sorted(f"jupyter_vgpu.launch.{p.name}" for p in (PACKAGE / "launch").iterdir() if (p / "__init__.py").is_file())


def test_the_server_the_command_line_and_the_kernel_name_no_launcher() -> None:
    """They ask the launcher contract (launch.launchers, launch.elsewhere), never a plug-in, and say
    nothing of one by name (issue 40): the next launcher is one folder."""
    plug_ins = _launcher_plug_ins()
    assert "jupyter_vgpu.launch.slurm" in plug_ins
    offending = sorted(
        f"{module} imports {target}"
        for module, targets in imports().items()
        if any(_in(module, layer) for layer in ("jupyter_vgpu.server", "jupyter_vgpu.cli", "jupyter_vgpu.kernel"))
        for target in targets
        if any(_in(target, plug_in) for plug_in in plug_ins)
    )
    assert offending == []
    named = sorted(
        f"{path.relative_to(PACKAGE)}:{n}"
        for layer in ("server", "cli", "kernel")
        for path in (PACKAGE / layer).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"slurm", line, re.IGNORECASE) or 'sys.modules.get("jupyter_vgpu' in line
    )
    assert named == []


def _code_words(path: Path) -> list[tuple[int, str]]:
    """What the code of a module says, by line: the names it uses and imports and its text, but
    not its docstrings or comments (which may name a launcher as an example)."""
    tree = ast.parse(path.read_text())
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, documented) and node.body and isinstance(node.body[0], ast.Expr)
    }  # fmt: skip
    words: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            words.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            words.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom):
            words += [(node.lineno, node.module or ""), *((node.lineno, alias.name) for alias in node.names)]
        elif isinstance(node, ast.Import):
            words += [(node.lineno, alias.name) for alias in node.names]
    return words


def test_no_provisioner_trait_and_no_launch_core_module_names_a_launcher() -> None:
    """Issue 47: every launcher keeps its settings the same way (under its own kernelspec key, checked
    by it), so no provisioner trait is a launcher's and the launch core (provisioner.py and
    launch/*.py) names no launcher plug-in in its code: no import of one, no name, no text, save two
    lines: the registry of built-in launchers (``BUILT_IN``) and launch/node.py, the entry point kept
    for kernel jobs started before the launcher had its folder."""
    from jupyter_vgpu.provisioner import VGPUProvisioner

    plug_ins = [name.rsplit(".", 1)[1] for name in _launcher_plug_ins()]
    assert plug_ins == ["slurm"]
    pattern = re.compile("|".join(plug_ins), re.IGNORECASE)
    assert [trait for trait in VGPUProvisioner.class_trait_names() if pattern.search(trait)] == []
    allowed = {"launch/launchers.py": "BUILT_IN: dict[", "launch/node.py": "from .slurm.node import main"}
    named = set()
    for path in [PACKAGE / "provisioner.py", *sorted((PACKAGE / "launch").glob("*.py"))]:
        where, lines = str(path.relative_to(PACKAGE)), path.read_text().splitlines()
        for line, word in _code_words(path):
            if pattern.search(word) and not (where in allowed and lines[line - 1].startswith(allowed[where])):
                named.add(f"{where}:{line}: {word}")
    assert sorted(named) == []


def test_the_command_line_imports_the_hub_only_inside_the_broker_command() -> None:
    offending = sorted(
        module
        for module, targets in imports().items()
        if _in(module, "jupyter_vgpu.cli") and module != "jupyter_vgpu.cli.broker"
        if any(_in(t, "jupyter_vgpu.hub") for t in targets)
    )
    assert offending == []


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    graph = imports()
    modules = set(graph)
    edges = {m: {t for t in graph[m] if t in modules and t != m and not m.startswith(t + ".")} for m in modules}
    circle: list[str] = []

    def visit(node: str, path: list[str], seen: set[str]) -> bool:
        for nxt in sorted(edges[node]):
            if nxt in path:
                circle.extend([*path[path.index(nxt) :], nxt])
                return True
            if nxt not in seen:
                seen.add(nxt)
                if visit(nxt, [*path, nxt], seen):
                    return True
        return False

    seen: set[str] = set()
    for start in sorted(modules):
        if start not in seen and visit(start, [start], seen):
            break
    assert circle == [], " -> ".join(circle)


def test_both_ledgers_implement_the_whole_contract_and_the_broker_serves_exactly_it() -> None:
    assert not SQLiteLedger.__abstractmethods__ and not BrokerLedger.__abstractmethods__
    assert set(Ledger.__abstractmethods__) - {"location"} == set(OPERATIONS)
    assert issubclass(SQLiteLedger, Ledger) and issubclass(BrokerLedger, Ledger)
    assert not issubclass(BrokerLedger, SQLiteLedger), "the broker client is a sibling, not a subclass"


def test_the_ui_names_the_same_holder_kinds_as_the_server() -> None:
    source = (UI / "store" / "types.ts").read_text()
    match = re.search(r"export type HolderKind = ([^;]+);", source)
    assert match, "labextension/src/store/types.ts declares no HolderKind"
    assert tuple(re.findall(r"'(\w+)'", match.group(1))) == HOLDER_KINDS
    assert "holder_kind: HolderKind" in source
