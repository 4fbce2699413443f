"""The package's layers: each part imports only the parts below it, no import circles, short modules.

The import graph is read from the source (``ast``), every ``import`` counted, those inside functions
too (only ``if TYPE_CHECKING:`` blocks are not imports at run time); an import inside a function says why.  The floors, lowest first,
are ``FLOORS``; the command layer (``shopsimrl/commands/``, ``shopsimrl/cli.py``) sits above
every part.  A known exception names its issue and fails once it is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "shopsimrl"

#: Lowest first; a part imports its own floor's helpers (floor 0) or lower floors, never a higher one, and
#: never another part of its own floor.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"shopsimrl", "errors", "defaults", "io", "lazy", "argtypes"}),  # standard library only: every part uses them
    frozenset({"sampling"}),  # the pure decision core
    frozenset({"env"}),
    frozenset({"agent"}),  # knows the env through its client interface
    frozenset({"rollout"}),
    frozenset({"learn", "simulate", "slime"}),
    frozenset({"slime_runtime", "slime_metrics"}),  # the stable paths slime loads the hooks by
    frozenset({"webview"}),  # shopsimrl view: reads what rollout and learn leave on disk
    frozenset({"commands"}),
    frozenset({"cli"}),
)
#: (importer, imported) modules that still go up a floor, and the round that removes them.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}
MAX_LINES = 450
MAX_COMMAND_LINES = 250
#: modules over MAX_LINES today, and the round that splits them
KNOWN_LONG: dict[str, str] = {}
#: modules with imports inside functions that do not yet say why (each was being edited elsewhere when the
#: rule grew from the command layer to the whole package); a module leaves the list once all of its say why
KNOWN_SILENT_LAZY: dict[str, str] = {}
#: the step's actions (and the event item a shell reports a staged group's first K with): only the pump dispatches
#: over them; every shell implements ``sampling.pump.Shell`` instead
STEP_ACTIONS = frozenset({"Start", "GroupDecision", "WaveOpened", "StoppedEarly", "AbortRest", "StopRun",
                          "FirstStage", "StepDone"})
#: where a dispatch over them belongs: the pump carries out the actions; the step reads its own events (a whole
#: group, or a staged group's first K)
ACTION_DISPATCH_HOME = frozenset({"sampling/pump.py", "sampling/step.py"})
KNOWN_ACTION_DISPATCH: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else "shopsimrl"


def _floor(module: str) -> int:
    return next(i for i, parts in enumerate(FLOORS) if _part(module) in parts)


def _imports(path: Path, *, every: bool = False) -> Iterator[tuple[str, int, bool]]:
    """(module imported, line, inside a function) for every import of the package in ``path`` (``every``:
    of any module, as written)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            if id(child) in skipped:
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{a.name}" if f"{child.module}.{a.name}" in MODULES else child.module
                         for a in child.names]
            for name in names:
                if every:
                    yield name, child.lineno, in_function
                elif name.split(".")[0] == "shopsimrl":
                    while name not in MODULES and "." in name:
                        name = name.rsplit(".", 1)[0]
                    yield name, child.lineno, in_function
            yield from visit(child, inside)

    yield from visit(tree, False)


GRAPH = {module: sorted({imported for imported, _, _ in _imports(path) if imported != module})
         for module, path in MODULES.items()}


def test_every_part_has_a_floor() -> None:
    assert not [m for m in MODULES if not any(_part(m) in parts for parts in FLOORS)]


def test_no_part_imports_a_higher_floor_or_a_part_beside_it() -> None:
    wrong = set()
    for module, imported in GRAPH.items():
        for target in imported:
            up = _floor(target) > _floor(module)
            beside = _floor(target) == _floor(module) > 0 and _part(target) != _part(module)
            if up or beside:
                wrong.add((module, target))
    assert wrong - KNOWN_UPWARD.keys() == set(), f"imports that go up a floor or sideways: {sorted(wrong - KNOWN_UPWARD.keys())}"
    gone = KNOWN_UPWARD.keys() - wrong
    assert not gone, f"fixed: remove {sorted(gone)} from KNOWN_UPWARD"


def test_only_the_dispatcher_imports_the_commands() -> None:
    users = {m for m, imported in GRAPH.items() for t in imported if _part(t) in ("commands", "cli")
             and _part(m) not in ("commands", "cli")}
    assert not users


def test_no_import_circle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            connect(module)
    assert not circles


def test_the_graph_reader_sees_imports_inside_functions() -> None:
    """The reader itself: a known import inside a function (the lazy one of ``commands/train.py``) is found."""
    found = list(_imports(MODULES["shopsimrl.commands.train"]))
    assert ("shopsimrl.slime.launch", True) in {(name, inside) for name, _, inside in found}


def _silent_lazy_imports(path: Path) -> list[int]:
    """The lines of ``path``'s imports inside a function with no comment on their line or just above them
    (above a block of imports, the block's first one)."""
    silent = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for _name, line, inside in _imports(path, every=True):
        if not inside:
            continue
        above = line - 1
        while above > 0 and (not lines[above - 1].strip() or lines[above - 1].lstrip().startswith(("from ", "import ", ")"))
                             or lines[above - 1].startswith(" " * 8) and lines[above - 1].strip().endswith(",")):
            above -= 1
        if "#" not in lines[line - 1] and not lines[above - 1].lstrip().startswith("#"):
            silent.append(line)
    return silent


def test_every_import_inside_a_function_says_why() -> None:
    """An import inside a function has a comment on its line or just above it saying why it is not at the top
    (a heavy or optional library, slime's own code, a cycle)."""
    silent = {}
    for path in MODULES.values():
        lines = _silent_lazy_imports(path)
        if lines:
            silent[str(path.relative_to(PACKAGE))] = lines
    unknown = {name: lines for name, lines in silent.items() if name not in KNOWN_SILENT_LAZY}
    assert not unknown, f"imports inside functions without a stated reason: {unknown}"
    gone = KNOWN_SILENT_LAZY.keys() - silent.keys()
    assert not gone, f"every import inside a function says why: remove {sorted(gone)} from KNOWN_SILENT_LAZY"


def test_the_command_layer_has_no_silent_import_in_a_function() -> None:
    assert not [name for name in KNOWN_SILENT_LAZY if name.startswith("commands/") or name == "cli.py"]


def test_the_silent_import_reader_sees_a_silent_import_and_a_stated_reason(tmp_path: Path) -> None:
    """The reader itself, on a module of three functions: a bare import is silent, a commented one and one
    inside a commented block are not."""
    path = tmp_path / "example.py"
    path.write_text(
        "import json\n\n\n"
        "def bare():\n    import csv\n\n\n"
        "def said():\n    import zlib  # a reason\n\n\n"
        "def block():\n    # a reason for the block\n    import bz2\n    import lzma\n",
        encoding="utf-8")
    assert _silent_lazy_imports(path) == [5]


def test_modules_are_short() -> None:
    lengths = {str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
               for path in MODULES.values()}
    long = {name for name, n in lengths.items() if n > MAX_LINES}
    assert long - KNOWN_LONG.keys() == set(), f"modules over {MAX_LINES} lines: {sorted(long - KNOWN_LONG.keys())}"
    assert not KNOWN_LONG.keys() - long, f"now short: remove {sorted(KNOWN_LONG.keys() - long)} from KNOWN_LONG"
    commands = {name: n for name, n in lengths.items() if name.startswith("commands/") and n > MAX_COMMAND_LINES}
    assert not commands, f"command modules over {MAX_COMMAND_LINES} lines: {commands}"


def _action_dispatch(path: Path) -> list[int]:
    """Lines of ``path`` that branch on a step action's type: ``isinstance(x, Start)``, ``type(x) is StopRun``, or a
    ``case WaveOpened(...)`` pattern."""
    def named(node: ast.AST) -> bool:
        nodes = node.elts if isinstance(node, ast.Tuple) else [node]
        return any((n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None)
                   in STEP_ACTIONS for n in nodes)

    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            hit = len(node.args) == 2 and named(node.args[1])
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and ast.unparse(node.left.func) == "type":
            hit = any(named(c) for c in node.comparators)
        elif isinstance(node, ast.MatchClass):
            hit = named(node.cls)
        else:
            continue
        if hit:
            lines.append(node.lineno)
    return lines


def test_only_the_pump_dispatches_over_the_steps_actions() -> None:
    found = {name: lines for path in MODULES.values()
             if (name := str(path.relative_to(PACKAGE))) not in ACTION_DISPATCH_HOME
             and (lines := _action_dispatch(path))}
    assert found.keys() - KNOWN_ACTION_DISPATCH.keys() == set(), (
        f"dispatch over the step's actions outside the pump (implement sampling.pump.Shell instead): "
        f"{ {k: v for k, v in found.items() if k not in KNOWN_ACTION_DISPATCH} }")
    assert not KNOWN_ACTION_DISPATCH.keys() - found.keys(), (
        f"on the pump now: remove {sorted(KNOWN_ACTION_DISPATCH.keys() - found.keys())} from KNOWN_ACTION_DISPATCH")


def test_the_dispatch_reader_sees_isinstance_type_and_match(tmp_path: Path) -> None:
    path = tmp_path / "shell.py"
    path.write_text(
        "def a(x):\n    return isinstance(x, (int, Start))\n\n\n"
        "def b(x):\n    return type(x) is step.StopRun\n\n\n"
        "def c(x):\n    match x:\n        case WaveOpened():\n            return 1\n\n\n"
        "def d(x):\n    return isinstance(x, int) or type(x) is Opened\n",
        encoding="utf-8")
    assert _action_dispatch(path) == [2, 6, 11]
