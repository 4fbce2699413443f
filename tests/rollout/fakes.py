"""Helpers for the rollout tests (imported as ``rollout.fakes``; ``tests`` is on the pytest path)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopsimrl.io import read_jsonl
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.group import EpisodeRunner, EpisodeSpec
from shopsimrl.rollout.run import RolloutResult
from shopsimrl.rollout.synthetic import synthetic_runner, unit_hash
from shopsimrl.sampling import SamplingKnobs, replay

SMALL = SamplingKnobs(rollout_batch_size=4, n_samples_per_prompt=4, over_sampling_batch_size=8,
                      global_batch_size=8, max_consecutive_failed_groups=4)


def jittered(scale: float = 0.004) -> Callable[[EpisodeSpec], float]:
    """Episode durations spread over [0, scale) seconds, stable per episode."""
    return lambda spec: unit_hash("delay", spec.seed) * scale


def run_synthetic(
    tmp_path: Path,
    *,
    knobs: SamplingKnobs = SMALL,
    steps: int = 1,
    runner: EpisodeRunner | None = None,
    tasks: int = 200,
    concurrency: int = 64,
    seed: int = 0,
) -> RolloutResult:
    config = RolloutConfig(knobs=knobs, steps=steps, seed=seed, out=tmp_path, name="run",
                           episode_concurrency=concurrency)
    runner = runner or synthetic_runner(delay=jittered())
    return asyncio.run(run_rollout(config, runner, [f"task-{i:04d}" for i in range(tasks)]))


def load_events(step_dir: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(step_dir / "events.jsonl"))


def replay_events(events: list[dict[str, Any]], knobs: SamplingKnobs) -> tuple[Any, list[dict[str, Any]]]:
    """Feed a real step's events back through ``sampling.replay``.

    Clock: integer microseconds, so ``wave time + duration`` lands exactly on the
    recorded batch time and the replay sees the same batches.  Groups the step
    aborted complete after the last decision.
    """
    us = lambda t: int(round(t * 1e6))  # noqa: E731
    submitted_at: dict[int, int] = {}
    for e in events:
        if e["event"] == "wave":
            for index in range(e["first_index"], e["last_index"] + 1):
                submitted_at[index] = us(e["t"])
    decisions = [e for e in events if e["event"] == "decision"]
    batch_times = {}
    for d in decisions:
        batch_times.setdefault(d["batch"], us(d["t"]))
    assert len(set(batch_times.values())) == len(batch_times), "two batches share a microsecond"
    end = max(batch_times.values(), default=0)
    verdict = {d["index"]: d["verdict"] for d in decisions}
    done_at = {d["index"]: us(d["t"]) for d in decisions}
    supply = [
        (verdict.get(i, "varied"), float(done_at.get(i, end + 1_000_000) - submitted_at[i]))
        for i in range(len(submitted_at))
    ]
    result = replay(supply, rollout_batch_size=knobs.rollout_batch_size,
                    over_sampling_batch_size=knobs.over_sampling_batch_size,
                    max_consecutive_failed_groups=knobs.max_consecutive_failed_groups)
    return result, decisions


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
