"""Fault injection: an :class:`EnvClient` wrapper whose ``reset``/``step`` fail with probability p.

It makes technical failures happen on demand, to watch technical drops, the
waves they cause and, at a high rate, the consecutive-failure stop.  Each episode
draws its failures from a generator of its own, seeded with the run's seed and the
episode's id (:meth:`FaultInjectingEnv.for_episode`, which the agent runner asks
for): an episode fails the same calls whatever the order in which episodes run, and
a resumed run (``--resume``) draws what the uninterrupted run would have drawn.
Calls made outside an episode draw from the wrapper's own generator.
"""

from __future__ import annotations

import random

from shopsimrl.env.types import EnvClient, EnvClientWrapper, EnvError, ResetResult, StepResult

INJECTED_FAULT_CODE = "injected_fault"


class InjectedFault(EnvError):
    """A failure raised on purpose by :class:`FaultInjectingEnv` (``--fault-rate``)."""

    code = INJECTED_FAULT_CODE


class FaultInjectingEnv(EnvClientWrapper):
    """Delegates to ``inner``; ``reset`` and ``step`` raise :class:`InjectedFault` with probability ``rate``."""

    def __init__(self, inner: EnvClient, rate: float, *, seed: int = 0, _stream: str | None = None,
                 _counts: list[int] | None = None) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {rate}")
        super().__init__(inner)
        self.rate = rate
        self.seed = seed
        self._rng = random.Random(f"shopsimrl-faults/{seed}" + (f"/{_stream}" if _stream is not None else ""))
        self._counts = _counts if _counts is not None else [0]  # shared with the episodes' views

    @property
    def injected(self) -> int:
        """Failures injected so far, by this wrapper and every episode's view of it."""
        return self._counts[0]

    def for_episode(self, key: str) -> FaultInjectingEnv:
        """The same faults for one episode, drawn from a generator seeded with ``key`` (its rollout id)."""
        return FaultInjectingEnv(self.inner, self.rate, seed=self.seed, _stream=key, _counts=self._counts)

    def _maybe_fail(self, call: str) -> None:
        if self.rate and self._rng.random() < self.rate:
            self._counts[0] += 1
            raise InjectedFault(f"injected fault in {call}() (--fault-rate {self.rate:g})")

    async def reset(self, task_id: str) -> ResetResult:
        self._maybe_fail("reset")
        return await self.inner.reset(task_id)

    async def step(self, lease_id: str, action: str) -> StepResult:
        self._maybe_fail("step")
        return await self.inner.step(lease_id, action)
