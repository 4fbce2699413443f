"""Every task is solvable through search: an oracle scores r_success = 1 on 200 tasks of the 20k catalog."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from shopsimrl.defaults import DEFAULT_PRODUCTS
from shopsimrl.env.build import build_catalog
from shopsimrl.env.core import ShopSimEnv


@pytest.fixture(scope="module")
def default_env(cache_dir: Path) -> Iterator[ShopSimEnv]:
    with ShopSimEnv(build_catalog(DEFAULT_PRODUCTS, 0, cache_dir), slots=4) as env:
        yield env


def oracle_episode(env: ShopSimEnv, task_id: str) -> dict:
    """Search with the instruction itself, page to the goal, pick the goal options, buy."""
    start = env.reset(task_id)
    lease, goal = start.lease_id, start.task.goal
    try:
        result = env.step(lease, f"search[{start.task.instruction}]")
        while goal["product_id"] not in result.observation.state["clickables"]:
            assert "next >" in result.observation.state["clickables"], "goal not within the hits"
            result = env.step(lease, "click[next >]")
        result = env.step(lease, f"click[{goal['product_id']}]")
        for axis, values in result.observation.state["product"]["options"].items():
            result = env.step(lease, f"click[{axis}={goal['options'].get(axis, values[0])}]")
        result = env.step(lease, "click[buy now]")
        assert result.terminated and result.info["feedback"] is None
        return result.info["reward_detail"]
    finally:
        env.release(lease)


def test_oracle_succeeds_on_200_sampled_tasks(default_env: ShopSimEnv) -> None:
    everything = [t for split in ("train", "val", "test") for t in default_env.list_tasks(split)]
    assert len(everything) == 2000
    sample = random.Random(42).sample(everything, 200)
    failures = [t for t in sample if oracle_episode(default_env, t)["r_success"] != 1.0]
    assert failures == []


def test_a_sloppy_agent_fails_sometimes(default_env: ShopSimEnv) -> None:
    """Buying the first hit with the first option values must not be a winning selection."""
    rewards = []
    for task_id in default_env.list_tasks("val")[:60]:
        start = default_env.reset(task_id)
        lease = start.lease_id
        result = default_env.step(lease, f"search[{start.task.instruction}]")
        result = default_env.step(lease, f"click[{result.observation.state['products'][0]['product_id']}]")
        for axis, values in result.observation.state["product"]["options"].items():
            result = default_env.step(lease, f"click[{axis}={values[0]}]")
        rewards.append(default_env.step(lease, "click[buy now]").info["reward_detail"]["r_success"])
        default_env.release(lease)
    assert 0 < sum(rewards) < len(rewards) * 0.7
