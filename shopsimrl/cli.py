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

# Every command family: each module defines register(subparsers).
_PARTS: tuple[str, ...] = (
    "shopsimrl.rollout.cli",  # rollout: dynamic-sampling rollout steps (the main job)
    "shopsimrl.env.cli",  # env: the ShopSim environment (build, serve, play)
    "shopsimrl.sampling.cli",  # replay: the wave state machine on a supply of groups
    "shopsimrl.slime.cli",  # data export, train: slime integration
    "shopsimrl.simulate.cli",  # simulate: GPU-free training runs comparing selection strategies
    "shopsimrl.learn.cli",  # compare: held-out success against generated episodes for several runs
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shopsimrl", description="ShopSimRL: dynamic sampling for GRPO on slime.")
    parser.add_argument("--version", action="version", version=f"shopsimrl {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _PARTS:
        importlib.import_module(module_name).register(subparsers)
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
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C outside a command's own signal handling (e.g. while it starts): one line
        print(f"shopsimrl {getattr(args, 'command', '')}: interrupted".replace("  ", " "), file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
