"""The one episode record: what an episode leaves for the rollout, the slime hook, triage and measurement.

It is the agent's result (:func:`shopsimrl.agent.run_episode`), the rollout's stand-in
for a runner that raised (:meth:`EpisodeResult.failed`) and the synthetic runner's
episodes alike, so a field added here reaches every producer.  Standard library only:
the rollout imports it without loading the agent's policies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class EpisodeResult:
    """The outcome of one episode.

    ``scored=False`` means a technical failure: ``reward``/``success``/``strict_reward``
    are None and ``error`` says where (``stage``: reset | policy | step | terminate |
    reward | runner), with what exception ``type`` and ``message``.  Fields a producer
    cannot know default to "not known": ``policy`` is None when no policy played
    (a runner that raised), token counts are None when not every turn reported them.
    """

    task_id: str
    rollout_id: str
    seed: int
    policy: str | None = None
    scored: bool
    reward: float | None
    reward_detail: dict[str, Any] | None = None
    success: float | None  # r_success
    strict_reward: float | None  # r_strict (= reward)
    end_reason: str | None  # purchase | action_limit | generation_length | runner_error | None (never ended)
    error: dict[str, Any] | None
    turns: int  # policy replies, protocol errors included
    env_steps: int  # actions sent to env.step
    protocol_errors: int = 0
    wall_seconds: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    trace_path: str | None = None

    @classmethod
    def failed(
        cls,
        *,
        task_id: str,
        rollout_id: str,
        seed: int,
        error: dict[str, Any],
        env_steps: int = 0,
        wall_seconds: float = 0.0,
        trace_path: str | None = None,
    ) -> EpisodeResult:
        """An unscored sibling whose runner raised instead of returning: ``end_reason`` is ``runner_error``."""
        return cls(
            task_id=task_id,
            rollout_id=rollout_id,
            seed=seed,
            scored=False,
            reward=None,
            success=None,
            strict_reward=None,
            end_reason="runner_error",
            error=error,
            turns=0,
            env_steps=env_steps,
            wall_seconds=wall_seconds,
            trace_path=trace_path,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
