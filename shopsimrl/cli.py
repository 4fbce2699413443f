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


# Commands whose module parses its own options: main(argv) -> exit code.  The dispatcher hands them the rest
# of the command line untouched (``shopsimrl launch --print-defaults``), and lists them in --help.
_SCRIPTS: dict[str, tuple[str, str]] = {
    "measure": ("shopsimrl.rollout.measure", "success rate and group labels of the heuristic policy"),
    "calibrate": ("shopsimrl.simulate.calibrate", "fit the simulated world to the release run: RELEASE_CSV OUT_JSON"),
    "launch": ("shopsimrl.slime.launch", "the slime launcher: --print-defaults [--full-run] prints its knobs' defaults"),
}


def build_parser() -> argparse.ArgumentParser:
    from shopsimrl.argtypes import OneLineParser  # sub-command parsers inherit its one-line errors

    parser = OneLineParser(prog="shopsimrl", description="ShopSimRL: dynamic sampling for GRPO on slime.")
    parser.add_argument("--version", action="version", version=f"shopsimrl {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _PARTS:
        importlib.import_module(module_name).register(subparsers)
    for name, (_module, summary) in _SCRIPTS.items():
        subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def _version() -> str:
    from shopsimrl import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in _SCRIPTS:
        module_name, _summary = _SCRIPTS[words[0]]
        try:
            return int(importlib.import_module(module_name).main(words[1:]) or 0)
        except KeyboardInterrupt:
            print(f"shopsimrl {words[0]}: interrupted", file=sys.stderr, flush=True)
            return 130
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a value refused while parsing (one line on stderr)
        return exc.code if isinstance(exc.code, int) else 2
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
