"""The GRPO update of the linear policy: exact gradients, zero advantage moves nothing, Adam's bookkeeping."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shopsimrl.learn.grpo import Adam, Trajectory, log_probs, surrogate, train
from shopsimrl.learn.params import BLOCKS, LAYOUT
from shopsimrl.learn.policy import Draw


def random_decisions(rng: random.Random, count: int, theta: np.ndarray | None = None) -> list[Draw]:
    """Decisions over every block, 1-6 candidates each; ``logp`` is the one under ``theta`` when given."""
    out = []
    for _ in range(count):
        block = rng.choice(list(BLOCKS))
        width = len(BLOCKS[block])
        rows = tuple(tuple(rng.uniform(-3, 3) for _ in range(width)) for _ in range(rng.randint(1, 6)))
        decision = Draw(block, rows, rng.randrange(len(rows)), 0.0)
        if theta is not None:
            decision = Draw(block, rows, decision.chosen, float(log_probs(theta, [decision])[0][0]))
        out.append(decision)
    return out


def test_log_prob_gradient_matches_finite_differences():
    rng = random.Random(1)
    theta = np.array([rng.uniform(-1, 1) for _ in range(LAYOUT.size)])
    decisions = random_decisions(rng, 40)
    logp, grad = log_probs(theta, decisions)
    h = 1e-6
    numeric = np.zeros_like(grad)
    for j in range(LAYOUT.size):
        step = np.zeros(LAYOUT.size)
        step[j] = h
        numeric[:, j] = (log_probs(theta + step, decisions)[0] - log_probs(theta - step, decisions)[0]) / (2 * h)
    assert np.max(np.abs(grad - numeric)) < 1e-6
    # and they are log-probabilities: over every candidate of a decision they sum to one
    for d in decisions[:10]:
        everyone = [Draw(d.block, d.features, c, 0.0) for c in range(len(d.features))]
        assert np.exp(log_probs(theta, everyone)[0]).sum() == pytest.approx(1.0)


def test_surrogate_gradient_matches_finite_differences_off_policy():
    rng = random.Random(2)
    behaviour = np.array(LAYOUT.initial())
    now = behaviour + np.array([rng.uniform(-0.05, 0.05) for _ in range(LAYOUT.size)])  # a second update's view
    episodes = [Trajectory(random_decisions(rng, rng.randint(1, 8), behaviour), rng.uniform(-2, 2)) for _ in range(16)]
    _, grad = surrogate(now, episodes, global_batch_size=16)
    h = 1e-6
    numeric = np.array([(surrogate(now + h * e, episodes, 16)[0] - surrogate(now - h * e, episodes, 16)[0]) / (2 * h)
                        for e in np.eye(LAYOUT.size)])
    assert np.max(np.abs(grad - numeric)) < 1e-6


def test_zero_advantage_episodes_move_nothing():
    rng = random.Random(3)
    theta = np.array(LAYOUT.initial())
    informative = [Trajectory(random_decisions(rng, 5, theta), a) for a in (1.2, -0.4, -0.8)]
    flat = [Trajectory(random_decisions(rng, 5, theta), 0.0) for _ in range(5)]
    loss_a, grad_a = surrogate(theta, informative, global_batch_size=8)
    loss_b, grad_b = surrogate(theta, informative + flat, global_batch_size=8)
    # no pull, and no dilution of the others (equal up to the order of floating-point sums)
    assert loss_b == pytest.approx(loss_a, abs=1e-15) and np.allclose(grad_a, grad_b, rtol=1e-12, atol=1e-15)
    # a step whose every kept group has zero spread leaves the parameters exactly where they were
    adam = Adam()
    after, metrics = train(theta, adam, [flat, flat], global_batch_size=8)
    assert np.array_equal(after, theta) and metrics["train/grad_norm"] == 0.0
    assert adam.t == 2 and adam.m == [0.0] * LAYOUT.size


def test_adam_counts_updates_and_moves_against_the_gradient():
    theta = np.zeros(LAYOUT.size)
    grad = np.zeros(LAYOUT.size)
    grad[0] = 2.0
    adam = Adam(lr=0.1)
    after = adam.step(theta, grad)
    assert adam.t == 1 and after[0] == pytest.approx(-0.1) and not after[1:].any()


def test_async_loop_takes_the_ratio_against_the_trainers_log_probs_and_tis_weights_each_decision():
    rng = random.Random(5)
    behaviour = np.array(LAYOUT.initial())  # the parameters that played (one update behind)
    trainer = behaviour + np.array([rng.uniform(-0.3, 0.3) for _ in range(LAYOUT.size)])
    episodes = [Trajectory(random_decisions(rng, rng.randint(1, 8), behaviour), rng.uniform(-2, 2)) for _ in range(16)]
    decisions = [d for ep in episodes for d in ep.decisions]
    trainer_logp = log_probs(trainer, decisions)[0]
    # slime's default (no correction): the first update's ratio is 1, as if the trainer had played
    on_policy = [Trajectory([Draw(d.block, d.features, d.chosen, float(lp)) for d, lp in
                             zip(ep.decisions, trainer_logp[sum(len(e.decisions) for e in episodes[:i]):])], ep.advantage)
                 for i, ep in enumerate(episodes)]
    plain = surrogate(trainer, episodes, 16, old=trainer_logp)
    assert plain[0] == pytest.approx(surrogate(trainer, on_policy, 16)[0])
    assert np.allclose(plain[1], surrogate(trainer, on_policy, 16)[1])
    # TIS: each term times min(pi_trainer / pi_rollout, C); a cap of 1 never weighs a decision up
    cap = 1.0
    weights = np.minimum(np.exp(trainer_logp - np.array([d.logp for d in decisions])), cap)
    assert weights.max() <= cap and weights.min() < cap
    corrected = surrogate(trainer, episodes, 16, old=trainer_logp, tis=weights)
    assert corrected[0] != pytest.approx(plain[0])
    theta, metrics = train(trainer, Adam(), [episodes], 16, off_policy=True, tis_cap=cap)
    assert metrics["train/tis_clipfrac"] == pytest.approx(float((np.exp(trainer_logp - np.array(
        [d.logp for d in decisions])) > cap).mean()))
    expected, _ = train(trainer, Adam(), [episodes], 16)  # on-policy bookkeeping: the recorded log-probs
    assert not np.allclose(theta, expected)
