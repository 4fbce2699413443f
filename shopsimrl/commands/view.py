"""``shopsimrl view [FOLDER]``: the runs under FOLDER in a browser, from the metrics down to each episode.

TensorBoard's convention: the folder defaults to ``runs/``, the URL is printed, ``--port`` and ``--host``
choose where it listens (127.0.0.1 unless told otherwise; any other address prints a warning, as the
viewer has no login).  Read-only; see docs/view.md.  Not ``rollout --view``, the live terminal view.
"""

from __future__ import annotations

import argparse
import socket
import sys

from shopsimrl.argtypes import existing_folder, int_range
from shopsimrl.commands.dispatch import handled_by, refuse
from shopsimrl.defaults import DEFAULT_HOST, DEFAULT_OUT, DEFAULT_VIEW_PORT
from shopsimrl.io import printable

EXIT_OK = 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "view",
        help="look at runs in a browser: metrics, steps, groups, episodes (read-only web app)",
        description="Serve a read-only web app over the run folders under FOLDER (or over FOLDER itself when it is "
        "one run): runs, a run's charts (several overlaid), a step's groups and wave timeline, an episode's trace, "
        "a prompt's groups across the run.  The page needs no network.  Ctrl-C stops it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("folder", nargs="?", default=str(DEFAULT_OUT), type=existing_folder, metavar="FOLDER",
                   help="a folder of runs (rollout's --out) or one run folder")
    p.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (0.0.0.0: every network; warned)")
    p.add_argument("--port", type=int_range(0, 65535), default=DEFAULT_VIEW_PORT, help="port (0: any free one)")
    handled_by(p, handle)


def handle(args: argparse.Namespace) -> int:
    # the web stack (uvicorn, starlette, jinja2) loads only to serve: --help stays fast
    import uvicorn

    from shopsimrl.env.auth import is_loopback
    from shopsimrl.env.server import bind_socket
    from shopsimrl.webview.app import create_app

    if not is_loopback(args.host):
        print(f"shopsimrl view: WARNING: --host {printable(args.host)}: anyone who can reach this address can read "
              f"every run under {printable(args.folder)} (prompts, traces, options); the viewer has no login",
              file=sys.stderr, flush=True)
    try:
        sock = bind_socket(args.host, args.port)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        return refuse("shopsimrl view", f"cannot listen on {printable(args.host)} port {args.port}: {reason} "
                                        f"(choose another --port)")
    sock.listen(128)  # before the URL is printed: a browser opened on it at once waits instead of being refused
    port = sock.getsockname()[1]
    shown = socket.gethostname() if args.host in ("0.0.0.0", "::") else args.host.strip("[]")
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"
    print(f"shopsimrl view: {printable(args.folder.resolve(), limit=500)} at {url} (Ctrl-C to stop)", flush=True)
    app = create_app(args.folder)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down on Ctrl-C, then raises it again: the way a viewer stops
        print("shopsimrl view: stopped", file=sys.stderr, flush=True)
    finally:
        sock.close()
    return EXIT_OK
