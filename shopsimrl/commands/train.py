"""``shopsimrl train``: run GRPO training on slime with ShopSim's hooks.

``train`` reads its knobs from environment variables (the scripts set them; see
:class:`shopsimrl.slime.launch.TrainConfig`), checks them, and runs slime, or with
``--dry-run`` prints the exact command.  Exit codes: 0 ok, 2 refused (bad knobs,
slime not installed: a ``LaunchError``), otherwise slime's own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from shopsimrl.commands.dispatch import handled_by


def register(subparsers: Any) -> None:
    train = subparsers.add_parser(
        "train",
        help="run GRPO training on slime (knobs: environment variables, see docs/slime.md)",
        description="Build slime's train.py command from the environment variables of scripts/run_shopsimrl_slime.sh "
        "and run it. Arguments after `--` (e.g. the model's MODEL_ARGS) are appended.",
    )
    mode = train.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the exact command (and the ShopSim config) and exit")
    mode.add_argument("--print-args", action="store_true", help="print train.py's arguments, one per line, and exit")
    train.add_argument("extra", nargs=argparse.REMAINDER, help="-- then extra train.py arguments")
    handled_by(train, _train)


def _train(args: argparse.Namespace) -> int:
    from shopsimrl.slime.launch import TrainConfig, render  # the launcher loads the hooks' defaults: only to train

    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    config = TrainConfig.from_env()  # LaunchError: a refusal naming the variable
    command = config.command(extra)
    if args.print_args:
        print("\n".join(config.train_args(extra)))
        return 0
    if args.dry_run:
        print(render(command))
        print(f"# with {config.custom_config_path}: {json.dumps(config.custom_config())}", file=sys.stderr)
        return 0
    config.check_installed()
    config.write_custom_config()
    print(f"shopsimrl train: {render(command)}", file=sys.stderr)
    return subprocess.run(command, check=False, cwd=config.slime_dir).returncode
