"""The ``shopsimrl`` command: one sub-command family per part of the project.

Each part registers its own sub-commands (``register(subparsers)``) in its own
``cli`` module; this file only dispatches, and imports a part only when its
command runs, so ``shopsimrl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# (module, help) for every command family; each module defines register(subparsers).
_PARTS: tuple[tuple[str, str], ...] = (
    ("shopsimrl.rollout.cli", "dynamic-sampling rollout steps (the main job)"),
    ("shopsimrl.env.cli", "the ShopSim environment: build, serve, play"),
    ("shopsimrl.sampling.cli", "replay the wave state machine on a supply of groups"),
    ("shopsimrl.slime.cli", "slime integration: data export, train"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shopsimrl", description="ShopSimRL: dynamic sampling for GRPO on slime.")
    parser.add_argument("--version", action="version", version=f"shopsimrl {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name, _help in _PARTS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # a part not built yet must not break the others
            if exc.name != module_name:
                raise
            continue
        module.register(subparsers)
    return parser


def _version() -> str:
    from shopsimrl import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
