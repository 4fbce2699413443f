"""slime checkouts that are broken, for what ``shopsimrl slime check`` must do then (no real slime needed).

- :func:`empty`: ``slime/__init__.py`` and ``train.py``, both empty (slime's modules are missing);
- :func:`blocking_import`: importing ``slime`` never returns;
- :func:`importable`: just what the harness's stand-ins import (``slime.utils.accelerator``), and a
  ``train.py`` of the test's choosing (one that exits early, one that blocks).

A blocking piece writes its PID to ``<tree>/pids/`` first, so a test can check the process is gone.
"""

from __future__ import annotations

from pathlib import Path

RECORD_PID = ("import os, pathlib\n"
              "pathlib.Path(__file__).resolve().parents[{up}].joinpath('pids', str(os.getpid())).touch()\n")
BLOCK = "import time\nwhile True:\n    time.sleep(3600)\n"
EXIT_EARLY = "import os\nos._exit(0)\n"  # slime's process ends at once, status 0, having written nothing


def empty(root: Path) -> Path:
    (root / "slime").mkdir(parents=True)
    (root / "slime" / "__init__.py").write_text("")
    (root / "train.py").write_text("")
    return root


def blocking_import(root: Path) -> Path:
    empty(root)
    (root / "pids").mkdir()
    (root / "slime" / "__init__.py").write_text(RECORD_PID.format(up=1) + BLOCK)
    return root


def importable(root: Path, train: str) -> Path:
    """slime's accelerator registry as the stand-ins use it, nothing else; ``train`` is train.py's text."""
    empty(root)
    (root / "pids").mkdir()
    accelerator = root / "slime" / "utils" / "accelerator"
    accelerator.mkdir(parents=True)
    (root / "slime" / "utils" / "__init__.py").write_text("")
    (accelerator / "__init__.py").write_text("def register_accelerator(*args, **kwargs):\n    return None\n")
    (accelerator / "base.py").write_text("class Accelerator:\n    pass\n")
    (root / "train.py").write_text(train)
    return root


def blocking_train(root: Path) -> Path:
    return importable(root, RECORD_PID.format(up=0) + BLOCK)


def pids(root: Path) -> list[int]:
    return sorted(int(p.name) for p in (root / "pids").iterdir())
