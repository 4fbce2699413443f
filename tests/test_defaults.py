"""Each default is defined once: in ``shopsimrl/defaults.py``, imported wherever it is needed.

Found the way `grep` would, but on the syntax tree (docstrings and comments may name a default; code may not
restate it), so a second definition of the port, the slots, the turn cap, the action limit or the catalog size
anywhere in the package fails here.  The scripts cannot import Python: they must not write these values at all
(they ``eval`` the launcher's ``--print-defaults``; tests/slime_hooks/test_scripts_and_cli.py checks that).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from pathlib import Path

import pytest

from shopsimrl import defaults

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shopsimrl"
DEFAULTS = "shopsimrl/defaults.py"

# value -> where it may be written (one definition per idea; 30 is two ideas: the env's action limit and the turn cap;
# 48 is two: the env's slots and a constrained action's longest query)
DEFINED_ONCE = {
    5700: [DEFAULTS],
    6060: [DEFAULTS],
    48: [DEFAULTS, "shopsimrl/agent/constrained.py"],
    20_000: [DEFAULTS],
    30: [DEFAULTS, DEFAULTS],
    "data/shopsim_train.jsonl": [DEFAULTS],
    "shopsim_traces": [DEFAULTS],
}
#: Module-level ``DEFAULT_*`` constants still defined beside their code, and why (the list only shrinks).
KNOWN_ELSEWHERE = {
    "shopsimrl/agent/messages.py": "DEFAULT_SYSTEM_PROMPT: the prompt's text, beside the messages built around it",
    "shopsimrl/sampling/verdict.py": "DEFAULT_REWARD_KEY: the name of slime's sample field, not a value to choose",
    "shopsimrl/env/pool.py": "DEFAULT_REFRESH_INTERVAL: the pool's own tuning, no flag sets it",
    "shopsimrl/env/pool_health.py": "back-off and probe timings: the pool's own tuning, no flag sets them",
    "shopsimrl/env/http_client.py": "DEFAULT_RELEASE_DEADLINE: the client's own tuning, no flag sets it",
    "shopsimrl/env/ray_servers.py": "DEFAULT_STARTUP_TIMEOUT: a constructor's, no flag sets it",
    "shopsimrl/slime/harness/children.py": "slime check's --timeout and --import-timeout: to move with the slime rework",
}
#: Where an argparse option may write a number: slime's own flags, mirrored by the double of slime.
MIRRORS_SLIME = ("shopsimrl/slime/harness/double/",)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


@functools.cache  # the package is read once for all the values below (read-only: the tests only look it up)
def written_literals() -> Counter[tuple[object, str]]:
    """(value, file) for every literal in DEFINED_ONCE, and every string naming port 5700 (docstrings aside)."""
    found: Counter[tuple[object, str]] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstrings(tree)
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in docstrings:
                continue
            value = node.value
            if type(value) in (int, str) and value in DEFINED_ONCE:
                found[(value, where)] += 1
            elif isinstance(value, str) and re.search(r"\b5700\b", value) and value not in DEFINED_ONCE:
                found[(5700, where)] += 1
    return found


def test_the_defaults_module_holds_the_values():
    assert (defaults.DEFAULT_PORT, defaults.DEFAULT_SLOTS, defaults.DEFAULT_ACTION_LIMIT,
            defaults.DEFAULT_PRODUCTS, defaults.DEFAULT_MAX_TURNS) == (5700, 48, 30, 20_000, 30)
    assert defaults.DEFAULT_URL == "http://127.0.0.1:5700"


@pytest.mark.parametrize("value", list(DEFINED_ONCE), ids=str)
def test_each_default_is_written_once_in_the_package(value):
    found = written_literals()
    places = sorted(where for (v, where), count in found.items() if v == value for _ in range(count))
    assert places == sorted(DEFINED_ONCE[value]), f"{value} is written in {places}; import it from {DEFINED_ONCE[value]}"


def test_the_defaults_module_imports_nothing_of_the_package():
    tree = ast.parse((ROOT / DEFAULTS).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import)]
    assert all(m in ("__future__", "pathlib") for m in imported), imported


def test_there_is_one_defaults_module():
    assert [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("defaults.py")] == [DEFAULTS]


def _number(node: ast.expr) -> float | None:
    """The value of a numeric literal (``8``, ``-1.5``), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def cli_number_defaults(tree: ast.AST) -> list[tuple[int, float]]:
    """(line, value) of every ``add_argument(..., default=<number>)`` but 0 and 1 (none, or one of a thing)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for keyword in node.keywords:
                value = _number(keyword.value) if keyword.arg == "default" else None
                if value is not None and value not in (0, 1):
                    found.append((node.lineno, value))
    return found


def test_the_cli_reader_sees_a_number_written_as_a_default():
    tree = ast.parse("p.add_argument('--a', default=8)\np.add_argument('--b', default=-1.5)\n"
                     "p.add_argument('--c', default=0)\np.add_argument('--d', default=DEFAULT_D)\n")
    assert cli_number_defaults(tree) == [(1, 8), (2, -1.5)]


def test_no_command_line_option_writes_its_default_as_a_number():
    """A flag's default comes from ``shopsimrl.defaults`` by name, so it cannot drift from the launcher's, the
    dataclasses' or another command's (0 and 1 are let through: none, or one of a thing)."""
    written = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if not where.startswith(MIRRORS_SLIME):
            found = cli_number_defaults(ast.parse(path.read_text(), str(path)))
            if found:
                written[where] = found
    assert not written, f"import these defaults from {DEFAULTS}: {written}"


def test_no_default_constant_is_defined_outside_the_defaults_module():
    """A module-level ``DEFAULT_* = <literal>`` belongs in ``shopsimrl/defaults.py`` (a default that is an enum's
    member stays beside its enum: it is not a literal)."""
    outside = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where == DEFAULTS:
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            literal = value is not None and (_number(value) is not None or isinstance(value, (ast.Constant, ast.JoinedStr))
                                             or (isinstance(value, ast.Tuple) and all(isinstance(e, ast.Constant) for e in value.elts)))
            if literal and any(isinstance(t, ast.Name) and t.id.startswith("DEFAULT_") for t in targets):
                outside.add(where)
    assert outside - KNOWN_ELSEWHERE.keys() == set(), f"move to {DEFAULTS}: {sorted(outside - KNOWN_ELSEWHERE.keys())}"
    assert not KNOWN_ELSEWHERE.keys() - outside, f"moved: remove {sorted(KNOWN_ELSEWHERE.keys() - outside)} from KNOWN_ELSEWHERE"


@pytest.mark.parametrize("script", sorted((ROOT / "scripts").glob("*.sh")), ids=lambda p: p.name)
def test_the_scripts_do_not_restate_the_defaults(script):
    text = script.read_text()
    for pattern in (r"\b5700\b", r"\b48\b", r"\b20,?_?000\b", r"\b30\b"):
        assert not re.search(pattern, text), f"{script.name} writes {pattern}: take it from --print-defaults"
