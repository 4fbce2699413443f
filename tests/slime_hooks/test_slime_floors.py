"""Two floors of the slime integration, read from the source.

- No process-wide flag in ``shopsimrl/slime/``: no module rebinds a global (``global``) but the hook state's
  (``state.py``, the one object slime's hook model forces, documented there), and that object holds no flag
  saying who does what (a boolean field), only the streak, handed-over results and caches.
- One slime double: no file outside ``shopsimrl/slime/harness/double/`` builds a module named ``slime...`` or
  puts one in ``sys.modules``; the tests that need slime install the double.
"""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from shopsimrl.slime.state import SlimeHookState

ROOT = Path(__file__).resolve().parents[2]
SLIME = ROOT / "shopsimrl" / "slime"
DOUBLE = SLIME / "harness" / "double"
#: a module named slime..., built or put in sys.modules: a fake slime
FAKE_SLIME = re.compile(r"""ModuleType\(\s*["']slime|setitem\(\s*sys\.modules,\s*["']slime"""
                       r"""|sys\.modules\[\s*["']slime[^"']*["']\s*\]\s*=[^=]""")
#: files that still build a fake slime, and who removes it (none left)
KNOWN_FAKES: dict[str, str] = {}


def test_no_process_wide_flag_in_the_slime_package():
    rebinding = []
    for path in sorted(SLIME.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Global) and path != SLIME / "state.py":
                rebinding.append(f"{path.relative_to(ROOT)}:{node.lineno} global {', '.join(node.names)}")
    assert rebinding == []
    flags = [f.name for f in fields(SlimeHookState) if f.type in (bool, "bool") and not f.name.startswith("_")]
    assert flags == []


def test_one_slime_double():
    found = {}
    for top in ("shopsimrl", "tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if DOUBLE in path.parents or path == Path(__file__):
                continue
            if FAKE_SLIME.search(path.read_text(encoding="utf-8")):
                found[str(path.relative_to(ROOT))] = True
    assert sorted(set(found) - set(KNOWN_FAKES)) == []
    assert sorted(set(KNOWN_FAKES) - set(found)) == [], "a known fake is gone: take it off KNOWN_FAKES"
    assert FAKE_SLIME.search('modules = {"slime": types.ModuleType("slime")}')  # the reader sees one
