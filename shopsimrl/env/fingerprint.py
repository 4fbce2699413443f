"""What makes two env servers interchangeable: the same catalog, the same tasks, the same action limit.

A client spread over several servers sends one episode's siblings to whichever
server has room, so every server must answer the same task id with the same
task and score it the same way.  ``/healthz`` carries this fingerprint; the
multi-server client compares it before the first reset and refuses a mix.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FINGERPRINT_FIELDS = ("catalog_seed", "products", "tasks", "task_counts", "schema_version", "action_limit")


def env_fingerprint(env: Any) -> dict[str, Any]:
    """The fingerprint of a :class:`~shopsimrl.env.core.ShopSimEnv` (catalog metadata + action limit) and its id."""
    meta = env.store.meta
    fields = {
        "catalog_seed": meta.get("seed"),
        "products": meta.get("products"),
        "tasks": meta.get("tasks"),
        "task_counts": env.store.task_counts(),
        "schema_version": meta.get("schema_version"),
        "action_limit": env.action_limit,
    }
    return {**fields, "id": fingerprint_id(fields)}


def fingerprint_id(fields: dict[str, Any]) -> str:
    """A short stable hash of the fields (for logs and one-glance comparison)."""
    canonical = json.dumps({k: fields.get(k) for k in FINGERPRINT_FIELDS}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def fingerprint_differences(reference: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """``["products 2000 vs 20000", ...]``: the fields in which ``other`` differs from ``reference``."""
    return [f"{key} {reference.get(key)!r} vs {other.get(key)!r}"
            for key in FINGERPRINT_FIELDS if reference.get(key) != other.get(key)]
