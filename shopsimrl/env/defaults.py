"""The env's defaults, each defined once (like httpx's ``_config``): every module, CLI flag and
script that needs one imports it from here, so a default cannot differ from one place to another.

This module imports nothing, so the light option parsers (``shopsimrl env serve --help``) and the
slime launcher can read it without loading the env.
"""

from __future__ import annotations

#: Where ``shopsimrl env serve`` listens: loopback, so nothing beyond this machine reaches it.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5700
#: The URL clients use when none is given (the slime hooks, the training scripts).
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"

#: Episodes at once per env server (``--slots``).
DEFAULT_SLOTS = 48
#: Env steps an episode may take before the env ends it with ``action_limit`` (``--action-limit``).
DEFAULT_ACTION_LIMIT = 30
#: Seconds a ``reset`` waits for a free slot.
DEFAULT_RESET_TIMEOUT = 30.0
#: Seconds a lease may sit unused before the pool reclaims it (a client that vanished; ``--lease-ttl``).
DEFAULT_IDLE_TIMEOUT = 300.0
#: Seconds the HTTP server keeps a client's idle connection open; clients keep theirs for less
#: (``HttpEnvClient``: 30 s), so none sends into a connection the server is closing.
KEEP_ALIVE = 75

#: The catalog: products and seed (``--products``, ``--seed``).
DEFAULT_PRODUCTS = 20_000
DEFAULT_SEED = 0

#: Seconds an env client waits for one request (``HttpEnvClient``, ``EnvPool``, ``--env-timeout``).
DEFAULT_CLIENT_TIMEOUT = 30.0

#: The most slots one env server takes (``--slots``): each is a list entry made up front, so a typo of a few
#: more zeros would be a MemoryError rather than a server.
MAX_SLOTS = 100_000
