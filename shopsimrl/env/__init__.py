"""ShopSim: the shopping environment ShopSimRL trains agents in.

Import cost stays low: the env core, the in-process client and the types load
eagerly-but-lightly on first use, while httpx (HttpEnvClient) and FastAPI /
uvicorn (server) load only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl.env.types import (
    FEEDBACK_CODES,
    HEALTHZ_KEYS,
    TERMINATE_REASONS,
    BadRequestError,
    EnvClient,
    EnvClientWrapper,
    EnvError,
    EnvUnavailableError,
    EpisodeFinishedError,
    InvalidRequestError,
    LeaseConflictError,
    NoFreeSlotError,
    Observation,
    QueryTooLongError,
    ResetResult,
    StepResult,
    Task,
    UnknownTaskError,
)
from shopsimrl.lazy import lazy_names

if TYPE_CHECKING:
    from shopsimrl.env.build import build_catalog, catalog_path, default_cache_dir
    from shopsimrl.env.core import ShopSimEnv, load_env
    from shopsimrl.env.http_client import HttpEnvClient
    from shopsimrl.env.inprocess import InProcessEnvClient
    from shopsimrl.env.pages import all_tools, tool_call_to_action
    from shopsimrl.env.reward import compute_reward
    from shopsimrl.env.server import create_app

_LAZY = {
    "ShopSimEnv": "shopsimrl.env.core",
    "load_env": "shopsimrl.env.core",
    "InProcessEnvClient": "shopsimrl.env.inprocess",
    "HttpEnvClient": "shopsimrl.env.http_client",
    "build_catalog": "shopsimrl.env.build",
    "catalog_path": "shopsimrl.env.build",
    "default_cache_dir": "shopsimrl.env.build",
    "compute_reward": "shopsimrl.env.reward",
    "tool_call_to_action": "shopsimrl.env.pages",
    "all_tools": "shopsimrl.env.pages",
    "create_app": "shopsimrl.env.server",
}

__all__ = [
    "FEEDBACK_CODES", "HEALTHZ_KEYS", "TERMINATE_REASONS", "BadRequestError", "EnvClient", "EnvClientWrapper", "EnvError", "EnvUnavailableError",
    "EpisodeFinishedError", "InvalidRequestError", "LeaseConflictError", "NoFreeSlotError", "Observation",
    "QueryTooLongError", "ResetResult", "StepResult", "Task", "UnknownTaskError", *_LAZY,
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
