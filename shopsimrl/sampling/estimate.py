"""Pass-rate estimates that follow the policy: one skill for the policy, one difficulty per prompt (a Rasch model).

A prompt's pass rate under the current policy is modelled as::

    p_i = sigmoid(skill − difficulty_i)

Both are uncertain and Gaussian: ``skill ~ N(skill_mean, skill_var)`` is shared by
every prompt, ``difficulty_i ~ N(mean_i, var_i)`` is the prompt's own.  A finished
group (``k`` successes of ``n``) updates the Gaussian of ``x = skill − difficulty_i``
by a Laplace approximation of the binomial likelihood, and the change is split
between the two in proportion to their variances, as in TrueSkill or a Kalman
filter: a well-known prompt that suddenly passes more often mostly moves the
skill.  A prompt's first group only places the prompt: its prior is relative to
the skill, so that group says nothing about the policy (otherwise a prompt set
that is mostly easy would drag the skill up with every first try).

Why a shared skill: GRPO training moves the policy between two observations of a
prompt, and it moves it for every prompt at once.  A per-prompt estimate that only
forgets (a decayed Beta posterior) cannot tell that a prompt which failed 8 of 8
twenty steps ago is now near 50%; with the skill tracked across all prompts, the
model predicts it.  Between observations the skill does a random walk
(``SKILL_DRIFT`` per observation), and each prompt's difficulty one of its own
(``DIFFICULTY_DRIFT`` per observation of any prompt), so old evidence fades.

With cluster labels (``SkillModel(count, clusters=...)``) the logit gains a term
per cluster, ``x = skill + cluster_c − difficulty_i``: what the policy learned in
prompt ``i``'s cluster beyond what carried to every prompt.  It starts at 0 (the
origin, like the skill), walks ``CLUSTER_DRIFT`` per recorded group of any prompt
since the cluster was last observed (learning elsewhere may not carry to it), and
takes its variance's share of each re-observation's surprise.  A first group
places the prompt relative to the skill and its cluster's term, so it moves
neither.  Without labels there is no such term and every figure is as before.

Predictions average ``z(p) = pⁿ + (1−p)ⁿ`` (the chance that ``n`` siblings agree)
over the Gaussian of ``x`` by Gauss-Hermite quadrature.  Pure: no I/O, no clock.
Every constant and its reason is in docs/selection.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

#: Standard deviation (logits) of a never-seen prompt's difficulty around the policy's skill.
PRIOR_SD = 3.0
#: Random-walk standard deviation (logits) of the policy's skill per recorded group: the policy keeps moving.
SKILL_DRIFT = 0.05
#: Random-walk standard deviation (logits) of a prompt's difficulty per recorded group of any prompt.
DIFFICULTY_DRIFT = 0.02
#: Random-walk standard deviation (logits) of a cluster's own term per recorded group of any prompt (labelled
#: prompts only): learning in one cluster may or may not carry to another.
CLUSTER_DRIFT = 0.03
#: Gauss-Hermite nodes for the averages over a Gaussian logit.
QUADRATURE_NODES = 9
#: Gauss-Hermite nodes of :func:`fit_population` (a likelihood like ``p^n`` weighs the tails: 9 are too few).
POPULATION_NODES = 32
#: Most steps of the Laplace approximation's safeguarded Newton search (bisection alone needs about 40).
NEWTON_STEPS = 80
#: The grid of :func:`fit_population`: means and standard deviations (logits) of the population of pass-rate logits.
POPULATION_MEANS = tuple(-8.0 + 0.25 * j for j in range(65))
POPULATION_SDS = tuple(0.25 * j for j in range(1, 33))


def zero_spread_probability(p: float, n: int) -> float:
    """``z(p) = pⁿ + (1−p)ⁿ``: the chance that ``n`` siblings with pass rate ``p`` all agree."""
    return p**n + (1.0 - p) ** n


def sigmoid(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@functools.cache
def hermite_rule(count: int = QUADRATURE_NODES) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Nodes and weights for ``E[f(Z)]``, ``Z ~ N(0, 1)`` (probabilists' Gauss-Hermite, weights summing to 1)."""
    from numpy.polynomial.hermite_e import hermegauss  # lazily: importing the package stays light

    nodes, weights = hermegauss(count)
    total = float(weights.sum())
    return tuple(float(x) for x in nodes), tuple(float(w) / total for w in weights)


def gaussian_zero_spread(mean: float, var: float, n: int) -> float:
    """``E[z(sigmoid(x))]`` for ``x ~ N(mean, var)``: the predicted chance of zero spread."""
    sd = math.sqrt(max(var, 0.0))
    total = 0.0
    for node, weight in zip(*hermite_rule()):
        p = sigmoid(mean + sd * node)
        total += weight * (p**n + (1.0 - p) ** n)
    return total


def gaussian_pass_rate(mean: float, var: float) -> float:
    """``E[sigmoid(x)]`` for ``x ~ N(mean, var)``."""
    sd = math.sqrt(max(var, 0.0))
    return sum(weight * sigmoid(mean + sd * node) for node, weight in zip(*hermite_rule()))


def laplace_binomial(mean: float, var: float, successes: float, n: float) -> tuple[float, float]:
    """Posterior ``(mode, variance)`` of ``x`` for prior ``N(mean, var)`` and ``successes`` of ``n`` Bernoulli(sigmoid(x)).

    Fractional ``successes`` (rewards in [0, 1] read as success probabilities) are fine.
    """
    precision = 1.0 / var
    # The gradient falls monotonically, positive below ``low`` and negative above ``high``.  Newton's method
    # inside that bracket, bisecting whenever a step would leave it or fails to halve (plain Newton cycles on a
    # wide prior; bisection alone converges for sure).
    low, high = mean + var * (successes - n), mean + var * successes
    x = min(max(mean, low), high)
    last_step = high - low
    for _ in range(NEWTON_STEPS):
        p = sigmoid(x)
        grad = (mean - x) * precision + successes - n * p
        if grad > 0.0:
            low = x
        else:
            high = x
        step = grad / (precision + n * p * (1.0 - p))
        if not low < x + step < high or abs(step) > 0.5 * abs(last_step):
            step = 0.5 * (low + high) - x
        last_step = step
        x += step
        if abs(step) < 1e-10 or high - low < 1e-10:
            break
    p = sigmoid(x)
    return x, 1.0 / (precision + n * p * (1.0 - p))


class SkillModel:
    """The policy's skill and every prompt's difficulty (indices ``0 .. count−1``), updated group by group.

    ``clusters``: each prompt's cluster (``0 .. K−1``), or ``None`` for no cluster term.
    """

    def __init__(self, count: int, prior_sd: float = PRIOR_SD, clusters: Sequence[int] | None = None) -> None:
        if not prior_sd > 0.0:
            raise ValueError(f"prior_sd must be > 0 (logits), got {prior_sd!r}")
        self.prior_var = prior_sd * prior_sd
        self.skill_mean = 0.0
        self.skill_var = 0.0  # the origin: difficulties are measured from the policy's starting skill
        self.mean = [0.0] * count  # difficulty means (valid once observed)
        self.var = [self.prior_var] * count
        self.stamp = [0] * count  # clock at the prompt's last observation
        self.clock = 0  # groups observed so far
        self.cluster: list[int] | None = None
        if clusters is not None:
            self.cluster = [int(c) for c in clusters]
            if len(self.cluster) != count or any(c < 0 for c in self.cluster):
                raise ValueError(f"clusters: need one cluster index >= 0 per prompt ({count}), got {len(self.cluster)}")
            k = max(self.cluster, default=-1) + 1
            self.cluster_mean = [0.0] * k  # the cluster's own term: learned beyond the shared skill
            self.cluster_var = [0.0] * k  # the origin, like the skill
            self.cluster_stamp = [0] * k

    def _cluster_term(self, i: int) -> tuple[float, float]:
        """Mean and variance of prompt ``i``'s cluster term now (0, 0 without labels)."""
        if self.cluster is None:
            return 0.0, 0.0
        c = self.cluster[i]
        fade = CLUSTER_DRIFT * CLUSTER_DRIFT * (self.clock - self.cluster_stamp[c])
        return self.cluster_mean[c], self.cluster_var[c] + fade

    def cluster_skill(self, c: int) -> float:
        """The skill a prompt of cluster ``c`` meets: shared skill plus the cluster's term (labelled prompts)."""
        return self.skill_mean + (self.cluster_mean[c] if self.cluster is not None else 0.0)

    def logit(self, i: int, observed: bool) -> tuple[float, float]:
        """Mean and variance of ``skill (+ cluster) − difficulty_i`` now (a never-seen prompt sits at the skill its
        cluster meets, ``PRIOR_SD`` wide)."""
        if self.cluster is None:
            if not observed:
                return 0.0, self.skill_var + self.prior_var
            fade = DIFFICULTY_DRIFT * DIFFICULTY_DRIFT * (self.clock - self.stamp[i])
            return self.skill_mean - self.mean[i], self.skill_var + self.var[i] + fade
        c_mean, c_var = self._cluster_term(i)
        if not observed:
            return 0.0, self.skill_var + c_var + self.prior_var
        fade = DIFFICULTY_DRIFT * DIFFICULTY_DRIFT * (self.clock - self.stamp[i])
        return self.skill_mean + c_mean - self.mean[i], self.skill_var + c_var + self.var[i] + fade

    def zero_spread(self, i: int, observed: bool, n: int) -> float:
        mean, var = self.logit(i, observed)
        return gaussian_zero_spread(mean, var, n)

    def pass_rate(self, i: int, observed: bool) -> float:
        mean, var = self.logit(i, observed)
        return gaussian_pass_rate(mean, var)

    def observe(self, i: int, observed: bool, successes: float, n: int) -> None:
        """One group of prompt ``i``: ``successes`` of ``n``; ``observed``: the prompt was observed before."""
        self.skill_var += SKILL_DRIFT * SKILL_DRIFT
        c_mean, c_var = self._cluster_term(i)
        if self.cluster is not None:  # the cluster's walk since its last observation, made explicit
            c = self.cluster[i]
            self.cluster_var[c] = c_var
            self.cluster_stamp[c] = self.clock + 1
        if not observed:  # placed relative to the skill: a first group says where the prompt is, not the policy
            self.mean[i] = self.skill_mean + c_mean
            self.var[i] = self.prior_var
            skill_var = 0.0
            c_var = 0.0
        else:
            self.var[i] += DIFFICULTY_DRIFT * DIFFICULTY_DRIFT * (self.clock - self.stamp[i])
            skill_var = self.skill_var
        prior_mean, prior_var = self.skill_mean + c_mean - self.mean[i], skill_var + c_var + self.var[i]
        post_mean, post_var = laplace_binomial(prior_mean, prior_var, successes, n)
        moved, shrink = post_mean - prior_mean, 1.0 - post_var / prior_var
        skill_share, own_share = skill_var / prior_var, self.var[i] / prior_var
        self.skill_mean += skill_share * moved
        self.mean[i] -= own_share * moved
        self.skill_var -= self.skill_var * skill_share * shrink
        self.var[i] -= self.var[i] * own_share * shrink
        if self.cluster is not None and c_var > 0.0:
            c = self.cluster[i]
            c_share = c_var / prior_var
            self.cluster_mean[c] += c_share * moved
            self.cluster_var[c] -= c_var * c_share * shrink
        self.clock += 1
        self.stamp[i] = self.clock

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {
            "prior_var": self.prior_var, "skill": [self.skill_mean, self.skill_var], "mean": list(self.mean),
            "var": list(self.var), "stamp": list(self.stamp), "clock": self.clock,
        }
        if self.cluster is not None:
            state["clusters"] = [list(self.cluster_mean), list(self.cluster_var), list(self.cluster_stamp)]
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        count = len(self.mean)
        for name in ("mean", "var", "stamp"):
            if len(state[name]) != count:  # type: ignore[arg-type]
                raise ValueError(f"selector state: {name} has {len(state[name])} entries for {count} prompts")  # type: ignore[arg-type]
        if (self.cluster is None) != ("clusters" not in state):
            raise ValueError("selector state: saved with cluster labels and loaded without them, or the reverse")
        self.prior_var = float(state["prior_var"])  # type: ignore[arg-type]
        self.skill_mean, self.skill_var = (float(x) for x in state["skill"])  # type: ignore[attr-defined]
        self.mean = [float(x) for x in state["mean"]]  # type: ignore[attr-defined]
        self.var = [float(x) for x in state["var"]]  # type: ignore[attr-defined]
        self.stamp = [int(x) for x in state["stamp"]]  # type: ignore[attr-defined]
        self.clock = int(state["clock"])  # type: ignore[arg-type]
        if self.cluster is not None:
            means, variances, stamps = state["clusters"]  # type: ignore[misc]
            if len(means) != len(self.cluster_mean):
                raise ValueError(f"selector state: {len(means)} clusters for {len(self.cluster_mean)}")
            self.cluster_mean = [float(x) for x in means]
            self.cluster_var = [float(x) for x in variances]
            self.cluster_stamp = [int(x) for x in stamps]


def fit_population(counts: dict[tuple[int, int], float]) -> tuple[float, float]:
    """Maximum-likelihood ``(mean, variance)`` of a Gaussian population of pass-rate logits, from groups of first
    tries: ``counts[(n, k)]`` is the (decayed) number of groups with ``k`` successes of ``n`` siblings.  Each
    group's prompt is a draw from the population, so a group's chance is the binomial averaged over it (a
    beta-binomial in logits).  A grid search (``POPULATION_MEANS`` x ``POPULATION_SDS``): no optimizer to
    diverge.  Groups of fewer siblings (a staged group decided after ``K``) count as what they showed."""
    import numpy as np  # lazily: importing the package stays light

    nodes, weights = hermite_rule(POPULATION_NODES)
    means = np.array(POPULATION_MEANS)[:, None, None]
    sds = np.array(POPULATION_SDS)[None, :, None]
    x = means + sds * np.array(nodes)[None, None, :]
    log_p = -np.logaddexp(0.0, -x)  # log sigmoid(x)
    log_q = -np.logaddexp(0.0, x)  # log (1 - sigmoid(x))
    w = np.array(weights)[None, None, :]
    total = np.zeros((len(POPULATION_MEANS), len(POPULATION_SDS)))
    for (n, k), count in counts.items():
        if count > 0.0:  # the binomial coefficient is the same for every cell: left out
            chance = (w * np.exp(k * log_p + (n - k) * log_q)).sum(axis=2)
            total += count * np.log(np.maximum(chance, 1e-300))
    a, b = np.unravel_index(int(np.argmax(total)), total.shape)
    return POPULATION_MEANS[a], POPULATION_SDS[b] ** 2
