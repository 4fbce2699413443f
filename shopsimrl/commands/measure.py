"""``shopsimrl measure``: success rate and group labels of the heuristic policy, as JSON on stdout.

Groups of sibling episodes on the rollout's own group runner (``rollout/measure.py``); the
numbers in docs/agent.md come from here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from shopsimrl.argtypes import cache_folder, int_range
from shopsimrl.commands.catalog import check_cache
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.commands.limits import MAX_SIBLINGS, MAX_TASKS, WHY_SIBLINGS
from shopsimrl.defaults import (
    DEFAULT_CATALOG_SEED,
    DEFAULT_MEASURE_TASKS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_PRODUCTS,
)
from shopsimrl.env.build import MAX_PRODUCTS, MIN_PRODUCTS
from shopsimrl.errors import UsageError

SPLITS = ("train", "val", "test")


def json_object(text: str) -> dict[str, Any]:
    """``--options``: a JSON object (checked while parsing)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"temperature\": 0.8}}', got {text!r:.200}")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("measure", help="success rate and group labels of the heuristic policy",
                              description="Success rate and group labels of the heuristic policy.")
    p.add_argument("--products", type=int_range(MIN_PRODUCTS, MAX_PRODUCTS), default=DEFAULT_PRODUCTS)
    p.add_argument("--catalog-seed", type=int, default=DEFAULT_CATALOG_SEED)
    p.add_argument("--cache-dir", type=cache_folder, default=None)
    p.add_argument("--split", default="train", choices=SPLITS)
    p.add_argument("--tasks", type=int_range(1, MAX_TASKS), default=DEFAULT_MEASURE_TASKS)
    p.add_argument("--siblings", type=int_range(1, MAX_SIBLINGS, why_high=WHY_SIBLINGS), default=DEFAULT_N_SAMPLES_PER_PROMPT)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--options", type=json_object, default={},
                   help='heuristic options as JSON, e.g. \'{"temperature": 0.8}\'')
    handled_by(p, handle)


def handle(args: argparse.Namespace) -> int:
    # the agent, the env and the group runner load only when the command runs: --help stays fast
    from shopsimrl.agent import make_policy
    from shopsimrl.env import InProcessEnvClient, load_env
    from shopsimrl.rollout.measure import measure

    check_cache(args.products, args.catalog_seed, args.cache_dir)
    try:
        policy = make_policy("heuristic", **args.options)
    except (TypeError, ValueError) as exc:  # the heuristic's own check of the options given
        raise UsageError(f"--options: {exc}") from None

    async def run() -> dict[str, Any]:
        client = InProcessEnvClient(load_env(args.products, args.catalog_seed, args.cache_dir), owns_env=True)
        try:
            task_ids = (await client.list_tasks(args.split))[: args.tasks]
            return (await measure(client, policy, task_ids, siblings=args.siblings, seed=args.seed)).as_dict()
        finally:
            await policy.aclose()
            await client.aclose()

    print(json.dumps(asyncio.run(run()), indent=2))
    return 0
