"""Env servers on a Ray cluster: N per node, as Ray actors, and the URL list for the launch scripts.

slime already runs on Ray, so the env servers ride on the same cluster instead of
a second scheduler: :func:`start_ray_env_servers` places ``per_node`` actors on
every alive node (hard node affinity), each loading the catalog on its node
(deterministic from the seed: same file everywhere, checked by fingerprint) and
serving it from a thread of its own process: one process per server, so
servers never share a GIL.  An actor's server lives exactly as long as the
actor; the actors live as long as the driver that started them (the
``shopsimrl env ray-serve`` command, which ``scripts/run_full_train.sh`` runs
with ``ENV_SERVERS_PER_NODE``).

Ray is an optional extra (``pip install 'shopsimrl[ray]'``): it is imported only
inside these functions, never by ``import shopsimrl``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from shopsimrl.argtypes import MAX_PORT, in_file, int_range, out_file
from shopsimrl.defaults import (
    DEFAULT_ACTION_LIMIT,
    DEFAULT_CATALOG_SEED,
    DEFAULT_PORT,
    DEFAULT_PRODUCTS,
    DEFAULT_SLOTS,
    MAX_SLOTS,
)
from shopsimrl.env.auth import TokenError, bind_refusal, load_token
from shopsimrl.env.core import load_env
from shopsimrl.env.fingerprint import env_fingerprint, fingerprint_differences
from shopsimrl.errors import Interrupted
from shopsimrl.io import atomic_write_text

RAY_HINT = "the Ray helper needs Ray: pip install 'shopsimrl[ray]'"
DEFAULT_STARTUP_TIMEOUT = 600.0  # a fresh node builds its catalog first (20k products: seconds; 1M: minutes)


class EnvServerActor:
    """One env server in a Ray actor's process (wrapped by ``ray.remote`` in :func:`start_ray_env_servers`)."""

    def __init__(self, *, host: str | None, port: int, token: str | None, catalog: dict[str, Any],
                 env_options: dict[str, Any]) -> None:
        import ray  # the optional extra: loaded only where Ray is used, never by ``import shopsimrl``

        from shopsimrl.env.server import ServerThread  # FastAPI and uvicorn: only in the actor's process

        node_ip = ray.util.get_node_ip_address()
        bind = host or node_ip
        self._env = load_env(catalog["products"], catalog["seed"], catalog.get("cache_dir"),
                             tasks=catalog.get("tasks"), **env_options)
        self._server = ServerThread(self._env, host=bind, port=port, token=token).start()
        reach = node_ip if bind in ("0.0.0.0", "::") else bind
        self._url = f"http://{reach}:{self._server.port}"
        self._fingerprint = env_fingerprint(self._env)

    def info(self) -> dict[str, Any]:
        return {"url": self._url, "fingerprint": self._fingerprint}

    def stop(self) -> None:
        self._server.stop()
        self._env.close()


@dataclass
class RayEnvServers:
    """The started actors and their URLs; :meth:`stop` ends them all."""

    urls: list[str]
    actors: list[Any] = field(repr=False)
    nodes: list[str] = field(default_factory=list)

    @property
    def env_url(self) -> str:
        """The comma list ``SHOPSIM_ENV_URL`` and ``--env`` take."""
        return ",".join(self.urls)

    def stop(self, timeout: float = 30.0) -> None:
        import ray  # the optional extra (see the module's docstring)

        try:
            ray.get([actor.stop.remote() for actor in self.actors], timeout=timeout)
        except Exception:  # an actor already gone: killing it below is all that is left
            pass
        for actor in self.actors:
            ray.kill(actor)


def alive_nodes() -> list[dict[str, Any]]:
    """Ray's alive nodes, in a stable order (by node IP, then id)."""
    import ray  # the optional extra (see the module's docstring)

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: (n.get("NodeManagerAddress", ""), n["NodeID"]))


def start_ray_env_servers(per_node: int = 1, *, port: int = DEFAULT_PORT, host: str | None = None,
                          slots: int = DEFAULT_SLOTS, action_limit: int = DEFAULT_ACTION_LIMIT,
                          products: int = DEFAULT_PRODUCTS, seed: int = DEFAULT_CATALOG_SEED, tasks: int | None = None,
                          cache_dir: str | None = None, token: str | None = None, insecure: bool = False,
                          num_cpus: float = 1.0, startup_timeout: float = DEFAULT_STARTUP_TIMEOUT) -> RayEnvServers:
    """Start ``per_node`` env servers on every alive node of the connected Ray cluster (``ray.init`` first).

    Servers of one node take the ports ``port``, ``port+1``, ... (``port=0``: any free port each).
    ``host=None`` binds each server to its node's IP, which needs ``token`` (or ``insecure``);
    ``num_cpus``: the Ray CPUs each server reserves (a busy server keeps one core busy).
    Raises ``RuntimeError`` if a server fails to start or the servers disagree on the fingerprint.
    """
    # the optional extra (see the module's docstring)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if per_node < 1:
        raise ValueError(f"per_node must be >= 1, got {per_node}")
    refusal = bind_refusal(host or ray.util.get_node_ip_address(), token, insecure)
    if refusal is not None:
        raise ValueError(refusal)
    remote_cls = ray.remote(num_cpus=num_cpus, max_restarts=0)(EnvServerActor)
    catalog = {"products": products, "seed": seed, "tasks": tasks, "cache_dir": cache_dir}
    env_options = {"slots": slots, "action_limit": action_limit}
    actors, nodes = [], []
    for node in alive_nodes():
        for i in range(per_node):
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            actors.append(remote_cls.options(scheduling_strategy=strategy, name=None).remote(
                host=host, port=0 if port == 0 else port + i, token=token, catalog=catalog,
                env_options=env_options))
            nodes.append(node["NodeID"])
    servers = RayEnvServers(urls=[], actors=actors, nodes=nodes)
    try:
        infos = ray.get([actor.info.remote() for actor in actors], timeout=startup_timeout)
    except Exception as exc:
        servers.stop()
        raise RuntimeError(f"an env server actor failed to start: {type(exc).__name__}: {exc}") from exc
    for info in infos[1:]:
        differences = fingerprint_differences(infos[0]["fingerprint"], info["fingerprint"])
        if differences:
            servers.stop()
            raise RuntimeError(f"env server {info['url']} serves another shop than {infos[0]['url']}: "
                               + "; ".join(differences))
    servers.urls = [info["url"] for info in infos]
    return servers


# -- `shopsimrl env ray-serve` ------------------------------------------------------------------------


def register(sub: Any, catalog_args: Any) -> None:
    """Add ``ray-serve`` to the ``env`` sub-commands (called by env/cli.py)."""
    p = sub.add_parser("ray-serve", help="start env servers on every node of a Ray cluster (needs shopsimrl[ray])")
    p.add_argument("--per-node", type=int_range(1), default=1, help="env server processes per Ray node (default 1)")
    p.add_argument("--address", default="auto",
                   help="the Ray cluster (default 'auto': $RAY_ADDRESS or the local node's; 'local' starts one)")
    p.add_argument("--host", default=None, help="bind address (default: each node's IP, which needs a token)")
    p.add_argument("--port", type=int_range(0, MAX_PORT), default=DEFAULT_PORT,
                   help=f"first port on each node (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--slots", type=int_range(1, MAX_SLOTS), default=DEFAULT_SLOTS,
                   help=f"concurrent episodes per server (default {DEFAULT_SLOTS})")
    p.add_argument("--action-limit", type=int_range(1), default=DEFAULT_ACTION_LIMIT,
                   help=f"env steps per episode before the env ends it (default {DEFAULT_ACTION_LIMIT})")
    p.add_argument("--token-file", type=in_file, default=None, help="the shared token (or $SHOPSIM_ENV_TOKEN / _FILE)")
    p.add_argument("--insecure", action="store_true", help="serve beyond loopback without a token")
    p.add_argument("--urls-file", type=out_file, default=None, help="also write the comma list of URLs here")
    catalog_args(p)
    p.set_defaults(handler=_ray_serve)


class _Stop(Interrupted):
    pass


def _raise_stop(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop()


def _ray_serve(args: argparse.Namespace) -> int:
    def refuse(message: str) -> int:
        print(f"shopsimrl env ray-serve: refused: {message}", file=sys.stderr, flush=True)
        return 2

    try:
        import ray  # the optional extra: its absence is refused in one line
    except ImportError:
        return refuse(RAY_HINT)
    if args.per_node < 1:
        return refuse(f"--per-node must be >= 1, got {args.per_node}")
    try:
        token = load_token(args.token_file)
    except TokenError as exc:
        return refuse(str(exc))
    if args.address == "auto" and os.environ.get("RAY_ADDRESS", "").startswith(("http://", "https://")):
        # the dashboard URL the launch scripts give `ray job submit`, not a cluster address: find the local one
        os.environ.pop("RAY_ADDRESS")
    previous = signal.getsignal(signal.SIGTERM)
    servers = None
    try:
        try:
            ray.init(address=None if args.address == "local" else args.address, log_to_driver=False,
                     include_dashboard=False, configure_logging=False)
        except ConnectionError as exc:  # no Ray cluster at --address: the user's to start or name
            return refuse(f"--address {args.address}: {str(exc).strip(chr(39))}")
        signal.signal(signal.SIGTERM, _raise_stop)  # after ray.init, which installs a SIGTERM handler of its own
        try:
            servers = start_ray_env_servers(
                args.per_node, port=args.port, host=args.host, slots=args.slots, action_limit=args.action_limit,
                products=args.products, seed=args.seed, tasks=args.tasks, cache_dir=args.cache_dir, token=token,
                insecure=args.insecure)
        except ValueError as exc:
            return refuse(str(exc))
        if args.urls_file is not None:
            atomic_write_text(args.urls_file, servers.env_url + "\n")
        print(f"ShopSim serving {len(servers.urls)} env servers on {len(set(servers.nodes))} Ray node(s); "
              f"Ctrl-C stops them all", flush=True)
        print(f"SHOPSIM_ENV_URL={servers.env_url}", flush=True)
        while True:  # until a signal
            time.sleep(3600)
        return 0
    except (KeyboardInterrupt, _Stop):
        print("shopsimrl env ray-serve: stopping every env server", file=sys.stderr, flush=True)
        return 0
    except RuntimeError as exc:
        print(f"shopsimrl env ray-serve: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if servers is not None:
                servers.stop()
            if ray.is_initialized():
                ray.shutdown()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, interrupt)
