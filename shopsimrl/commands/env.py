"""``shopsimrl env build | serve | play | ray-serve``: the ShopSim environment on the command line.

``serve`` runs in ``env_serve.py``; ``ray-serve``'s options and handler live with the Ray code
(``env/ray_servers.py``); the catalog options and loading are shared (``catalog.py``).  The server,
rich and the terminal player load only when their command runs, so ``shopsimrl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from shopsimrl.argtypes import MAX_PORT, cannot_write_in, in_file, int_range, number
from shopsimrl.commands.catalog import catalog_args, load, with_progress
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.commands.env_serve import serve_command
from shopsimrl.commands.limits import MAX_SERVER_PROCESSES, WHY_PROCESSES
from shopsimrl.defaults import (
    DEFAULT_ACTION_LIMIT,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_PORT,
    DEFAULT_SLOTS,
    KEEP_ALIVE,
    MAX_SLOTS,
)
from shopsimrl.env.build import CatalogError, build_catalog, catalog_path, verify_catalog
from shopsimrl.env.ray_servers import register as register_ray_serve
from shopsimrl.env.store import CatalogStore
from shopsimrl.errors import UsageError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="the ShopSim environment: build, serve, play")
    env.set_defaults(handler=lambda _args: (env.print_help(), 2)[1])
    sub = env.add_subparsers(dest="env_command", metavar="SUBCOMMAND")

    serve = sub.add_parser("serve", help="serve the env over HTTP")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int_range(1, MAX_PORT), default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument("--slots", type=int_range(1, MAX_SLOTS), default=DEFAULT_SLOTS, help=f"concurrent episodes (default {DEFAULT_SLOTS})")
    serve.add_argument("--action-limit", type=int_range(1), default=DEFAULT_ACTION_LIMIT,
                       help=f"env steps per episode before the env ends it (default {DEFAULT_ACTION_LIMIT})")
    serve.add_argument("--lease-ttl", type=number(above=0), default=DEFAULT_IDLE_TIMEOUT,
                       help=f"seconds a lease may go unused before its slot is reclaimed (a client that vanished; "
                            f"default {DEFAULT_IDLE_TIMEOUT:g})")
    serve.add_argument("--keep-alive", type=int_range(1), default=KEEP_ALIVE,
                       help=f"seconds an idle connection stays open (default {KEEP_ALIVE}; keep it above the "
                            f"clients' 30 s)")
    serve.add_argument("--log-level", default="warning", choices=LOG_LEVELS)
    serve.add_argument("--processes", type=int_range(1, MAX_SERVER_PROCESSES, why_high=WHY_PROCESSES), default=1,
                       help="server processes on consecutive ports from --port, over one catalog (default 1)")
    serve.add_argument("--token-file", type=in_file, default=None,
                       help="file holding the shared bearer token (or $SHOPSIM_ENV_TOKEN / $SHOPSIM_ENV_TOKEN_FILE); "
                            "required when --host is not a loopback address")
    serve.add_argument("--insecure", action="store_true",
                       help="serve beyond loopback without a token (anyone on the network can drive episodes)")
    catalog_args(serve)
    handled_by(serve, serve_command)

    build = sub.add_parser("build", help="build (or find) the catalog database")
    catalog_args(build)
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    handled_by(build, _build)

    register_ray_serve(sub, catalog_args)

    play = sub.add_parser("play", help="play an episode in the terminal")
    play.add_argument("--task", default=None, help="task id (default: a random task of --split)")
    play.add_argument("--split", default="train", choices=("train", "val", "test"))
    catalog_args(play)
    handled_by(play, _play)  # a catalog that cannot be built or opened is a CatalogError: a refusal


def _build(args: argparse.Namespace) -> int:
    from rich.console import Console  # rich loads only when a command prints with it: --help stays fast

    console = Console(highlight=False, soft_wrap=True)
    target = catalog_path(args.products, args.seed, args.cache_dir, tasks=args.tasks)
    if args.force or not target.exists():
        reason = cannot_write_in(target.parent)
        if reason is not None:
            raise UsageError(f"cannot build the catalog in {target.parent} ({reason}): choose another --cache-dir")
    cached = target.exists() and not args.force
    if cached:
        try:
            verify_catalog(target)
        except CatalogError:
            cached = False  # rebuilt below, with a message
    started = time.perf_counter()
    path = with_progress(lambda cb: build_catalog(args.products, args.seed, args.cache_dir, tasks=args.tasks,
                                                   force=args.force, progress=cb), args.products)
    store = CatalogStore(path)
    meta = store.meta
    store.close()
    verb = "found cached" if cached else f"built in {time.perf_counter() - started:.1f}s"
    console.print(f"{verb}: {path}", markup=False)
    console.print(f"products {meta['products']:,} | seed {meta['seed']} | tasks {meta['task_counts']} | "
                  f"schema v{meta['schema_version']}", markup=False)
    return 0


def _play(args: argparse.Namespace) -> int:
    from shopsimrl.env.play import play  # loads rich: only to play

    env = load(args, slots=1)
    try:
        return play(env, args.task, args.split)
    finally:
        env.close()
