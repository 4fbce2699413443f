"""The one piece of module-level mutable state the slime hooks need, in one documented object.

slime loads each hook by dotted path and calls it as a plain function: the filter
gets ``(args, group)`` and nothing else, the metric hooks are separate calls of
the same rollout step.  Whatever must outlive a call therefore has to live in the
hook module's process:

- the consecutive-failure streak (SPEC §2.1), which spans filter calls and steps;
- the completed groups of the current step, handed from
  ``--rollout-all-samples-process-path`` to ``--custom-rollout-log-function-path``;
- caches that are expensive to rebuild per call (the tokenizer, slime's filter class);
- per event loop: one env client for all episodes, and the gate that keeps the episodes
  running at once within the env server's slots (slime runs far more generate calls at
  once, e.g. 32 groups x 8, than the server has slots; an excess reset would wait for a
  slot, time out, and turn into a technical failure).

All of it sits in a single :class:`SlimeHookState`, created lazily by
:func:`hook_state` and dropped by :func:`reset_hook_state` (tests, or a new run
in the same process).  Access to its fields goes through its lock because slime
runs the rollout on an event-loop thread while Ray may call other methods of the
rollout manager from another thread.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.sampling import ConsecutiveFailureGuard, GroupOutcome

#: Builds the env client for one episode from slime's args (a seam for tests and in-process envs).
EnvClientFactory = Callable[[Any], Any]


@dataclass
class SlimeHookState:
    """State shared by the slime hooks of one process; see the module docstring for why it exists."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    guard: ConsecutiveFailureGuard | None = None
    completed_groups: list[GroupOutcome] | None = None  # set by the all-samples hook, taken by the log hook
    selector_metrics: dict[str, float] | None = None  # from the selector data source, taken by the log hook
    tokenizers: dict[str, Any] = field(default_factory=dict)  # hf_checkpoint -> tokenizer
    filter_output_cls: type | None = None
    env_client_factory: EnvClientFactory | None = None  # None: HttpEnvClient(args.shopsim_env_url)
    _loop_resources: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    def _for_this_loop(self) -> dict[str, Any]:
        """Resources bound to the running event loop (asyncio primitives and httpx clients are)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            return self._loop_resources.setdefault(loop, {})

    def episode_gate(self, slots: int) -> asyncio.Semaphore:
        """At most ``slots`` episodes of this process hold an env slot at once."""
        resources = self._for_this_loop()
        with self.lock:
            gate = resources.get("gate")
            if gate is None or resources.get("slots") != slots:
                gate = resources["gate"] = asyncio.Semaphore(slots)
                resources["slots"] = slots
            return gate

    def env_client(self, args: Any, build: EnvClientFactory) -> Any:
        """One env client per loop, shared by every episode (its connection pools are reused)."""
        if self.env_client_factory is not None:
            return self.env_client_factory(args)
        resources = self._for_this_loop()
        with self.lock:
            client = resources.get("env_client")
            if client is None:
                client = resources["env_client"] = build(args)
            return client

    def guard_for(self, limit: int, trace_dir: str | None) -> ConsecutiveFailureGuard:
        """The streak guard; rebuilt (streak reset) only if the limit or trace dir changed."""
        with self.lock:
            guard = self.guard
            if guard is None or guard.limit != limit or guard.trace_dir != trace_dir:
                guard = self.guard = ConsecutiveFailureGuard(limit, trace_dir=trace_dir)
            return guard

    def tokenizer(self, path: str) -> Any:
        """A transformers tokenizer for ``path``, loaded once (transformers is imported here, lazily)."""
        with self.lock:
            tokenizer = self.tokenizers.get(path)
            if tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = self.tokenizers[path] = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
            return tokenizer

    def put_completed_groups(self, groups: list[GroupOutcome]) -> None:
        with self.lock:
            self.completed_groups = groups

    def take_completed_groups(self) -> list[GroupOutcome] | None:
        """The groups recorded for this step, once: the next step starts empty."""
        with self.lock:
            groups, self.completed_groups = self.completed_groups, None
            return groups


_STATE: SlimeHookState | None = None
_STATE_LOCK = threading.Lock()


def hook_state() -> SlimeHookState:
    """The process's hook state, created on first use."""
    global _STATE
    with _STATE_LOCK:
        if _STATE is None:
            _STATE = SlimeHookState()
        return _STATE


def reset_hook_state() -> SlimeHookState:
    """Forget everything (streak, recorded groups, caches) and return the fresh state."""
    global _STATE
    with _STATE_LOCK:
        _STATE = SlimeHookState()
        return _STATE
