"""The GRPO learner as the rollout step sees it: hand it the step's batch, get the step's train/eval metrics.

After a step's ``batch.jsonl`` is built (GRPO advantages by :func:`shopsimrl.sampling.grpo_advantages`,
updates by :func:`shopsimrl.sampling.split_into_updates`), :meth:`GrpoLearner.after_batch`
finds each kept episode's recorded decisions by its ``(task_id, seed)``, takes one Adam
update per ``update`` index in order, saves the parameters and the optimizer into
``step-<k>/policy.npz`` (atomically), and evaluates on the val split when it is due:
before any training (into step 1's row) and after every ``eval_every``-th step.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.io import atomic_write_bytes, atomic_write_json
from shopsimrl.learn.defaults import EVAL_FILE, EVAL_SAMPLES_PER_TASK, STATE_FILE
from shopsimrl.learn.grpo import Adam, Trajectory, train
from shopsimrl.learn.params import LAYOUT
from shopsimrl.learn.policy import LinearPolicy
from shopsimrl.rollout.group import EpisodeRunner


class MissingDecisions(RuntimeError):
    """A kept episode has no recorded decisions: the batch and the policy that played it disagree."""


@dataclass
class EvalPlan:
    """When and on what to evaluate."""

    every: int
    task_ids: Sequence[str]
    make_runner: Callable[[LinearPolicy], EpisodeRunner]
    seed: int = 0
    samples: int = EVAL_SAMPLES_PER_TASK
    concurrency: int = 64

    def due_after(self, step: int) -> bool:
        return step % self.every == 0 and step != 1  # step 1's row holds the eval before training


class GrpoLearner:
    """Trains ``policy`` on each step's batch; ``run_root`` is the run folder (state goes to its step folders)."""

    def __init__(self, policy: LinearPolicy, run_root: Path, global_batch_size: int,
                 evaluation: EvalPlan | None = None, adam: Adam | None = None) -> None:
        self.policy = policy
        self.run_root = Path(run_root)
        self.global_batch_size = global_batch_size
        self.evaluation = evaluation
        self.adam = adam or Adam()

    async def after_batch(self, step: int, rows: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Train on the step's kept episodes (rows of ``batch.jsonl``); return the metrics for its row."""
        import numpy as np

        metrics: dict[str, float] = {}
        if self.evaluation is not None and step == 1:
            metrics.update(await self._evaluate(step, trained_steps=0))
        records = self.policy.take_records()
        updates: dict[int, list[Trajectory]] = {}
        for row in rows:
            decisions = records.get((str(row["task_id"]), int(row["seed"])))
            if decisions is None:
                raise MissingDecisions(f"step {step}: kept episode {row['rollout_id']} (task {row['task_id']}, seed "
                                       f"{row['seed']}) has no recorded decisions: was it played by the learned policy?")
            updates.setdefault(int(row["update"]), []).append(Trajectory(decisions, float(row["advantage"])))
        theta, train_metrics = train(np.asarray(self.policy.theta), self.adam,
                                     [updates[u] for u in sorted(updates)], self.global_batch_size)
        self.policy.set_theta(theta.tolist(), updates=self.adam.t)
        metrics.update(train_metrics)
        save_state(self.run_root / f"step-{step}" / STATE_FILE, self.policy, self.adam)
        if self.evaluation is not None and self.evaluation.due_after(step):
            metrics.update(await self._evaluate(step, trained_steps=step))
        return metrics

    async def _evaluate(self, step: int, *, trained_steps: int) -> dict[str, float]:
        from shopsimrl.learn.evaluate import EVAL_PREFIX, evaluate

        plan = self.evaluation
        assert plan is not None
        metrics, record = await evaluate(self.policy, plan.make_runner, plan.task_ids, seed=plan.seed,
                                         samples=plan.samples, concurrency=plan.concurrency)
        metrics[EVAL_PREFIX + "trained_steps"] = float(trained_steps)
        atomic_write_json(self.run_root / f"step-{step}" / EVAL_FILE, {"trained_steps": trained_steps, **record})
        return metrics


def save_state(path: Path, policy: LinearPolicy, adam: Adam) -> Path:
    """Parameters, their names and Adam's state, written whole or not at all."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, theta=np.asarray(policy.theta), names=np.asarray(LAYOUT.names()), m=np.asarray(adam.m),
             v=np.asarray(adam.v), t=np.asarray(adam.t), lr=np.asarray(adam.lr))
    return atomic_write_bytes(path, buffer.getvalue())


def load_state(path: Path) -> tuple[list[float], Adam]:
    """What :func:`save_state` wrote: the parameters and an Adam that continues where it stopped."""
    import numpy as np

    with np.load(path) as data:
        names = [str(n) for n in data["names"]]
        if names != LAYOUT.names():
            raise ValueError(f"{path} holds parameters {names}, this policy has {LAYOUT.names()}")
        adam = Adam(lr=float(data["lr"]), t=int(data["t"]), m=data["m"].tolist(), v=data["v"].tolist())
        return data["theta"].tolist(), adam
