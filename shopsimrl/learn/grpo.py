"""GRPO on the linear policy: the clipped surrogate over recorded decisions, its exact gradient, and Adam.

The loss of one optimizer update is slime's policy loss with one decision standing for one
token: per episode, the mean over its decisions of ``-min(r A, clip(r, 1 - eps, 1 + eps) A)``
with ``r = exp(logp_now - logp_then)``; summed over the update's episodes and divided by
``global_batch_size`` (a constant, so an episode with advantage 0 adds exactly nothing and
dilutes nothing).  The first update of a step has ``r = 1``; the second sees the parameters
the first moved, as in slime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np  # only the grpo learner loads this module (learn/connect.py imports it when asked for)

from shopsimrl.defaults import ADAM_BETAS, ADAM_EPS, EPS_CLIP, LEARNING_RATE
from shopsimrl.learn.params import LAYOUT

if TYPE_CHECKING:
    from shopsimrl.learn.policy import Draw


def log_probs(theta: np.ndarray, decisions: Sequence[Draw]) -> tuple[np.ndarray, np.ndarray]:
    """Each decision's log-probability under ``theta`` and its gradient (one row of ``LAYOUT.size`` each)."""
    logp = np.zeros(len(decisions))
    grad = np.zeros((len(decisions), LAYOUT.size))
    by_block: dict[str, list[int]] = {}
    for i, d in enumerate(decisions):
        by_block.setdefault(d.block, []).append(i)
    for block, indices in by_block.items():
        cols = LAYOUT.slice(block)
        rows = np.array([row for i in indices for row in decisions[i].features], dtype=float)
        sizes = np.array([len(decisions[i].features) for i in indices])
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        segment = np.repeat(np.arange(len(indices)), sizes)
        scores = rows @ theta[cols]
        top = np.maximum.reduceat(scores, starts)
        e = np.exp(scores - top[segment])
        z = np.add.reduceat(e, starts)
        p = e / z[segment]
        chosen = starts + np.array([decisions[i].chosen for i in indices])
        logp[indices] = scores[chosen] - top - np.log(z)
        grad[np.ix_(indices, range(cols.start, cols.stop))] = rows[chosen] - np.add.reduceat(p[:, None] * rows, starts)
    return logp, grad


@dataclass(frozen=True)
class Trajectory:
    """One kept episode as the update sees it: its decisions and its GRPO advantage."""

    decisions: Sequence[Draw]
    advantage: float


def surrogate(theta: np.ndarray, episodes: Sequence[Trajectory], global_batch_size: int,
              eps_clip: float = EPS_CLIP, *, old: np.ndarray | None = None,
              tis: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """The update's loss and its gradient with respect to ``theta``.

    ``old``: the log-probabilities the ratio is taken against (default: those recorded when the episodes were
    played; the async loop passes the trainer's own, as slime recomputes them with the actor); ``tis``: a weight
    per decision multiplying its term (truncated importance sampling, :func:`tis_weights`)."""
    decisions = [d for ep in episodes for d in ep.decisions]
    grad = np.zeros(LAYOUT.size)
    if not decisions:
        return 0.0, grad
    logp, dlogp = log_probs(theta, decisions)
    old = np.array([d.logp for d in decisions]) if old is None else old
    adv = np.concatenate([np.full(len(ep.decisions), ep.advantage) for ep in episodes])
    weight = np.concatenate([np.full(len(ep.decisions), 1.0 / len(ep.decisions)) for ep in episodes if ep.decisions])
    if tis is not None:
        weight = weight * tis
    ratio = np.exp(logp - old)
    clipped = np.clip(ratio, 1.0 - eps_clip, 1.0 + eps_clip)
    terms = np.minimum(ratio * adv, clipped * adv)
    active = ratio * adv <= clipped * adv  # the unclipped side is the minimum: its gradient flows
    loss = -float(np.sum(weight * terms)) / global_batch_size
    grad = -(weight * active * adv * ratio) @ dlogp / global_batch_size
    return loss, grad


@dataclass
class Adam:
    """Adam (torch's defaults but the learning rate); ``t`` counts the updates taken."""

    lr: float = LEARNING_RATE
    betas: tuple[float, float] = ADAM_BETAS
    eps: float = ADAM_EPS
    t: int = 0
    m: list[float] = field(default_factory=lambda: [0.0] * LAYOUT.size)
    v: list[float] = field(default_factory=lambda: [0.0] * LAYOUT.size)

    def step(self, theta: np.ndarray, grad: np.ndarray) -> np.ndarray:
        b1, b2 = self.betas
        self.t += 1
        m = b1 * np.asarray(self.m) + (1 - b1) * grad
        v = b2 * np.asarray(self.v) + (1 - b2) * grad * grad
        self.m, self.v = m.tolist(), v.tolist()
        m_hat = m / (1 - b1**self.t)
        v_hat = v / (1 - b2**self.t)
        return theta - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def tis_weights(trainer_logp: np.ndarray, rollout_logp: np.ndarray, cap: float) -> np.ndarray:
    """Truncated importance sampling (Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training", fengyao.notion.site/off-policy-rl; slime's ``--use-tis``): ``min(pi_trainer / pi_rollout, cap)`` per
    decision (slime's ``vanilla_tis_function``, ``--tis-clip`` 2.0 by default, its lower bound 0)."""
    return np.minimum(np.exp(trainer_logp - rollout_logp), cap)


def train(theta: np.ndarray, adam: Adam, updates: Sequence[Sequence[Trajectory]],
          global_batch_size: int, *, off_policy: bool = False,
          tis_cap: float | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """One step's optimizer updates in order; returns the new parameters and the step's train metrics.

    ``train/loss`` and ``train/grad_norm`` are means over the step's updates (each taken before its
    Adam step); ``train/optimizer_updates`` counts them.  ``off_policy`` (the async loop: the episodes were
    played by older parameters): the ratio is taken against the trainer's log-probabilities at the step's
    start, as slime does by default (no correction); ``tis_cap``: and each decision is weighted by its
    truncated importance ratio against the parameters that played it.
    """
    losses, norms, extra = [], [], {}
    olds: list[np.ndarray | None] = [None] * len(updates)
    weights: list[np.ndarray | None] = [None] * len(updates)
    if off_policy:
        start, ratios = theta, []
        for u, episodes in enumerate(updates):
            decisions = [d for ep in episodes for d in ep.decisions]
            if not decisions:
                continue
            olds[u] = log_probs(start, decisions)[0]
            if tis_cap is not None:
                played = np.array([d.logp for d in decisions])
                weights[u] = tis_weights(olds[u], played, tis_cap)  # type: ignore[arg-type]
                ratios.append(np.exp(olds[u] - played))  # type: ignore[operator]
        if ratios:
            every = np.concatenate(ratios)
            extra = {"train/tis_mean": float(every.mean()), "train/tis_clipfrac": float((every > tis_cap).mean())}
    for u, episodes in enumerate(updates):
        loss, grad = surrogate(theta, episodes, global_batch_size, old=olds[u], tis=weights[u])
        theta = adam.step(theta, grad)
        losses.append(loss)
        norms.append(float(np.linalg.norm(grad)))
    return theta, {
        "train/optimizer_updates": float(len(updates)),
        "train/loss": float(np.mean(losses)) if losses else 0.0,
        "train/grad_norm": float(np.mean(norms)) if norms else 0.0,
        **extra,
    }
