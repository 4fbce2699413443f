"""``shopsimrl env serve``: ShopSim over HTTP, one process or several over one catalog."""

from __future__ import annotations

import argparse
import os
import sys

from shopsimrl.commands.catalog import check_cache, load, with_progress
from shopsimrl.commands.dispatch import refuse
from shopsimrl.env.auth import TOKEN_ENV, TOKEN_FILE_ENV, bind_refusal, is_loopback, load_token, token_file_is_private
from shopsimrl.env.build import build_catalog


def _refuse(message: str) -> int:
    return refuse("shopsimrl env serve", message)


def serve_command(args: argparse.Namespace) -> int:
    """Check the options (a refusal before the port is taken), then serve until stopped."""
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
        env = load(args, slots=args.slots, action_limit=args.action_limit, idle_timeout=args.lease_ttl)
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

    with_progress(lambda cb: build_catalog(args.products, args.seed, args.cache_dir, tasks=args.tasks,
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
