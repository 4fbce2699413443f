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
import math
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np  # only the grpo learner loads this module (learn/connect.py imports it when asked for)

from shopsimrl.defaults import EVAL_FILE, EVAL_SAMPLES_PER_TASK, STATE_FILE
from shopsimrl.errors import InvariantBroken
from shopsimrl.io import atomic_write_bytes, atomic_write_json
from shopsimrl.learn.evaluate import EVAL_PREFIX, evaluate
from shopsimrl.learn.grpo import Adam, Trajectory, train
from shopsimrl.learn.params import LAYOUT
from shopsimrl.learn.policy import LinearPolicy
from shopsimrl.rollout.group import EpisodeRunner
from shopsimrl.rollout.journal import JournalError, UnwritableRecord, read_bytes


class MissingDecisions(InvariantBroken, RuntimeError):
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
                 evaluation: EvalPlan | None = None, adam: Adam | None = None, *, lag: int = 0,
                 tis_cap: float | None = None) -> None:
        self.policy = policy
        self.run_root = Path(run_root)
        self.global_batch_size = global_batch_size
        self.evaluation = evaluation
        self.adam = adam or Adam()
        #: slime's train_async.py (``lag`` 1): rollout k+1 is played by the parameters of training k-1, so the
        #: policy that plays stays one update behind the trainer's ``theta``; ``tis_cap``: TIS on that lag
        self.lag, self.tis_cap = lag, tis_cap
        self.theta = list(policy.theta)  # the trainer's parameters (the playing policy's, with no lag)
        self._updates = self.adam.t
        self._behind: list[tuple[list[float], int]] = []  # the trainer's last parameters (and updates), oldest first

    async def after_batch(self, step: int, rows: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Train on the step's kept episodes (rows of ``batch.jsonl``); return the metrics for its row."""
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
        theta, train_metrics = train(np.asarray(self.theta), self.adam, [updates[u] for u in sorted(updates)],
                                     self.global_batch_size, off_policy=self.lag > 0, tis_cap=self.tis_cap)
        state_path = self.run_root / f"step-{step}" / STATE_FILE
        if not np.isfinite(theta).all():  # never saved: the step stops incomplete, resumable from the step before
            raise UnwritableRecord(f"step {step}'s update made the parameters NaN or infinite; not saved", state_path)
        if self.lag:
            self._behind.append((self.theta, self._updates))
        self.theta, self._updates = theta.tolist(), self.adam.t
        playing, played_updates = self._behind.pop(0) if len(self._behind) >= self.lag > 0 else (self.theta, self.adam.t)
        self.policy.set_theta(playing, updates=played_updates)
        metrics.update(train_metrics)
        save_state(state_path, self.trained(), self.adam, step=step)
        if self.evaluation is not None and self.evaluation.due_after(step):
            metrics.update(await self._evaluate(step, trained_steps=step))
        return metrics

    def trained(self) -> LinearPolicy:
        """The trainer's parameters as a policy (with the async loop's lag, one update ahead of the one playing)."""
        if self.theta == self.policy.theta:
            return self.policy
        policy = LinearPolicy(self.theta, record=False)
        policy.updates = self.adam.t
        return policy

    async def _evaluate(self, step: int, *, trained_steps: int) -> dict[str, float]:
        """The trainer's parameters on the held-out tasks."""
        plan = self.evaluation
        assert plan is not None
        metrics, record = await evaluate(self.trained(), plan.make_runner, plan.task_ids, seed=plan.seed,
                                         samples=plan.samples, concurrency=plan.concurrency)
        metrics[EVAL_PREFIX + "trained_steps"] = float(trained_steps)
        atomic_write_json(self.run_root / f"step-{step}" / EVAL_FILE, {"trained_steps": trained_steps, **record})
        return metrics


def save_state(path: Path, policy: LinearPolicy, adam: Adam, *, step: int | None = None) -> Path:
    """Parameters, their names, Adam's state (and the step that saved them), written whole or not at all."""
    buffer = io.BytesIO()
    np.savez(buffer, theta=np.asarray(policy.theta), names=np.asarray(LAYOUT.names()), m=np.asarray(adam.m),
             v=np.asarray(adam.v), t=np.asarray(adam.t), lr=np.asarray(adam.lr),
             **({"step": np.asarray(step)} if step is not None else {}))
    return atomic_write_bytes(path, buffer.getvalue())


class StateFileError(InvariantBroken, ValueError):
    """A ``policy.npz`` that is not a whole, finite saved state of this policy: the message names the file."""


def load_state(path: Path, *, step: int | None = None) -> tuple[list[float], Adam]:
    """What :func:`save_state` wrote: the parameters and an Adam that continues where it stopped.

    Refused (:class:`StateFileError`, one line) unless the file is a regular file holding every array with its
    shape, the names of this policy's parameters, and finite values: a NaN is caught here, before a step runs.
    ``step``: the step that must have saved it (a file of another step is refused).
    """
    try:
        raw = read_bytes(Path(path))
    except JournalError as exc:
        raise StateFileError(str(exc)) from None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as exc:
        raise StateFileError(f"{path} is not a saved policy ({type(exc).__name__}: {str(exc)[:80]})") from None
    missing = [k for k in ("theta", "names", "m", "v", "t", "lr") if k not in arrays]
    if missing:
        raise StateFileError(f"{path} lacks {', '.join(missing)}")
    size = LAYOUT.size
    names = [str(n) for n in arrays["names"].reshape(-1)] if arrays["names"].ndim <= 1 else []
    if names != LAYOUT.names():
        raise StateFileError(f"{path} holds other parameters ({len(names)} names) than this policy's {size}")
    for key in ("theta", "m", "v"):
        value = arrays[key]
        if value.shape != (size,) or value.dtype.kind not in "fi":
            raise StateFileError(f"{path}: {key} has shape {value.shape} ({value.dtype}), not ({size},) numbers")
        if not np.isfinite(value).all():
            raise StateFileError(f"{path}: {key} holds NaN or an infinity")
    t, lr = arrays["t"], arrays["lr"]
    if t.shape != () or t.dtype.kind not in "iu" or int(t) < 0:
        raise StateFileError(f"{path}: t (Adam's update count) must be one whole number >= 0, got {t!r}")
    if lr.shape != () or lr.dtype.kind != "f" or not (math.isfinite(float(lr)) and float(lr) > 0):
        raise StateFileError(f"{path}: lr must be one finite number > 0, got {lr!r}")
    if step is not None:
        saved = arrays.get("step")
        if saved is None or saved.shape != () or saved.dtype.kind not in "iu" or int(saved) != step:
            raise StateFileError(f"{path} was saved by step {saved!r}, not by step {step} (a file copied from "
                                 f"another step)")
    if (arrays["v"] < 0).any():
        raise StateFileError(f"{path}: v (Adam's second moment) holds a negative value")
    adam = Adam(lr=float(lr), t=int(t), m=arrays["m"].astype(float).tolist(), v=arrays["v"].astype(float).tolist())
    return arrays["theta"].astype(float).tolist(), adam


def restore(policy: LinearPolicy, learner: GrpoLearner, step_root: Path) -> None:
    """Continue ``learner`` (and the ``policy`` it trains) from a step's saved state (``--resume``)."""
    theta, learner.adam = load_state(step_root / STATE_FILE, step=int(step_root.name.removeprefix("step-")))
    policy.set_theta(theta, updates=learner.adam.t)
    learner.theta, learner._updates = list(policy.theta), learner.adam.t
