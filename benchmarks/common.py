"""What every benchmark shares: the machine line, writing and showing its result, and its command line."""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopsimrl.io import atomic_write_json


def machine() -> str:
    """The machine line of a result: architecture and Python."""
    return f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"


def publish(path: str | Path, results: dict[str, Any], shown: Any = None) -> None:
    """Write ``results`` atomically to ``path`` and print them (or ``shown``, a part of them)."""
    atomic_write_json(path, results)
    print(json.dumps(results if shown is None else shown, indent=2))


def command_line(main: Callable[..., Any], doc: str | None, quick_help: str = "smaller sizes and shorter runs") -> None:
    """``python -m benchmarks.<name> [--quick]``: run ``main(quick=...)``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    main(quick=parser.parse_args().quick)
