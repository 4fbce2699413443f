"""``shopsimrl data export``: slime's prompt file (one task id per line) from the env's task split, with each task's
record on earlier runs as a label if asked (``--zero-spread-from``)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from shopsimrl.argtypes import cache_folder, existing_folder, in_file, int_range, out_file, server_url
from shopsimrl.commands.catalog import check_cache
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.defaults import DEFAULT_CATALOG_SEED, DEFAULT_PRODUCTS, DEFAULT_PROMPT_DATA
from shopsimrl.env import InProcessEnvClient, load_env
from shopsimrl.env.auth import load_token
from shopsimrl.env.build import MAX_PRODUCTS, MIN_PRODUCTS
from shopsimrl.env.types import EnvError
from shopsimrl.errors import UsageError
from shopsimrl.slime.data import export_prompts


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
    export.add_argument("--zero-spread-from", type=existing_folder, nargs="+", default=None, metavar="RUN",
                        help="earlier run folders (shopsimrl rollout): write each task's share of zero-spread groups "
                        "there as the label zero_spread_share, which the forecast rule reads (docs/forecast.md)")
    handled_by(export, _export)


def _export(args: argparse.Namespace) -> int:
    if args.env is not None and any(v is not None for v in (args.products, args.seed, args.cache_dir)):
        raise UsageError("--products/--seed/--cache-dir configure the in-process env; drop them with --env")
    if args.env is None and args.env_token_file is not None:
        raise UsageError("--env-token-file: used only with --env URL")

    labels = None
    if args.zero_spread_from:  # NotARunError / BadFileError: a refusal naming the folder or file
        from shopsimrl.learn.outcomes import LABEL, zero_spread_shares  # reads run folders: only when asked

        catalog = None if args.env is not None else {
            "products": args.products or DEFAULT_PRODUCTS,
            "catalog_seed": DEFAULT_CATALOG_SEED if args.seed is None else args.seed}
        shares = zero_spread_shares(args.zero_spread_from, catalog)
        labels = {task: {LABEL: share} for task, share in shares.items()}

    async def run() -> int:
        env = _open_env(args)
        try:
            return await export_prompts(env, args.split, args.out, labels)
        finally:
            await env.aclose()

    try:
        count = asyncio.run(run())
    except EnvError as exc:  # e.g. a server that refuses our token, or none at that URL
        raise UsageError(f"the env server at {args.env} answers: [{exc.code}] {exc}") from None
    print(f"wrote {count} {args.split} tasks to {args.out}"
          + (f", {len(labels)} of them labelled from {len(args.zero_spread_from)} runs" if labels is not None else ""))
    return 0


def _open_env(args: argparse.Namespace) -> Any:
    if args.env is not None:
        from shopsimrl.env import HttpEnvClient  # loads httpx: only for a server

        return HttpEnvClient(args.env, token=load_token(args.env_token_file))  # TokenError: a refusal
    options = {"products": args.products, "seed": args.seed, "cache_dir": args.cache_dir}
    check_cache(args.products or DEFAULT_PRODUCTS, DEFAULT_CATALOG_SEED if args.seed is None else args.seed, args.cache_dir)
    env = load_env(**{k: v for k, v in options.items() if v is not None})
    return InProcessEnvClient(env, owns_env=True)
