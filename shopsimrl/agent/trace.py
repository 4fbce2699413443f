"""The episode trace: one JSON file per episode, versioned, written atomically.

The trace is what the Failure Analyst and the triage step read, so it records what
the model *saw* (observation text, tools offered) and what it *did* (raw reply, the
action derived from it), what the env answered, and why the episode ended.  Bump
:data:`TRACE_SCHEMA` whenever a field changes meaning or disappears; adding fields
keeps the version.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

from shopsimrl.env.types import Observation, StepResult, Task
from shopsimrl.io import atomic_write_json

TRACE_SCHEMA: Final = "shopsimrl.trace/v2"  # v2: the turn cap is "max_turns" (v1: "max_steps")


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def json_safe(value: Any) -> Any:
    """Replace non-finite floats (which strict JSON forbids) by their string form, recursively.

    A non-finite reward is exactly the kind of thing a trace must still be able to show.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


@dataclass
class TraceRecorder:
    """Collects one episode's trace while it runs; owned by a single ``run_episode`` call."""

    task_id: str
    policy: str
    policy_options: dict[str, Any]
    seed: int
    rollout_id: str
    max_turns: int
    task: Task | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    final_observation: str | None = None
    start_iso: str = field(default_factory=utc_now_iso)
    start_monotonic: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.start_monotonic

    def add_step(
        self,
        *,
        observation: Observation,
        output: dict[str, Any] | None,
        action: str | None,
        protocol_error: dict[str, Any] | None,
        result: StepResult | None,
        policy_seconds: float,
        env_seconds: float,
    ) -> None:
        info = result.info if result is not None else {}
        self.steps.append(
            {
                "turn": len(self.steps) + 1,
                "observation": observation.text,
                "page": observation.state.get("page") if isinstance(observation.state, dict) else None,
                "tools": observation.tools,
                "output": output,
                "action": action,
                "protocol_error": protocol_error,
                "feedback": info.get("feedback"),
                "reward": result.reward if result is not None else None,
                "terminated": result.terminated if result is not None else False,
                "truncated": result.truncated if result is not None else False,
                "end_reason": info.get("end_reason"),
                "policy_seconds": round(policy_seconds, 6),
                "env_seconds": round(env_seconds, 6),
            }
        )

    def build(
        self,
        *,
        scored: bool,
        reward: float | None,
        reward_detail: dict[str, Any] | None,
        end_reason: str | None,
        error: dict[str, Any] | None,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        cancelled: bool = False,
        release_error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        seconds = self.elapsed()
        task = self.task
        return json_safe(
            {
                "schema": TRACE_SCHEMA,
                "task": {
                    "task_id": self.task_id,
                    "split": task.split if task else None,
                    "instruction": task.instruction if task else None,
                    "goal": task.goal if task else None,
                },
                "policy": self.policy,
                "policy_options": self.policy_options,
                "seed": self.seed,
                "rollout_id": self.rollout_id,
                "max_turns": self.max_turns,
                "steps": self.steps,
                "final_observation": self.final_observation,
                "final": {"reward": reward, "reward_detail": reward_detail, "end_reason": end_reason},
                "scored": scored,
                "end_reason": end_reason,
                "error": error,
                "cancelled": cancelled,
                "release_error": release_error,
                "timings": {
                    "start": self.start_iso,
                    "end": utc_now_iso(),
                    "seconds": round(seconds, 6),
                    "per_step_seconds": [round(s["policy_seconds"] + s["env_seconds"], 6) for s in self.steps],
                },
                "tokens": {"prompt": prompt_tokens, "completion": completion_tokens},
            }
        )


def write_trace(path: Path, trace: dict[str, Any]) -> Path:
    return atomic_write_json(path, trace)
