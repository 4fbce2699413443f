"""Staged siblings (opt-in): start ``K`` of a group's ``n`` siblings, then the rest, or decide the group after ``K``.

The seed generates all ``n`` siblings of a group before the filter looks at it, so a
zero-spread group that is dropped costs ``n`` episodes.  With staging a group starts
``K`` siblings (``stage_size``, default ``n // 2``) and, when they are back,
:func:`after_first_stage` says what happens next:

- the ``K`` disagree: the group has spread for sure, the rest start (``REST``);
- one of the ``K`` is unscored, or they agree on a partial reward: the rest start (the
  group is judged whole, as in the seed; the prediction only knows success and failure);
- they agree, but ``remaining <= target``: the rest start (the fallback could keep the
  group, and the trainer only ever receives whole groups of ``n``);
- they agree, ``remaining > target`` (the seed's rule would drop a zero-std group) and
  the predicted chance that the rest breaks the agreement is below ``threshold``: the
  group is decided as a zero-std drop after ``K`` (``DROP``: ``remaining -= 1``,
  ``zero_std_group_drop_count += 1``, as in the seed);
- otherwise the rest start.

The chance that the rest breaks the agreement (:func:`rest_spread_chance`) is the
selector's prediction (a Gaussian over the prompt's pass-rate logit, see
:mod:`~shopsimrl.sampling.estimate`; for a never-seen prompt, the population that recent
first tries show, ``Evidence.logit``) conditioned on the ``K`` outcomes seen: for a known
pass rate ``p`` and ``K`` successes it is ``1 − p^(n−K)``; the posterior weighs each ``p``
by ``p^K`` (``(1−p)^K`` after ``K`` failures).  A prompt predicted to spread often
(``q >= skip_q``) can be started whole: staging it costs a second round of latency for
little to save (``DEFAULT_STAGE_SKIP_Q``, 0.5, by default; ``skip_q = 1`` stages every group).  Pure: no
I/O, no clock.  docs/dynamic-sampling.md (R29) and docs/selection.md give the figures and the
default threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from shopsimrl.defaults import DEFAULT_STAGE_SKIP_Q, DEFAULT_STAGE_THRESHOLD
from shopsimrl.sampling.estimate import hermite_rule, sigmoid
from shopsimrl.sampling.knobs import ZERO_STD_EPSILON
from shopsimrl.sampling.verdict import Verdict, reward_spread_verdict

#: Gauss-Hermite nodes for the posterior averages: the likelihood ``p^K`` weighs the tails, 9 nodes are too few.
POSTERIOR_NODES = 64


class Next(str, Enum):
    """What :func:`after_first_stage` decides for a group whose first ``K`` siblings are back."""

    REST = "rest"  # start the remaining n − K siblings
    DROP = "drop"  # decide the group as a zero-std drop after K episodes


def default_stage_size(n: int) -> int:
    """``n // 2`` (at least 1)."""
    return max(1, n // 2)


@dataclass(frozen=True)
class StagedSiblings:
    """The staging knobs of one run (``K`` of ``n``; the threshold; the ``q`` above which a group starts whole)."""

    n: int
    stage_size: int
    threshold: float = DEFAULT_STAGE_THRESHOLD
    skip_q: float = DEFAULT_STAGE_SKIP_Q

    def __post_init__(self) -> None:
        if not 1 <= self.stage_size < self.n:
            raise ValueError(f"stage size must be within [1, n_samples_per_prompt) = [1, {self.n}), "
                             f"got {self.stage_size}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"stage threshold must be within [0, 1], got {self.threshold!r}")
        if not 0.0 <= self.skip_q <= 1.0:
            raise ValueError(f"stage skip q must be within [0, 1], got {self.skip_q!r}")

    @classmethod
    def of(cls, n: int, stage_size: int | None = None, **kw: float) -> StagedSiblings:
        return cls(n, default_stage_size(n) if stage_size is None else stage_size, **kw)

    @property
    def first(self) -> range:
        return range(self.stage_size)

    @property
    def rest(self) -> range:
        return range(self.stage_size, self.n)


def rest_spread_chance(mean: float, var: float, k: int, n: int, successes: bool) -> float:
    """P(the other ``n − k`` siblings break the agreement | the first ``k`` all succeeded (``successes``) or all
    failed), for a pass-rate logit ``x ~ N(mean, var)`` a priori: ``E[w(p)·(1 − a(p)^(n−k))] / E[w(p)]`` with
    ``a(p) = p`` and ``w(p) = p^k`` after successes, ``1 − p`` and ``(1 − p)^k`` after failures."""
    if not 0 <= k < n:
        raise ValueError(f"need 0 <= k < n, got k={k}, n={n}")
    sd = math.sqrt(max(var, 0.0))
    nodes, weights = hermite_rule(POSTERIOR_NODES) if sd > 0.0 else ((0.0,), (1.0,))
    num = den = 0.0
    for node, weight in zip(nodes, weights):
        p = sigmoid(mean + sd * node)
        agree = p if successes else 1.0 - p
        w = weight * agree**k
        num += w * (1.0 - agree ** (n - k))
        den += w
    if den <= 0.0:  # the k outcomes are impossible under the prediction (underflow): no evidence to stop on
        return 1.0
    return num / den


def after_first_stage(
    first: Sequence[float | None],
    *,
    n: int,
    remaining: int,
    target: int,
    logit: tuple[float, float] | None,
    threshold: float = DEFAULT_STAGE_THRESHOLD,
) -> tuple[Next, float | None]:
    """The rule (see the module docstring): ``first`` are the ``K`` rewards (``None``: unscored), ``logit`` the
    prompt's predicted pass-rate logit (mean, variance) or ``None`` (no prediction: the rest start).

    Returns the decision and the predicted chance that the rest breaks the agreement (``None`` when not needed).
    """
    if any(r is None for r in first):
        return Next.REST, None
    rewards = [float(r) for r in first]  # type: ignore[arg-type]
    if reward_spread_verdict(rewards) is Verdict.VARIED:
        return Next.REST, None  # spread for sure
    value = rewards[0]
    if abs(value - 1.0) > ZERO_STD_EPSILON and abs(value) > ZERO_STD_EPSILON:
        return Next.REST, None  # agreement on a partial reward: the prediction is of success and failure
    if remaining <= target or logit is None:
        return Next.REST, None
    chance = rest_spread_chance(logit[0], logit[1], len(rewards), n, successes=value > 0.5)
    return (Next.DROP if chance < threshold else Next.REST), chance


#: W&B-style key prefix of the staging figures (under the project's rollout/shopsim/ namespace).
STAGED_PREFIX = "rollout/shopsim/staged/"


def staged_step_metrics(counts: dict[str, int]) -> dict[str, float]:
    """One step's staging figures from ``RolloutStep.stage_counts``: groups started staged, started whole
    (predicted to spread: staging skipped), rests started, groups stopped early (decided as zero-std drops
    after ``K``) and the episodes that saved."""
    return {
        STAGED_PREFIX + "groups_staged": float(counts["staged"]),
        STAGED_PREFIX + "groups_started_whole": float(counts["whole"]),
        STAGED_PREFIX + "rests_started": float(counts["rest_started"]),
        STAGED_PREFIX + "groups_stopped_early": float(counts["stopped_early"]),
        STAGED_PREFIX + "episodes_saved": float(counts["episodes_saved"]),
    }
