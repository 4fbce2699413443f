"""The ``shopsimrl`` command: the one registry of sub-commands, dispatched one way.

Each sub-command is a module of ``shopsimrl/commands/`` with ``register(subparsers)``; every one
goes through argparse and :func:`shopsimrl.commands.dispatch.run` (a refusal: one line, exit 2;
a bug: a traceback, exit 1).  The command modules load their work only when it runs, so
``shopsimrl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shopsimrl import __version__
from shopsimrl.argtypes import OneLineParser
from shopsimrl.commands import (
    calibrate,
    compare,
    data,
    env,
    launch,
    measure,
    replay,
    rollout,
    simulate,
    slime,
    train,
    view,
)
from shopsimrl.commands.dispatch import run

#: Every sub-command, in the order ``shopsimrl --help`` lists them.
COMMANDS = (
    rollout,  # rollout: dynamic-sampling rollout steps (the main job)
    env,  # env build | serve | play | ray-serve: the ShopSim environment
    replay,  # replay: the wave state machine on a supply of groups
    data,  # data export: slime's prompt file
    train,  # train: GRPO training on slime
    slime,  # slime check: does this release fit a slime checkout
    simulate,  # simulate: GPU-free training runs comparing selection selections
    compare,  # compare: held-out success against generated episodes for several runs
    view,  # view: runs in a browser, from the metrics down to each episode (read-only web app)
    measure,  # measure: success rate and group labels of the heuristic policy
    calibrate,  # calibrate: fit the simulated world to the release run
    launch,  # launch --print-defaults: the training knobs' defaults as shell lines
)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; sub-command parsers inherit OneLineParser's one-line errors."""
    parser = OneLineParser(prog="shopsimrl", description="ShopSimRL: dynamic sampling for GRPO on slime.")
    parser.add_argument("--version", action="version", version=f"shopsimrl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
