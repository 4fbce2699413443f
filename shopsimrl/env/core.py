"""ShopSimEnv: the synchronous, thread-safe environment both clients wrap.

Each episode lives in a leased slot (sessions.py); a lease's steps are
serialized by its own lock, so different episodes step in parallel while one
episode never sees two actions at once.  Everything shared (the catalog store,
the search cache, the slot pool) is itself thread-safe.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl import __version__
from shopsimrl.defaults import (
    DEFAULT_ACTION_LIMIT,
    DEFAULT_CATALOG_SEED,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_PRODUCTS,
    DEFAULT_RESET_TIMEOUT,
    DEFAULT_SLOTS,
)
from shopsimrl.env.build import ProgressFn, build_catalog
from shopsimrl.env.catalog import Product
from shopsimrl.env.pages import (
    DONE,
    InvalidAction,
    PageState,
    Purchase,
    apply_action,
    render,
    tools_for,
)
from shopsimrl.env.reward import compute_reward, zero_reward
from shopsimrl.env.search import SearchEngine, SearchHits
from shopsimrl.env.sessions import Lease, SlotPool
from shopsimrl.env.store import CatalogStore
from shopsimrl.env.types import (
    TERMINATE_REASONS,
    BadRequestError,
    EpisodeFinishedError,
    LeaseConflictError,
    Observation,
    ResetResult,
    StepResult,
    Task,
)
from shopsimrl.io import well_formed


@dataclass
class Episode:
    task: Task
    state: PageState = field(default_factory=PageState)
    steps: int = 0
    done: bool = False
    end_reason: str | None = None
    reward_detail: dict[str, Any] | None = None


class ShopSimEnv:
    """The shop: reset / step / terminate / release over leased episode slots."""

    def __init__(self, db_path: str | os.PathLike[str], *, slots: int = DEFAULT_SLOTS,
                 action_limit: int = DEFAULT_ACTION_LIMIT, reset_timeout: float = DEFAULT_RESET_TIMEOUT,
                 search_cache_size: int = 4096, idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> None:
        """``idle_timeout``: seconds a lease may go unused before it is reclaimed (None: never)."""
        if action_limit < 1:
            raise ValueError("action_limit must be >= 1")
        self.store = CatalogStore(db_path)
        self.search_engine = SearchEngine(self.store.connection, cache_size=search_cache_size)
        self.pool: SlotPool[Episode] = SlotPool(slots, idle_timeout=idle_timeout)
        self.action_limit = action_limit
        self.reset_timeout = reset_timeout
        self._stats_lock = threading.Lock()
        self._stats = {"resets": 0, "steps": 0, "invalid_actions": 0, "purchases": 0, "truncations": 0}

    # -- page context (used by pages.py) ------------------------------------------------
    def search(self, query: str) -> SearchHits:
        return self.search_engine.search(query)

    def products(self, rowids: Sequence[int]) -> list[Product]:
        return self.store.products(rowids)

    # -- the episode API ------------------------------------------------------------------
    def reset(self, task_id: str, *, timeout: float | None = None,
              cancelled: threading.Event | None = None) -> ResetResult:
        """Start an episode of ``task_id`` in a free slot (waits up to ``timeout`` for one).

        ``cancelled``: set (then ``pool.wake()``) when the caller went away; the wait ends without a slot.
        """
        task = self.store.task(task_id)  # an unknown task fails before any slot is taken
        lease = self.pool.acquire(Episode(task), self.reset_timeout if timeout is None else timeout, cancelled)
        try:
            with lease.lock:
                observation = self._observe(lease.episode)
        except BaseException:
            self.pool.release(lease.lease_id)
            raise
        self._count("resets")
        return ResetResult(lease_id=lease.lease_id, task=task, observation=observation)

    def step(self, lease_id: str, action: str, *, request_id: str | None = None) -> StepResult:
        """Apply ``action``.  A repeated ``request_id`` (a client retrying a step whose reply it lost)
        gets the first reply again instead of applying the action twice.  Half a surrogate pair in ``action``
        (no UTF-8 form: a page showing it could not be sent) is read as U+FFFD."""
        action = well_formed(action)
        lease = self.pool.get(lease_id)
        with lease.lock:
            replay = self._replay(lease, request_id)
            if replay is not None:
                return replay
            episode = self._live_episode(lease)
            feedback: dict[str, str] | None = None
            purchase: Purchase | None = None
            try:
                purchase = apply_action(episode.state, action, self)
            except InvalidAction as exc:
                feedback = {"code": exc.code, "message": exc.message}
                self._count("invalid_actions")
            episode.steps += 1
            self._count("steps")
            if purchase is not None:
                detail = compute_reward(purchase.product, purchase.selected, purchase.price, episode.task.goal)
                self._finish(episode, "purchase", detail, purchase)
            elif episode.steps >= self.action_limit:
                self._finish(episode, "action_limit", zero_reward("action_limit"), None)
            return self._remember(lease, request_id, self._result(episode, feedback))

    def terminate(self, lease_id: str, reason: str, *, request_id: str | None = None) -> StepResult:
        """End an episode from outside (the caller hit a limit); scored 0.  ``request_id`` as in ``step``."""
        if reason not in TERMINATE_REASONS:
            raise BadRequestError(f"reason must be one of {', '.join(TERMINATE_REASONS)}, got {reason!r}")
        lease = self.pool.get(lease_id)
        with lease.lock:
            replay = self._replay(lease, request_id)
            if replay is not None:
                return replay
            episode = self._live_episode(lease)
            self._finish(episode, reason, zero_reward(reason), None)
            return self._remember(lease, request_id, self._result(episode, None))

    def release(self, lease_id: str) -> None:
        self.pool.release(lease_id)

    def list_tasks(self, split: str) -> list[str]:
        return self.store.task_ids(split)

    def get_task(self, task_id: str) -> Task:
        return self.store.task(task_id)

    def goal_product(self, task_id: str) -> Product:
        """The product a task was drawn from (oracles, tests and debugging only)."""
        return self.store.task_product(task_id)

    # -- introspection ----------------------------------------------------------------------
    @property
    def slots(self) -> int:
        return self.pool.slots

    def counters(self) -> dict[str, int]:
        with self._stats_lock:
            stats = dict(self._stats)
        stats.update(self.pool.counters())
        stats["search_cache_hits"] = self.search_engine.cache_hits
        stats["search_cache_misses"] = self.search_engine.cache_misses
        return stats

    def health(self) -> dict[str, Any]:
        counters = self.pool.counters()
        meta = self.store.meta
        return {
            "ready": True,
            "slots": counters["slots"],
            "free_slots": counters["free_slots"],
            "leased": counters["leased"],
            "tasks": self.store.task_counts(),
            "versions": {
                "shopsimrl": __version__,
                "catalog": {"seed": meta.get("seed"), "products": meta.get("products"),
                            "tasks": meta.get("tasks"), "schema_version": meta.get("schema_version")},
            },
        }

    def close(self) -> None:
        """Refuse new episodes, wake waiting resets, close the catalog (callers must have stopped stepping)."""
        self.pool.close()
        self.store.close()

    def __enter__(self) -> ShopSimEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------
    @staticmethod
    def _replay(lease: Lease[Episode], request_id: str | None) -> StepResult | None:
        if request_id is not None and lease.last_reply is not None and lease.last_reply[0] == request_id:
            return lease.last_reply[1]  # type: ignore[return-value]
        return None

    @staticmethod
    def _remember(lease: Lease[Episode], request_id: str | None, result: StepResult) -> StepResult:
        if request_id is not None:
            lease.last_reply = (request_id, result)
        return result

    def _live_episode(self, lease: Lease[Episode]) -> Episode:
        if lease.released:  # released while this call waited for the lock
            raise LeaseConflictError("lease was released")
        if lease.episode.done:
            raise EpisodeFinishedError(f"episode already ended ({lease.episode.end_reason})")
        return lease.episode

    def _finish(self, episode: Episode, reason: str, detail: dict[str, Any], purchase: Purchase | None) -> None:
        episode.done, episode.end_reason, episode.reward_detail = True, reason, detail
        episode.state.page = DONE
        if purchase is not None:
            episode.state.product, episode.state.selected = purchase.product, purchase.selected
        self._count("purchases" if reason == "purchase" else "truncations")

    def _observe(self, episode: Episode) -> Observation:
        done_info = None
        if episode.done:
            detail = episode.reward_detail or {}
            done_info = {"end_reason": episode.end_reason, "reward": detail.get("reward", 0.0),
                         "purchased_product_id": detail.get("purchased_product_id"),
                         "selected_options": detail.get("chosen_options", {}), "price": detail.get("sku_price")}
        text, state, clicks = render(episode.state, self, instruction=episode.task.instruction,
                                     steps=episode.steps, action_limit=self.action_limit, done_info=done_info)
        return Observation(text=text, state=state, tools=tools_for(episode.state, clicks))

    def _result(self, episode: Episode, feedback: dict[str, str] | None) -> StepResult:
        observation = self._observe(episode)
        if feedback is not None:
            observation = Observation(text=f"Invalid action ({feedback['code']}): {feedback['message']}\n\n"
                                      + observation.text, state=observation.state, tools=observation.tools)
        info: dict[str, Any] = {"feedback": feedback, "end_reason": episode.end_reason, "steps": episode.steps}
        if episode.done:
            info["reward_detail"] = dict(episode.reward_detail or {})
        reward = float(episode.reward_detail["reward"]) if episode.done and episode.reward_detail else None
        return StepResult(observation=observation, reward=reward,
                          terminated=episode.done and episode.end_reason == "purchase",
                          truncated=episode.done and episode.end_reason != "purchase", info=info)

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self._stats[key] += 1


def load_env(products: int = DEFAULT_PRODUCTS, seed: int = DEFAULT_CATALOG_SEED,
             cache_dir: str | os.PathLike[str] | None = None, *, tasks: int | None = None,
             progress: ProgressFn | None = None, **env_kwargs: Any) -> ShopSimEnv:
    """Build the catalog if it is not cached yet, then open an env on it."""
    path: Path = build_catalog(products, seed, cache_dir, tasks=tasks, progress=progress)
    return ShopSimEnv(path, **env_kwargs)
