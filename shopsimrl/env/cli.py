"""``shopsimrl env serve | build | play``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from shopsimrl.env.build import DEFAULT_PRODUCTS, DEFAULT_SEED, MAX_PRODUCTS, ProgressFn
from shopsimrl.env.sessions import DEFAULT_IDLE_TIMEOUT, KEEP_ALIVE

_STAGES = {"products": "products", "index": "search index", "tasks": "tasks (verified by search)"}


def _catalog_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--products", type=int, default=DEFAULT_PRODUCTS,
                        help=f"catalog size (default {DEFAULT_PRODUCTS:,}, max {MAX_PRODUCTS:,})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="catalog seed (default 0)")
    parser.add_argument("--tasks", type=int, default=None, help="number of tasks (default products/10, <= 2000)")
    parser.add_argument("--cache-dir", default=None,
                        help="where catalogs are cached (default $SHOPSIMRL_CACHE or ~/.cache/shopsimrl)")


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="the ShopSim environment: build, serve, play")
    env.set_defaults(handler=lambda _args: (env.print_help(), 2)[1])
    sub = env.add_subparsers(dest="env_command", metavar="SUBCOMMAND")

    serve = sub.add_parser("serve", help="serve the env over HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=5700)
    serve.add_argument("--slots", type=int, default=48, help="concurrent episodes (default 48)")
    serve.add_argument("--action-limit", type=int, default=30)
    serve.add_argument("--lease-ttl", type=float, default=DEFAULT_IDLE_TIMEOUT,
                       help=f"seconds a lease may go unused before its slot is reclaimed (a client that vanished; "
                            f"default {DEFAULT_IDLE_TIMEOUT:g})")
    serve.add_argument("--keep-alive", type=int, default=KEEP_ALIVE,
                       help=f"seconds an idle connection stays open (default {KEEP_ALIVE}; keep it above the "
                            f"clients' 30 s)")
    serve.add_argument("--log-level", default="warning")
    _catalog_args(serve)
    serve.set_defaults(handler=_serve)

    build = sub.add_parser("build", help="build (or find) the catalog database")
    _catalog_args(build)
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    build.set_defaults(handler=_build)

    play = sub.add_parser("play", help="play an episode in the terminal")
    play.add_argument("--task", default=None, help="task id (default: a random task of --split)")
    play.add_argument("--split", default="train", choices=("train", "val", "test"))
    _catalog_args(play)
    play.set_defaults(handler=_play)


def _with_progress(fn: Any, products: int) -> Any:
    """Run ``fn(progress)`` with a rich progress display for builds that take a while."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if products < 50_000:
        return fn(None)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                  TimeElapsedColumn(), transient=False) as progress:
        bars: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(_STAGES.get(stage, stage), total=total)
            progress.update(bars[stage], completed=done, total=total)

        callback: ProgressFn = report
        return fn(callback)


def _build(args: argparse.Namespace) -> int:
    from rich.console import Console

    from shopsimrl.env.build import build_catalog, catalog_path
    from shopsimrl.env.store import CatalogStore

    console = Console(highlight=False, soft_wrap=True)
    target = catalog_path(args.products, args.seed, args.cache_dir, tasks=args.tasks)
    cached = target.exists() and not args.force
    started = time.perf_counter()
    path = _with_progress(lambda cb: build_catalog(args.products, args.seed, args.cache_dir, tasks=args.tasks,
                                                   force=args.force, progress=cb), args.products)
    store = CatalogStore(path)
    meta = store.meta
    store.close()
    verb = "found cached" if cached else f"built in {time.perf_counter() - started:.1f}s"
    console.print(f"{verb}: {path}", markup=False)
    console.print(f"products {meta['products']:,} | seed {meta['seed']} | tasks {meta['task_counts']} | "
                  f"schema v{meta['schema_version']}", markup=False)
    return 0


def _load(args: argparse.Namespace, **env_kwargs: Any) -> Any:
    from shopsimrl.env.core import load_env

    return _with_progress(lambda cb: load_env(args.products, args.seed, args.cache_dir, tasks=args.tasks,
                                              progress=cb, **env_kwargs), args.products)


def _serve(args: argparse.Namespace) -> int:
    from shopsimrl.env.server import serve

    if not args.lease_ttl > 0 or args.keep_alive < 1:
        print("shopsimrl env serve: --lease-ttl must be > 0 and --keep-alive >= 1", file=sys.stderr)
        return 2
    env = _load(args, slots=args.slots, action_limit=args.action_limit, idle_timeout=args.lease_ttl)
    print(f"ShopSim serving on http://{args.host}:{args.port} ({args.slots} slots, "
          f"{env.store.product_count:,} products, lease TTL {args.lease_ttl:g}s)", flush=True)
    try:
        serve(env, args.host, args.port, log_level=args.log_level, keep_alive=args.keep_alive)
    finally:
        env.close()
    return 0


def _play(args: argparse.Namespace) -> int:
    from shopsimrl.env.play import play

    env = _load(args, slots=1)
    try:
        return play(env, args.task, args.split)
    finally:
        env.close()
