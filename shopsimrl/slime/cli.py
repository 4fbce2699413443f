"""``shopsimrl data export``, ``shopsimrl train`` and ``shopsimrl slime check``: the slime side of the command line.

``train`` reads its knobs from environment variables (the scripts set them; see
:class:`shopsimrl.slime.launch.TrainConfig`), checks them, and runs slime, or with
``--dry-run`` prints the exact command.  Exit codes: 0 ok, 2 refused (bad knobs,
slime not installed), otherwise slime's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from typing import Any

from shopsimrl.argtypes import cache_folder, in_file, int_range, out_file, server_url
from shopsimrl.env.build import MAX_PRODUCTS, MIN_PRODUCTS
from shopsimrl.slime.defaults import DEFAULT_PROMPT_DATA

EXIT_REFUSED = 2


def register(subparsers: Any) -> None:
    data = subparsers.add_parser("data", help="slime prompt data")
    data_commands = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    export = data_commands.add_parser("export", help="write slime's prompt file (one task id per line)")
    export.add_argument("--split", default="train", choices=("train", "val", "test"))
    export.add_argument("--out", type=out_file, default=DEFAULT_PROMPT_DATA, help=f"JSONL file to write, atomically (default {DEFAULT_PROMPT_DATA})")
    export.add_argument("--env", type=server_url, default=None, metavar="URL",
                        help="list tasks from this env server instead of in process")
    export.add_argument("--env-token-file", type=in_file, default=None,
                        help="file holding the env server's token (default: $SHOPSIM_ENV_TOKEN or "
                             "$SHOPSIM_ENV_TOKEN_FILE, if set)")
    export.add_argument("--products", type=int_range(MIN_PRODUCTS, MAX_PRODUCTS), default=None, help="in-process catalog size")
    export.add_argument("--seed", type=int, default=None, help="in-process catalog seed")
    export.add_argument("--cache-dir", type=cache_folder, default=None, help="in-process catalog cache directory")
    export.set_defaults(handler=_export)

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
    train.set_defaults(handler=_train)

    slime = subparsers.add_parser("slime", help="slime itself: check that this release fits a slime checkout")
    slime_commands = slime.add_subparsers(dest="slime_command", metavar="SUBCOMMAND", required=True)
    from shopsimrl.slime import check

    check.register(slime_commands)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _export(args: argparse.Namespace) -> int:
    from shopsimrl.slime.data import export_prompts

    if args.env is not None and any(v is not None for v in (args.products, args.seed, args.cache_dir)):
        _stderr("shopsimrl data export: refused: --products/--seed/--cache-dir configure the in-process env; drop them with --env")
        return EXIT_REFUSED

    if args.env is None and args.env_token_file is not None:
        _stderr("shopsimrl data export: refused: --env-token-file: used only with --env URL")
        return EXIT_REFUSED

    async def run() -> int:
        env = _open_env(args)
        try:
            return await export_prompts(env, args.split, args.out)
        finally:
            await env.aclose()

    from shopsimrl.env.types import EnvError

    try:
        count = asyncio.run(run())
    except ValueError as exc:
        _stderr(f"shopsimrl data export: refused: {exc}")
        return EXIT_REFUSED
    except EnvError as exc:  # e.g. a server that refuses our token, or none at that URL
        _stderr(f"shopsimrl data export: refused: the env server at {args.env} answers: [{exc.code}] {exc}")
        return EXIT_REFUSED
    print(f"wrote {count} {args.split} tasks to {args.out}")
    return 0


def _open_env(args: argparse.Namespace) -> Any:
    if args.env is not None:
        from shopsimrl.env import HttpEnvClient
        from shopsimrl.env.auth import load_token

        return HttpEnvClient(args.env, token=load_token(args.env_token_file))  # TokenError: a ValueError
    from shopsimrl.env import InProcessEnvClient, load_env

    options = {"products": args.products, "seed": args.seed, "cache_dir": args.cache_dir}
    env = load_env(**{k: v for k, v in options.items() if v is not None})
    return InProcessEnvClient(env, owns_env=True)


def _train(args: argparse.Namespace) -> int:
    from shopsimrl.slime.launch import LaunchError, TrainConfig, render

    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    try:
        config = TrainConfig.from_env()
        command = config.command(extra)
    except LaunchError as exc:
        _stderr(f"shopsimrl train: refused: {exc}")
        return EXIT_REFUSED
    if args.print_args:
        print("\n".join(config.train_args(extra)))
        return 0
    if args.dry_run:
        print(render(command))
        _stderr(f"# with {config.custom_config_path}: {json.dumps(config.custom_config())}")
        return 0
    try:
        config.check_installed()
    except LaunchError as exc:
        _stderr(f"shopsimrl train: refused: {exc}")
        return EXIT_REFUSED
    config.write_custom_config()
    _stderr(f"shopsimrl train: {render(command)}")
    return subprocess.run(command, check=False, cwd=config.slime_dir).returncode
