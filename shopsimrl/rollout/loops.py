"""slime's two training loops on a modelled clock: ``train.py`` alternates, ``train_async.py`` overlaps.

Shared by the simulator and the main job's modelled clock (``gputime.py``): the rollout time of each
step is the clock's (the step's modelled wall time); the training time per step and the weight sync
are parameters (:class:`TrainTiming`; the main job trains for a time proportional to its trained tokens).  The schedules follow slime's
loops at commit 624b824 line by line, with ``--update-weights-interval 1`` (slime's default),
no evaluation and no checkpoint save inside the run:

- ``train.py`` (:func:`sync_schedule`): per step, ``generate(k)``, then ``async_train(k)``, then
  ``update_weights()``; nothing overlaps.  A step takes ``R_k + T_k + U``.
- ``train_async.py`` (:func:`async_schedule`): ``generate(0)`` starts before the loop.  Step ``k``
  waits for ``generate(k)``, starts ``generate(k+1)`` at once, trains ``k``; then, before
  ``update_weights()``, it waits for ``generate(k+1)`` to end (no weight update in the middle of
  a generation).  So rollout ``k+1`` runs beside training
  ``k``, the engines are idle during the weight sync, and the loop takes
  ``R_0 + sum_{k<N-1} (max(T_k, R_{k+1}) + U) + T_{N-1} + U``.  The first rollout has nothing
  to overlap; the last training step neither.

What the overlap costs: rollout ``k+1`` starts before training ``k`` is done, so it runs on the
weights of training ``k-1`` (``POLICY_LAG``: one step behind ``train.py``'s).  What it does not
cost: the selector's feedback.  slime calls the all-samples hook (which records step ``k``'s
groups in our data source) at the end of ``generate(k)``, inside the rollout manager, and
``train_async.py`` calls ``generate(k+1)`` only after ``ray.get`` of ``generate(k)``: step ``k``'s
results reach the selector before step ``k+1``'s first pick, in both loops.
:class:`LaggedTrainer` plays the policy lag (the simulated world, the main job's heuristic learner).

Pure: modelled seconds in, modelled seconds out; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shopsimrl.sampling.metrics import PREFIX
from shopsimrl.sampling.modes import Choice


class TrainingLoop(Choice):
    """Which of slime's loops runs the steps."""

    SYNC = "sync"  # train.py: rollout, then train, then weight sync
    ASYNC = "async"  # train_async.py: rollout k+1 beside training k (no --colocate)


DEFAULT_TRAINING_LOOP = TrainingLoop.SYNC
TRAINING_LOOPS: tuple[str, ...] = tuple(m.value for m in TrainingLoop)

#: Training steps the engines' weights lag behind the trainer when a rollout starts, beyond ``train.py``'s:
#: rollout ``k+1`` of ``train_async.py`` runs on the weights of training ``k-1`` (``--update-weights-interval 1``).
POLICY_LAG: dict[TrainingLoop, int] = {TrainingLoop.SYNC: 0, TrainingLoop.ASYNC: 1}

#: Training time per step (s), calibrated (docs/clock.md, "slime's two loops"): the public
#: Qwen3-4B GRPO run of vllm-project/vime#244 (a slime fork; H800, 4 training + 4 rollout GPUs) logs
#: ``perf/train_time`` 16.8 s for 32 x 8 = 256 samples of at most 2,048 response tokens; the release run
#: trains 16 x 8 = 128 samples per step with up to 8,192 response tokens: 16.8 x 128/256 x 8192/2048.
CALIBRATED_TRAIN_S = 33.6
#: Weight sync per step (s): vllm-project/vime#255 measures 1.6-2.3 s per step for Qwen3-4B (CUDA IPC);
#: verl's NCCL sync for a 3B model is under 0.3 s (volcengine/verl#2231).  The larger, rounded.
CALIBRATED_WEIGHT_SYNC_S = 2.0


@dataclass(frozen=True)
class TrainTiming:
    """Training seconds per step (the batch is always ``rollout_batch_size`` groups) and the weight sync after it."""

    train_s: float = CALIBRATED_TRAIN_S
    weight_sync_s: float = CALIBRATED_WEIGHT_SYNC_S

    def __post_init__(self) -> None:
        for name in ("train_s", "weight_sync_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")

    def as_dict(self) -> dict[str, float]:
        return {"train_s": self.train_s, "weight_sync_s": self.weight_sync_s}


@dataclass(frozen=True)
class StepSpan:
    """One step on the loop's clock: its rollout, its training, and the end of the weight sync that follows."""

    rollout_start: float
    rollout_end: float
    train_start: float
    train_end: float
    synced: float  # the engines hold this step's trained weights from here on


def _check(rollout_s: Sequence[float], train_s: Sequence[float], weight_sync_s: float) -> None:
    if len(rollout_s) != len(train_s):
        raise ValueError(f"one training time per rollout: {len(rollout_s)} rollouts, {len(train_s)} training times")
    if not all(math.isfinite(x) and x >= 0 for x in (*rollout_s, *train_s, weight_sync_s)):
        raise ValueError("rollout, training and weight-sync times must be finite seconds >= 0")


def sync_schedule(rollout_s: Sequence[float], train_s: Sequence[float], weight_sync_s: float) -> list[StepSpan]:
    """``train.py``: rollout ``k``, train ``k``, sync; the next rollout starts on the synced weights."""
    _check(rollout_s, train_s, weight_sync_s)
    spans, t = [], 0.0
    for r, tr in zip(rollout_s, train_s):
        rollout_end = t + r
        train_end = rollout_end + tr
        spans.append(StepSpan(t, rollout_end, rollout_end, train_end, train_end + weight_sync_s))
        t = train_end + weight_sync_s
    return spans


def async_schedule(rollout_s: Sequence[float], train_s: Sequence[float], weight_sync_s: float) -> list[StepSpan]:
    """``train_async.py``: rollout ``k+1`` starts with training ``k``; the weight sync waits for that rollout."""
    _check(rollout_s, train_s, weight_sync_s)
    n = len(rollout_s)
    if not n:
        return []
    starts, ends = [0.0], [rollout_s[0]]  # generate(start_rollout_id) before the loop
    spans, t = [], 0.0
    for k in range(n):
        t = max(t, ends[k])  # ray.get(generate(k)) (already waited for when the last step synced)
        if k + 1 < n:  # generate(k+1) starts at once
            starts.append(t)
            ends.append(t + rollout_s[k + 1])
        train_start, t = t, t + train_s[k]
        if k + 1 < n:
            t = max(t, ends[k + 1])  # sync generate before update weights
        t += weight_sync_s
        spans.append(StepSpan(starts[k], ends[k], train_start, train_start + train_s[k], t))
    return spans


def schedule(loop: TrainingLoop | str, rollout_s: Sequence[float], timing: TrainTiming) -> list[StepSpan]:
    """The loop's schedule of these rollouts, each step trained for ``timing.train_s``."""
    plan = async_schedule if TrainingLoop.parse(loop) is TrainingLoop.ASYNC else sync_schedule
    return plan(rollout_s, [float(timing.train_s)] * len(rollout_s), float(timing.weight_sync_s))


def loop_wall_s(loop: TrainingLoop | str, rollout_s: Sequence[float], timing: TrainTiming) -> float:
    """The loop's wall time: until the last step's weights are on the engines (0 for no step)."""
    spans = schedule(loop, rollout_s, timing)
    return spans[-1].synced if spans else 0.0


class LaggedTrainer:
    """Plays the policy lag: each call trains the batch given ``lag`` calls earlier (``lag`` 0: at once).

    ``train_async.py`` trains step ``k`` while rollout ``k+1`` runs on the older weights; in the simulated
    world that is training ``k`` applied after rollout ``k+1`` is played (lag 1).  ``flush`` trains what is
    still held (the run's last steps, trained after the last rollout).
    """

    def __init__(self, train: Callable[[list[str]], None], lag: int) -> None:
        if lag < 0:
            raise ValueError(f"lag must be >= 0 steps, got {lag}")
        self._train = train
        self._lag = lag
        self._held: deque[list[str]] = deque()

    def __call__(self, batch: list[str]) -> None:
        self._held.append(batch)
        if len(self._held) > self._lag:
            self._train(self._held.popleft())

    def flush(self) -> int:
        """Train every batch still held; returns how many."""
        held = len(self._held)
        while self._held:
            self._train(self._held.popleft())
        return held


#: The clock's per-step keys (``rollout/shopsim/clock/...``): modelled seconds of the step's parts, and the run's total.
CLOCK_PREFIX = PREFIX + "clock/"
CLOCK_KEYS = ("rollout_s", "train_s", "weight_sync_s", "step_s", "total_s", "trained_tokens")


class LoopClock:
    """The run's modelled wall time, step by step, under one of slime's loops.

    ``add`` takes a step's modelled rollout and training seconds and returns its figures: ``step_s`` is what
    the step added to the run's wall time (``total_s``: the loop's wall time had the run ended there, the
    last step's training and sync included), so the ``step_s`` of a run sum to its ``total_s``.
    """

    def __init__(self, loop: TrainingLoop | str, weight_sync_s: float,
                 history: Sequence[tuple[float, float]] = ()) -> None:
        self.loop = TrainingLoop.parse(loop)
        self.weight_sync_s = weight_sync_s
        self.rollout_s = [r for r, _t in history]
        self.train_s = [t for _r, t in history]

    def total(self) -> float:
        plan = async_schedule if self.loop is TrainingLoop.ASYNC else sync_schedule
        spans = plan(self.rollout_s, self.train_s, self.weight_sync_s)
        return spans[-1].synced if spans else 0.0

    def add(self, rollout_s: float, train_s: float, trained_tokens: float) -> dict[str, float]:
        before = self.total()
        self.rollout_s.append(rollout_s)
        self.train_s.append(train_s)
        after = self.total()
        values = (rollout_s, train_s, self.weight_sync_s, after - before, after, trained_tokens)
        return {CLOCK_PREFIX + key: value for key, value in zip(CLOCK_KEYS, values)}
