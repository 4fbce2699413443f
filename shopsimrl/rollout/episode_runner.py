"""The real episode runner: ``shopsimrl.agent.run_episode`` behind the driver's runner interface.

Each episode sees the env through a :class:`MeteredEnv` that counts its
``step`` calls into the episode's meter, so an episode cancelled at the end of
a step still reports the env steps it cost (its result never comes back).  Over
a fault-injecting env, each episode gets its own view of it, whose failures depend
on the episode alone (``faults.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.defaults import DEFAULT_MAX_TURNS
from shopsimrl.env.types import EnvClient, EnvClientWrapper, ResetResult, StepResult
from shopsimrl.rollout.faults import FaultInjectingEnv
from shopsimrl.rollout.group import EpisodeMeter, EpisodeRunner, EpisodeSpec

if TYPE_CHECKING:
    from shopsimrl.agent.policy import Policy


class MeteredEnv(EnvClientWrapper):
    """Delegates to ``inner``; counts ``step`` calls into ``meter`` (one instance per episode), and the
    characters of each page the policy reads (the modelled clock's prefill, ``gputime.py``)."""

    def __init__(self, inner: EnvClient, meter: EpisodeMeter) -> None:
        super().__init__(inner)
        self.meter = meter

    async def reset(self, task_id: str) -> ResetResult:
        result = await self.inner.reset(task_id)
        self.meter.page_chars.append(len(result.observation.text))
        return result

    async def step(self, lease_id: str, action: str) -> StepResult:
        self.meter.env_steps += 1
        result = await self.inner.step(lease_id, action)
        self.meter.page_chars.append(len(result.observation.text))
        return result

    async def aclose(self) -> None:  # the shared client is closed by its owner, not by an episode
        return None


def agent_runner(env: EnvClient, policy: Policy, *, max_turns: int | None = None) -> EpisodeRunner:
    """Episodes played by ``policy`` on ``env`` with the agent's episode loop (trace written per episode).

    ``max_turns``: turns per episode; ``None`` is the agent's default (``shopsimrl.defaults.DEFAULT_MAX_TURNS``).
    """
    from shopsimrl.agent import run_episode  # imported on use: the rollout package stays light

    turns = DEFAULT_MAX_TURNS if max_turns is None else max_turns

    async def run(spec: EpisodeSpec, meter: EpisodeMeter) -> EpisodeResult:
        episode_env = env.for_episode(f"{spec.rollout_id}/{spec.seed}") if isinstance(env, FaultInjectingEnv) else env
        return await run_episode(
            MeteredEnv(episode_env, meter),
            policy,
            spec.task_id,
            rollout_id=spec.rollout_id,
            seed=spec.seed,
            max_turns=turns,
            trace_path=spec.trace_path,
        )

    return run
