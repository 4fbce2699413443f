"""``shopsimrl launch --print-defaults [--full-run]``: the training knobs' defaults as shell lines.

The training scripts run the same through ``python -m shopsimrl.slime.launch`` (a stable path).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shopsimrl.commands.dispatch import handled_by


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "launch", help="the slime launcher: --print-defaults [--full-run] prints its knobs' defaults",
        description="Print the training knobs' defaults as shell lines (for the scripts' eval).")
    p.add_argument("--print-defaults", action="store_true", required=True,
                   help="print `export NAME=${NAME:-default}` for every knob")
    p.add_argument("--full-run", action="store_true",
                   help="run_full_train.sh's values: 32 groups per wave, 64 episodes per update, ENV_HOST, ENV_PORT")
    handled_by(p, _print_defaults)


def _print_defaults(args: argparse.Namespace) -> int:
    from shopsimrl.slime.launch import shell_defaults  # the launcher loads the hooks' defaults: only when asked

    sys.stdout.write(shell_defaults(full_run=args.full_run))
    return 0
