"""Each default is defined once: in its part's defaults module, imported wherever it is needed.

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

from shopsimrl.agent import defaults as agent_defaults
from shopsimrl.env import defaults as env_defaults

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shopsimrl"
ENV_DEFAULTS = "shopsimrl/env/defaults.py"
AGENT_DEFAULTS = "shopsimrl/agent/defaults.py"
SLIME_DEFAULTS = "shopsimrl/slime/defaults.py"

# value -> where it may be written (one definition per idea; 30 is two ideas: the env's action limit and the turn cap;
# 48 is two: the env's slots and a constrained action's longest query)
DEFINED_ONCE = {
    5700: [ENV_DEFAULTS],
    48: [ENV_DEFAULTS, "shopsimrl/agent/constrained.py"],
    20_000: [ENV_DEFAULTS],
    30: [ENV_DEFAULTS, AGENT_DEFAULTS],
    "data/shopsim_train.jsonl": [SLIME_DEFAULTS],
    "shopsim_traces": [SLIME_DEFAULTS],
}


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


def test_the_defaults_modules_hold_the_values():
    assert (env_defaults.DEFAULT_PORT, env_defaults.DEFAULT_SLOTS, env_defaults.DEFAULT_ACTION_LIMIT,
            env_defaults.DEFAULT_PRODUCTS, agent_defaults.DEFAULT_MAX_TURNS) == (5700, 48, 30, 20_000, 30)
    assert env_defaults.DEFAULT_URL == "http://127.0.0.1:5700"


@pytest.mark.parametrize("value", list(DEFINED_ONCE), ids=str)
def test_each_default_is_written_once_in_the_package(value):
    found = written_literals()
    places = sorted(where for (v, where), count in found.items() if v == value for _ in range(count))
    assert places == sorted(DEFINED_ONCE[value]), f"{value} is written in {places}; import it from {DEFINED_ONCE[value]}"


def test_the_defaults_modules_import_nothing_of_the_package():
    for module in (ENV_DEFAULTS, AGENT_DEFAULTS, SLIME_DEFAULTS, "shopsimrl/rollout/defaults.py"):
        tree = ast.parse((ROOT / module).read_text())
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert all(m in ("__future__", "pathlib") for m in imported), (module, imported)


@pytest.mark.parametrize("script", sorted((ROOT / "scripts").glob("*.sh")), ids=lambda p: p.name)
def test_the_scripts_do_not_restate_the_defaults(script):
    text = script.read_text()
    for pattern in (r"\b5700\b", r"\b48\b", r"\b20,?_?000\b", r"\b30\b"):
        assert not re.search(pattern, text), f"{script.name} writes {pattern}: take it from --print-defaults"
