"""The one piece of module-level mutable state the slime hooks need, in one documented object.

slime loads each hook by dotted path and calls it as a plain function: the filter
gets ``(args, group)`` and nothing else, the metric hooks are separate calls of
the same rollout step.  Whatever must outlive a call therefore has to live in the
hook module's process:

- the consecutive-failure streak (docs/dynamic-sampling.md §2.1), which spans filter calls and steps: the
  filter hook feeds it on slime's own loop, the rollout step under our rollout function (which never calls
  the filter hook, so only one of them feeds it in a run);
- the completed groups of the current step, handed from
  ``--rollout-all-samples-process-path`` to ``--custom-rollout-log-function-path``, and the data
  source that log hook tells the rollout ended (its saved state, under ``train_async.py``);
- caches that are expensive to rebuild per call (the tokenizer, slime's filter class);
- per event loop: one env client and one SGLang HTTP client for all episodes, the gate
  that keeps the episodes running at once within the env server's slots (slime runs far
  more generate calls at once, e.g. 32 groups x 8, than the server has slots; an excess
  reset would wait for a slot, time out, and turn into a technical failure), and the
  watch that carries slime's abort to every episode (``shopsimrl.slime.abort``);
- the eval trace paths handed out so far (eval samples have no group index, and their
  indices restart with every eval pass and dataset, so names must be claimed).

The HTTP clients are closed by :meth:`SlimeHookState.close`, registered with
``atexit`` when the first one is built: slime runs its rollout on a daemon thread's
event loop that is still running when the interpreter exits, so the clients are closed
on that loop.

All of it sits in a single :class:`SlimeHookState`, created lazily by
:func:`hook_state` and dropped by :func:`reset_hook_state` (tests, or a new run
in the same process).  Access to its fields goes through its lock because slime
runs the rollout on an event-loop thread while Ray may call other methods of the
rollout manager from another thread.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.sampling import ConsecutiveFailureGuard, GroupOutcome
from shopsimrl.slime.abort import POLL_SECONDS, AbortFlag, AbortWatch, slime_abort_flag

log = logging.getLogger(__name__)

#: Builds the env client for one episode from slime's args (a seam for tests and in-process envs).
EnvClientFactory = Callable[[Any], Any]
#: Finds slime's abort flag from slime's args (a seam for custom rollout functions).
AbortFlagFactory = Callable[[Any], AbortFlag]

SGLANG_TIMEOUT_SECONDS = 600.0  # one /generate may decode thousands of tokens behind a long queue
CLOSE_TIMEOUT_SECONDS = 10.0


@dataclass
class SlimeHookState:
    """State shared by the slime hooks of one process; see the module docstring for why it exists."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    guard: ConsecutiveFailureGuard | None = None
    completed_groups: list[GroupOutcome] | None = None  # set by the all-samples hook, taken by the log hook
    selector_metrics: dict[str, float] | None = None  # from the selector data source, taken by the log hook
    selector_source: Any = None  # the selector data source, told the trained prompts by the log hook (concentration)
    rollout_source: Any = None  # our data source of this rollout, told by the log hook that it ended (saved state)
    tokenizers: dict[str, Any] = field(default_factory=dict)  # hf_checkpoint -> tokenizer
    filter_output_cls: type | None = None
    env_client_factory: EnvClientFactory | None = None  # None: HttpEnvClient(args.shopsim_env_url)
    abort_flag_factory: AbortFlagFactory = slime_abort_flag
    abort_poll_seconds: float = POLL_SECONDS
    claimed_trace_paths: set[str] = field(default_factory=set)
    _close_registered: bool = False
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
        return self._loop_client("env_client", lambda: build(args))

    def sglang_client(self) -> Any:
        """One ``httpx.AsyncClient`` per loop for every episode's ``/generate``, closed at shutdown."""
        # httpx: loaded by the first episode, so loading the hook paths stays light
        import httpx

        return self._loop_client(
            "sglang_client",
            lambda: httpx.AsyncClient(
                timeout=httpx.Timeout(SGLANG_TIMEOUT_SECONDS),
                # episodes at once are bounded by the env-slot gate, not by the pool
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=512),
            ),
        )

    def _loop_client(self, name: str, build: Callable[[], Any]) -> Any:
        resources = self._for_this_loop()
        with self.lock:
            client = resources.get(name)
            if client is None:
                client = resources[name] = build()
                if not self._close_registered:
                    atexit.register(self.close)
                    self._close_registered = True
            return client

    def abort_watch(self, args: Any) -> AbortWatch:
        """The loop's watch on slime's abort flag (built on first use, from :attr:`abort_flag_factory`)."""
        resources = self._for_this_loop()
        with self.lock:
            watch = resources.get("abort_watch")
            if watch is None:
                watch = resources["abort_watch"] = AbortWatch(self.abort_flag_factory(args), self.abort_poll_seconds)
            return watch

    def claim_trace_path(self, path: str) -> str:
        """``path``, or ``path`` with ``-1``, ``-2``... if an earlier episode of this process has it."""
        with self.lock:
            stem, dot, suffix = path.rpartition(".")
            candidate, n = path, 0
            while candidate in self.claimed_trace_paths:
                n += 1
                candidate = f"{stem}-{n}.{suffix}" if dot else f"{path}-{n}"
            self.claimed_trace_paths.add(candidate)
            return candidate

    async def aclose_loop_clients(self) -> None:
        """Close the HTTP clients of the running loop (and forget them)."""
        resources = self._for_this_loop()
        with self.lock:
            clients = [resources.pop(name) for name in ("sglang_client", "env_client") if name in resources]
        for client in clients:
            await client.aclose()

    def close(self) -> None:
        """Close every loop's HTTP clients, on their own loop; registered with ``atexit``."""
        with self.lock:
            loops = [loop for loop, res in self._loop_resources.items() if {"sglang_client", "env_client"} & res.keys()]
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop in loops:
            if loop.is_closed():
                continue
            if loop is current:
                raise RuntimeError("close() would block its own event loop: use `await aclose_loop_clients()`")
            closing = self.aclose_loop_clients()
            try:
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(closing, loop).result(CLOSE_TIMEOUT_SECONDS)
                else:
                    loop.run_until_complete(closing)
            except Exception as exc:  # shutting down: report, never raise from atexit
                log.warning("closing the slime hook's HTTP clients failed: %s: %s", type(exc).__name__, exc)

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
                # transformers: heavy, loaded only for the first tokenizer
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
