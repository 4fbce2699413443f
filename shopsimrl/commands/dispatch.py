"""One way to run a command: parse, call its handler, map a refusal to one line and exit 2.

The branches of the package's exceptions are in :mod:`shopsimrl.errors`.  A
:class:`~shopsimrl.errors.Refusal` raised out of a handler is the user's to fix: one line,
``shopsimrl <command>: refused: <message>``, exit 2.  Ctrl-C outside a command's own signal
handling is one line and exit 130.  Anything else is a bug: it propagates, so Python prints the
traceback and the process exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from shopsimrl.errors import EXIT_REFUSED, Refusal

EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]


def handled_by(parser: argparse.ArgumentParser, handler: Handler) -> None:
    """Make ``handler`` the command of ``parser``; its refusals are worded with the parser's name."""
    parser.set_defaults(handler=handler, command_name=parser.prog)


def refuse(command_name: str, message: object) -> int:
    """The one line of a refusal; the exit code to return."""
    print(f"{command_name}: refused: {message}", file=sys.stderr, flush=True)
    return EXIT_REFUSED


def run(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    """Parse ``argv`` with ``parser`` and run the chosen command's handler; the process's exit code."""
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # --help, --version, or a value refused while parsing (one line on stderr)
        return exc.code if isinstance(exc.code, int) else EXIT_REFUSED
    handler: Any = getattr(args, "handler", None)
    if handler is None:  # a command family without its sub-command (``shopsimrl env``), or no command
        parser.print_help()
        return EXIT_REFUSED
    name = getattr(args, "command_name", parser.prog)
    try:
        return int(handler(args) or 0)
    except Refusal as exc:
        return refuse(name, exc)
    except KeyboardInterrupt:  # Ctrl-C outside a command's own signal handling (e.g. while it starts): one line
        print(f"{name}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
