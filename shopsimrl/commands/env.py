"""``shopsimrl env serve | build | play | ray-serve``: the ShopSim environment on the command line.

Each handler imports the env's modules it runs (sqlite, rich, the server) when it runs, so
``shopsimrl --help`` stays fast; ``ray-serve``'s options and handler live with the Ray code
(``env/cluster.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from shopsimrl.argtypes import MAX_PORT, cache_folder, cannot_write_in, in_file, int_range, number
from shopsimrl.commands.dispatch import handled_by, refuse
from shopsimrl.env.auth import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    bind_refusal,
    is_loopback,
    load_token,
    token_file_is_private,
)
from shopsimrl.env.build import (
    MAX_PRODUCTS,
    MIN_PRODUCTS,
    CatalogError,
    ProgressFn,
    build_catalog,
    catalog_path,
    verify_catalog,
)
from shopsimrl.env.cluster import register as register_ray_serve
from shopsimrl.env.core import load_env
from shopsimrl.env.defaults import (
    DEFAULT_ACTION_LIMIT,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_PORT,
    DEFAULT_PRODUCTS,
    DEFAULT_SEED,
    DEFAULT_SLOTS,
    KEEP_ALIVE,
    MAX_SLOTS,
)
from shopsimrl.env.store import CatalogStore
from shopsimrl.errors import UsageError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's

_STAGES = {"products": "products", "index": "search index", "tasks": "tasks (verified by search)"}


def _catalog_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--products", type=int_range(MIN_PRODUCTS, MAX_PRODUCTS), default=DEFAULT_PRODUCTS,
                        help=f"catalog size (default {DEFAULT_PRODUCTS:,}, max {MAX_PRODUCTS:,})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"catalog seed (default {DEFAULT_SEED})")
    parser.add_argument("--tasks", type=int_range(1), default=None, help="number of tasks (default products/10, <= 2000)")
    parser.add_argument("--cache-dir", type=cache_folder, default=None,
                        help="where catalogs are cached (default $SHOPSIMRL_CACHE or ~/.cache/shopsimrl)")


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
    serve.add_argument("--processes", type=int_range(1), default=1,
                       help="server processes on consecutive ports from --port, over one catalog (default 1)")
    serve.add_argument("--token-file", type=in_file, default=None,
                       help="file holding the shared bearer token (or $SHOPSIM_ENV_TOKEN / $SHOPSIM_ENV_TOKEN_FILE); "
                            "required when --host is not a loopback address")
    serve.add_argument("--insecure", action="store_true",
                       help="serve beyond loopback without a token (anyone on the network can drive episodes)")
    _catalog_args(serve)
    handled_by(serve, _serve)

    build = sub.add_parser("build", help="build (or find) the catalog database")
    _catalog_args(build)
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    handled_by(build, _build)

    register_ray_serve(sub, _catalog_args)

    play = sub.add_parser("play", help="play an episode in the terminal")
    play.add_argument("--task", default=None, help="task id (default: a random task of --split)")
    play.add_argument("--split", default="train", choices=("train", "val", "test"))
    _catalog_args(play)
    handled_by(play, _play)  # a catalog that cannot be built or opened is a CatalogError: a refusal


def check_cache(products: int, seed: int, cache_dir: Path | None, tasks: int | None = None) -> None:
    """A catalog that is not built yet needs a cache folder it can be written in: refused before any work."""
    path = catalog_path(products, seed, cache_dir, tasks=tasks)
    if path.exists():
        return  # a read-only cache that holds the catalog is fine
    reason = cannot_write_in(path.parent)
    if reason is not None:
        raise UsageError(f"the catalog is not in {path.parent} yet and it cannot be built there ({reason}): "
                         f"choose another --cache-dir")


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
    check_cache(args.products, args.seed, args.cache_dir, args.tasks)
    return _with_progress(lambda cb: load_env(args.products, args.seed, args.cache_dir, tasks=args.tasks,
                                              progress=cb, **env_kwargs), args.products)


def _refuse(message: str) -> int:
    return refuse("shopsimrl env serve", message)


def _serve(args: argparse.Namespace) -> int:
    token = load_token(args.token_file)  # TokenError: a refusal
    refusal = bind_refusal(args.host, token, args.insecure)
    if refusal is not None:
        return _refuse(refusal)
    if args.processes < 1:
        return _refuse(f"--processes must be >= 1, got {args.processes}")
    if args.processes > 1 and not 1 <= args.port <= 65535 - args.processes + 1:
        return _refuse(f"--processes {args.processes} needs the ports --port..--port+{args.processes - 1}: "
                       f"give a --port between 1 and {65535 - args.processes + 1}")
    token_file = _token_file_used(args.token_file)
    if token_file and not token_file_is_private(token_file):
        print(f"shopsimrl env serve: WARNING: the token file {token_file} is readable by other users "
              f"(chmod 600 it)", file=sys.stderr, flush=True)
    if not args.lease_ttl > 0 or args.keep_alive < 1:
        return _refuse(f"--lease-ttl must be > 0 and --keep-alive >= 1, got {args.lease_ttl:g} and {args.keep_alive}")
    check_cache(args.products, args.seed, args.cache_dir, args.tasks)  # before the port is taken
    if args.processes > 1:
        return _serve_processes(args, token)
    if args.insecure and token is None and not is_loopback(args.host):  # each process warns for its port
        print(f"shopsimrl env serve: WARNING: --insecure: serving on {args.host} without a token; anyone who "
              f"can reach port {args.port} can reset, step and release episodes", file=sys.stderr, flush=True)
    # the server's modules (uvicorn, starlette, httpx: about 1.5 s) load only to serve
    from shopsimrl.env.processes import INSTANCE_ENV
    from shopsimrl.env.server import bind_socket, serve

    try:  # before the env is loaded: a busy port fails at once, and nothing claims to serve
        sock = bind_socket(args.host, args.port)
    except (OSError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"shopsimrl env serve: cannot listen on {args.host} port {args.port}: {reason} (stop what holds it, "
              f"or choose another --port)", file=sys.stderr, flush=True)
        return 1
    instance = os.environ.pop(INSTANCE_ENV, None)  # set by env serve --processes: the child's proof of identity
    try:
        env = _load(args, slots=args.slots, action_limit=args.action_limit, idle_timeout=args.lease_ttl)
        port = sock.getsockname()[1]  # --port 0: the one the system chose
        print(f"ShopSim serving on http://{args.host}:{port} ({args.slots} slots, {env.store.product_count:,} "
              f"products, lease TTL {args.lease_ttl:g}s{', token required' if token else ''})", flush=True)
        try:
            serve(env, args.host, port, log_level=args.log_level, keep_alive=args.keep_alive, token=token,
                  instance=instance, sock=sock)
        finally:
            env.close()
    finally:
        sock.close()
    return 0


def _token_file_used(token_file: str | None) -> str | None:
    """The file the token is read from: ``--token-file``, else ``$SHOPSIM_ENV_TOKEN_FILE`` when
    ``$SHOPSIM_ENV_TOKEN`` is not set (the order of :func:`~shopsimrl.env.auth.load_token`)."""
    if token_file:
        return token_file
    if os.environ.get(TOKEN_ENV, "").strip():
        return None
    return os.environ.get(TOKEN_FILE_ENV, "").strip() or None


def _serve_processes(args: argparse.Namespace, token: str | None) -> int:
    """Build (or find) the catalog once, then supervise one child server per process."""
    from shopsimrl.env.processes import supervise  # loads httpx: only to supervise servers

    _with_progress(lambda cb: build_catalog(args.products, args.seed, args.cache_dir, tasks=args.tasks,
                                            progress=cb), args.products)
    serve_args = ["--host", args.host, "--slots", str(args.slots), "--action-limit", str(args.action_limit),
                  "--log-level", args.log_level, "--products", str(args.products), "--seed", str(args.seed),
                  "--lease-ttl", repr(args.lease_ttl), "--keep-alive", str(args.keep_alive)]
    if args.tasks is not None:
        serve_args += ["--tasks", str(args.tasks)]
    if args.cache_dir is not None:
        serve_args += ["--cache-dir", str(args.cache_dir)]
    if args.insecure:
        serve_args.append("--insecure")
    return supervise(args.host, args.port, args.processes, serve_args, token)


def _play(args: argparse.Namespace) -> int:
    from shopsimrl.env.play import play  # loads rich: only to play

    env = _load(args, slots=1)
    try:
        return play(env, args.task, args.split)
    finally:
        env.close()
