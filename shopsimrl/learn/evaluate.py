"""Held-out evaluation by slime's eval rules: the val split, greedy and sampled, unscored episodes left out.

slime's eval logs the mean reward of a dataset's eval episodes; our eval log hook
(:func:`shopsimrl.slime_metrics.drop_unscored_eval_episodes`) leaves unscored episodes
(env failures) out of that mean, counts them, and logs no mean at all for a dataset with
no scored episode.  The same rules apply here, to ``eval/shopsim/...``: the sampled
policy (``EVAL_SAMPLES_PER_TASK`` episodes per task, as slime's ``n_samples_per_eval_prompt``)
under the plain keys, the greedy policy (one episode per task) under ``greedy/``.
Eval episodes use the same seeds at every evaluation, so two evaluations differ only by
the parameters.  ``--eval-split val+test`` evaluates on both held-out splits (twice the
tasks: benchmarks that must separate selections by a few points use it).
:func:`success_by_task` reads an evaluation's record per task, and
:func:`evaluate_parameters` evaluates saved parameters after a run (diagnostics).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.defaults import EVAL_SAMPLES_PER_TASK, EVAL_SPLITS
from shopsimrl.learn.policy import LinearPolicy
from shopsimrl.rollout.group import EpisodeMeter, EpisodeRunner, EpisodeSpec, episode_seed

if TYPE_CHECKING:
    from shopsimrl.env.types import EnvClient

EVAL_PREFIX = "eval/shopsim/"
EVAL_SEED = -1  # the "step" mixed into eval episode seeds: never a rollout step's


def eval_metrics(results: Sequence[EpisodeResult], prefix: str = EVAL_PREFIX) -> dict[str, float]:
    """Success rate and reward mean over the scored episodes; unscored ones are counted, never averaged.

    With no scored episode the two means are absent (not 0), as slime logs no eval mean then.
    """
    scored = [r for r in results if r.scored]
    metrics = {
        prefix + "unscored_count": float(len(results) - len(scored)),
        prefix + "scored_rate": len(scored) / len(results) if results else 0.0,
    }
    if scored:
        metrics[prefix + "success_rate"] = sum(float(r.success or 0.0) for r in scored) / len(scored)
        metrics[prefix + "reward_mean"] = sum(float(r.reward or 0.0) for r in scored) / len(scored)
    return metrics


async def _play(runner: EpisodeRunner, specs: Sequence[EpisodeSpec], concurrency: int) -> list[EpisodeResult]:
    gate = asyncio.Semaphore(concurrency)

    async def one(spec: EpisodeSpec) -> EpisodeResult:
        async with gate:
            try:
                return await runner(spec, EpisodeMeter())
            except Exception as exc:  # noqa: BLE001 - a runner that raised is an unscored episode, as in a step
                return EpisodeResult.failed(task_id=spec.task_id, rollout_id=spec.rollout_id, seed=spec.seed,
                                            error={"stage": "runner", "type": type(exc).__name__, "message": str(exc)})

    return list(await asyncio.gather(*(one(s) for s in specs)))


def _specs(task_ids: Sequence[str], samples: int, seed: int, kind: str) -> list[EpisodeSpec]:
    return [EpisodeSpec(task_id=t, rollout_id=f"eval-{kind}-t{i}-r{j}", seed=episode_seed(seed, EVAL_SEED, i, j),
                        trace_path=None, group_index=i, sibling=j)
            for i, t in enumerate(task_ids) for j in range(samples)]


async def evaluate(policy: LinearPolicy, make_runner: Callable[[LinearPolicy], EpisodeRunner],
                   task_ids: Sequence[str], *, seed: int = 0, samples: int = EVAL_SAMPLES_PER_TASK,
                   concurrency: int = 64) -> tuple[dict[str, float], dict[str, Any]]:
    """Evaluate ``policy``'s parameters on ``task_ids``: (metrics, per-episode record for eval.json)."""
    sampled = await _play(make_runner(policy.view(greedy=False)), _specs(task_ids, samples, seed, "sampled"),
                          concurrency)
    greedy = await _play(make_runner(policy.view(greedy=True)), _specs(task_ids, 1, seed, "greedy"), concurrency)
    metrics = {**eval_metrics(sampled), **eval_metrics(greedy, EVAL_PREFIX + "greedy/")}
    record = {
        "tasks": len(task_ids),
        "samples_per_task": samples,
        "metrics": metrics,
        "episodes": [{"mode": mode, "task_id": r.task_id, "seed": r.seed, "scored": r.scored, "reward": r.reward,
                      "success": r.success, "end_reason": r.end_reason}
                     for mode, results in (("sampled", sampled), ("greedy", greedy)) for r in results],
    }
    return metrics, record


async def eval_task_ids(env: EnvClient, split: str) -> list[str]:
    """The held-out tasks of ``split`` (one of ``EVAL_SPLITS``: ``val``, or ``val+test``, val's first)."""
    if split not in EVAL_SPLITS:
        raise ValueError(f"eval split must be one of {', '.join(EVAL_SPLITS)}, got {split!r}")
    task_ids: list[str] = []
    for part in split.split("+"):
        task_ids += await env.list_tasks(part)
    return task_ids


def success_by_task(record: dict[str, Any], mode: str = "sampled") -> dict[str, float]:
    """Each task's success rate over its scored episodes of ``mode`` (``sampled`` or ``greedy``) in an
    evaluation's record (``eval.json``); a task with no scored episode is left out."""
    totals: dict[str, list[float]] = {}
    for episode in record["episodes"]:
        if episode["mode"] == mode and episode["scored"]:
            totals.setdefault(episode["task_id"], []).append(float(episode["success"] or 0.0))
    return {task: sum(v) / len(v) for task, v in totals.items()}


async def evaluate_parameters(theta: Sequence[float], env: EnvClient, task_ids: Sequence[str], *, seed: int = 0,
                              samples: int = EVAL_SAMPLES_PER_TASK, max_turns: int | None = None,
                              concurrency: int = 64) -> tuple[dict[str, float], dict[str, Any]]:
    """:func:`evaluate` for a parameter vector (a saved ``policy.npz``'s ``theta``) on ``env``, as a run's
    evaluation plays it: the same episode seeds for the same ``seed``."""
    from shopsimrl.rollout.episode_runner import agent_runner  # only when saved parameters are evaluated

    return await evaluate(LinearPolicy(theta, record=False), lambda p: agent_runner(env, p, max_turns=max_turns),
                          task_ids, seed=seed, samples=samples, concurrency=concurrency)
