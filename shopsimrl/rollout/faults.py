"""Fault injection: an :class:`EnvClient` wrapper whose ``reset``/``step`` fail with probability p.

It makes technical failures happen on demand, to watch technical drops, the
waves they cause and, at a high rate, the consecutive-failure stop.  The
failures are drawn from one seeded generator, so a run with the same seed and
the same call order fails the same calls.
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

    def __init__(self, inner: EnvClient, rate: float, *, seed: int = 0) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {rate}")
        super().__init__(inner)
        self.rate = rate
        self._rng = random.Random(f"shopsimrl-faults/{seed}")
        self.injected = 0

    def _maybe_fail(self, call: str) -> None:
        if self.rate and self._rng.random() < self.rate:
            self.injected += 1
            raise InjectedFault(f"injected fault in {call}() (--fault-rate {self.rate:g})")

    async def reset(self, task_id: str) -> ResetResult:
        self._maybe_fail("reset")
        return await self.inner.reset(task_id)

    async def step(self, lease_id: str, action: str) -> StepResult:
        self._maybe_fail("step")
        return await self.inner.step(lease_id, action)
