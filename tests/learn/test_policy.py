"""The learned shopper on the real env: log-probabilities recorded as it plays, the heuristic's start."""

from __future__ import annotations

import numpy as np
import pytest

from shopsimrl.agent import run_episode
from shopsimrl.env import InProcessEnvClient
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.learn.grpo import log_probs
from shopsimrl.learn.params import LAYOUT
from shopsimrl.learn.policy import LinearPolicy


@pytest.fixture
async def client(small_catalog):
    env = ShopSimEnv(small_catalog, slots=8)
    client = InProcessEnvClient(env, owns_env=True)
    yield client
    await client.aclose()


async def play(client, policy, tasks, seed=11):
    return [await run_episode(client, policy, t, rollout_id=f"r-{t}", seed=seed) for t in tasks]


async def test_recorded_log_probs_are_the_policys_own(client):
    tasks = (await client.list_tasks("train"))[:12]
    rng = np.random.default_rng(0)
    theta = np.array(LAYOUT.initial()) + rng.normal(0, 0.3, LAYOUT.size)
    policy = LinearPolicy(theta)
    results = await play(client, policy, tasks)
    assert all(r.scored for r in results)
    records = policy.take_records()
    assert set(records) == {(t, 11) for t in tasks} and policy.take_records() == {}
    decisions = [d for ds in records.values() for d in ds]
    assert {d.block for d in decisions} >= {"query", "result", "option"}
    recomputed, _ = log_probs(theta, decisions)
    assert np.allclose(recomputed, [d.logp for d in decisions], atol=1e-12)


async def test_same_parameters_same_episode_and_greedy_views_record_nothing(client):
    tasks = (await client.list_tasks("train"))[:6]
    policy = LinearPolicy()
    first = await play(client, policy, tasks)
    again = await play(client, policy, tasks)
    assert [(r.reward, r.env_steps) for r in first] == [(r.reward, r.env_steps) for r in again]
    greedy = policy.view(greedy=True)
    await play(client, greedy, tasks)
    assert greedy.take_records() == {}


def test_untrained_parameters_carry_the_heuristics_scores():
    theta = dict(zip(LAYOUT.names(), LAYOUT.initial()))
    assert theta["result.title_share"] == 1.0 and theta["option.named"] == 1.0 and theta["query.keep"] == 1.0
    assert theta["result.title_precision"] == 0.0 and theta["buy.match_gap"] == 0.0
    with pytest.raises(ValueError, match="parameters"):
        LinearPolicy([0.0])
