"""The heuristic policy against the real in-process ShopSim env."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shopsimrl.agent import HeuristicPolicy, PolicyTurn, make_policy, run_episode
from shopsimrl.agent.heuristic import _Request
from shopsimrl.agent.messages import EPISODE_TOOLS
from shopsimrl.env import InProcessEnvClient, Observation, Task
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.rollout.measure import measure

pytestmark = pytest.mark.slow  # thousands of episodes: with -n this file starts first


async def _client(db: Path) -> InProcessEnvClient:
    # Not owns_env: closing the env's SQLite connections while a cancelled episode's step still
    # runs in a worker thread can crash the process (reported to the env); the env is left to GC.
    return InProcessEnvClient(ShopSimEnv(db, slots=64))


@pytest.fixture
async def small_env(small_catalog: Path) -> AsyncIterator[InProcessEnvClient]:
    client = await _client(small_catalog)
    yield client
    assert client.env.pool.counters()["leased"] == 0  # every episode released its lease
    await client.aclose()


async def _actions(env: InProcessEnvClient, policy: HeuristicPolicy, task_id: str, seed: int, tmp_path: Path) -> list[str]:
    trace = tmp_path / f"{task_id}-{seed}.json"
    result = await run_episode(env, policy, task_id, rollout_id=f"r{seed}", seed=seed, trace_path=trace)
    assert result.scored
    return [step["action"] for step in json.loads(trace.read_text())["steps"]]


async def test_same_seed_same_actions_other_seeds_differ(small_env: InProcessEnvClient, tmp_path: Path) -> None:
    policy = HeuristicPolicy()
    task_ids = (await small_env.list_tasks("train"))[:12]
    differing = 0
    for task_id in task_ids:
        first = await _actions(small_env, policy, task_id, 11, tmp_path)
        again = await _actions(small_env, HeuristicPolicy(), task_id, 11, tmp_path)
        assert first == again
        others = [await _actions(small_env, policy, task_id, seed, tmp_path) for seed in range(12, 20)]
        differing += any(o != first for o in others)
    assert differing >= len(task_ids) // 2


async def test_the_policy_seed_option_changes_the_stream(small_env: InProcessEnvClient, tmp_path: Path) -> None:
    task_ids = (await small_env.list_tasks("train"))[:12]
    base = [await _actions(small_env, HeuristicPolicy(), t, 1, tmp_path) for t in task_ids]
    other = [await _actions(small_env, HeuristicPolicy(seed=99), t, 1, tmp_path) for t in task_ids]
    assert base != other


async def test_it_plays_only_through_well_formed_tool_calls(small_env: InProcessEnvClient, tmp_path: Path) -> None:
    task_ids = (await small_env.list_tasks("train"))[:40]
    policy = make_policy("heuristic")
    for i, task_id in enumerate(task_ids):
        trace_path = tmp_path / f"{i}.json"
        result = await run_episode(small_env, policy, task_id, rollout_id="r", seed=i, trace_path=trace_path)
        assert result.scored and result.protocol_errors == 0 and result.end_reason == "purchase"
        for step in json.loads(trace_path.read_text())["steps"]:
            output = step["output"]
            assert output["text"] is None and output["finish_reason"] == "tool_calls"
            assert len(output["tool_calls"]) == 1
            call = output["tool_calls"][0]
            assert step["tools"] == EPISODE_TOOLS  # one fixed tool list for the whole episode
            arguments = json.loads(call["arguments"])
            if call["name"] == "click":
                assert arguments["value"].strip()
            else:
                assert call["name"] == "search" and step["page"] == "search" and arguments["query"].strip()
            assert step["feedback"] is None  # never an invalid action


async def test_temperature_zero_is_greedy(small_env: InProcessEnvClient, tmp_path: Path) -> None:
    policy = HeuristicPolicy(temperature=0.0, keep_word=1.0)
    task_id = (await small_env.list_tasks("train"))[3]
    runs = [await _actions(small_env, policy, task_id, seed, tmp_path) for seed in range(5)]
    assert all(r == runs[0] for r in runs)


async def test_patience_makes_it_inspect_several_products(small_env: InProcessEnvClient) -> None:
    policy = HeuristicPolicy(patience=3, accept=1.01)  # never satisfied: settles after three products
    task_id = (await small_env.list_tasks("train"))[0]
    result = await run_episode(small_env, policy, task_id, rollout_id="r", seed=0)
    assert result.scored and result.end_reason == "purchase" and result.env_steps >= 7


async def test_success_rate_on_the_default_catalog_is_moderate_and_task_dependent(default_catalog: Path) -> None:
    """The acceptance numbers of docs/agent.md: 128 train tasks x 8 siblings on the default catalog."""
    client = await _client(default_catalog)
    try:
        task_ids = (await client.list_tasks("train"))[:128]
        started = time.monotonic()
        result = await measure(client, HeuristicPolicy(), task_ids, siblings=8, seed=0)
        seconds = time.monotonic() - started
    finally:
        assert client.env.pool.counters()["leased"] == 0
        await client.aclose()
    assert 0.3 <= result.success_rate <= 0.8
    rates = list(result.per_task_success.values())
    assert min(rates) == 0.0 and max(rates) == 1.0
    assert sum(0.0 < r < 1.0 for r in rates) >= len(rates) // 4  # many tasks are neither always nor never solved
    types = result.group_types
    assert types["technical"] == 0
    assert types["varied"] >= 0.3 * len(task_ids)
    assert types["all_correct"] >= 8 and types["all_wrong"] >= 4 and types["same_partial"] >= 1
    assert seconds < 60  # 1,024 episodes; the demo needs ~800 per 3 steps in well under 2 minutes


def _item(instruction: str, options: dict[str, list[str]], selected: dict[str, str]) -> Observation:
    missing = [a for a in options if a not in selected]
    product = {"product_id": "B0X", "title": "Acme AB-100 Hiking Boots", "price_min": 50.0, "price_max": 60.0,
               "attributes": ["waterproof"], "bullets": [], "options": options, "category": "Shoes"}
    clickables = ["back to search", "< prev"] + [f"{a}={v}" for a, vs in options.items() for v in vs]
    return Observation(text="", tools=[], state={"page": "item", "instruction": instruction, "product": product,
                                                 "clickables": clickables + ([] if missing else ["buy now"]),
                                                 "missing_axes": missing, "selected_options": selected})


async def test_it_picks_the_option_values_the_instruction_names() -> None:
    task = Task("t", "train", "I need waterproof hiking boots, size 9.5 and in navy, under $80.", {})
    options = {"size": ["9", "9.5", "10"], "color": ["black", "navy"]}
    for seed in range(20):
        episode = HeuristicPolicy().new_episode(task, seed)
        first = await episode.act(_item(task.instruction, options, {}), None)
        second = await episode.act(_item(task.instruction, options, {"size": "9.5"}), None)
        third = await episode.act(_item(task.instruction, options, {"size": "9.5", "color": "navy"}), None)
        assert [_value(t) for t in (first, second, third)] == ["size=9.5", "color=navy", "buy now"]


def _value(turn: PolicyTurn) -> str:
    return json.loads(turn.tool_calls[0].arguments)["value"]


@pytest.mark.parametrize(
    ("instruction", "limit"),
    [
        ("Find me a tent, under $300.", 300.0),
        ("Find me a tent, and price lower than 45.00 dollars.", 45.0),
        ("Find me a tent, roughly $50.", 55.0),
        ("Find me a tent, $30-45.", 45.0),
        ("Find me a tent, between $20 and $30.", 30.0),
        ("Find me a tent, size 10.5.", None),
    ],
)
def test_it_reads_the_budget(instruction: str, limit: float | None) -> None:
    request = _Request.read(instruction)
    assert request.limit == (pytest.approx(limit) if limit is not None else None)
    assert "tent" in request.words and "find" not in request.words


def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        HeuristicPolicy(keep_word=0)
    with pytest.raises(ValueError):
        HeuristicPolicy(temperature=-1)
    with pytest.raises(TypeError):
        HeuristicPolicy(temprature=1)
    assert HeuristicPolicy().describe()["temperature"] == 1.0
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("random")


async def test_many_concurrent_episodes_release_every_lease(small_env: InProcessEnvClient) -> None:
    policy = HeuristicPolicy()
    task_ids = (await small_env.list_tasks("train"))[:16]
    results = await asyncio.gather(*(run_episode(small_env, policy, t, rollout_id=f"{t}/{s}", seed=s)
                                     for t in task_ids for s in range(8)))
    assert all(r.scored for r in results) and len(results) == 128


class _StallingPolicy:
    """The heuristic, except that its third turn waits forever (a model that hangs)."""

    name = "stalling"

    def __init__(self) -> None:
        self.inner = HeuristicPolicy()
        self.stalled = asyncio.Event()

    def describe(self) -> dict:
        return {}

    def new_episode(self, task: Task, seed: int):
        inner, stalled = self.inner.new_episode(task, seed), self.stalled

        class _Episode:
            turns = 0

            async def act(self, observation: Observation, feedback):
                self.turns += 1
                if self.turns == 3:
                    stalled.set()
                    await asyncio.Event().wait()
                return await inner.act(observation, feedback)

        return _Episode()

    async def aclose(self) -> None:
        return None


async def test_cancelling_mid_episode_leaves_no_leased_slot(small_env: InProcessEnvClient, tmp_path: Path) -> None:
    policy = _StallingPolicy()
    task_id = (await small_env.list_tasks("train"))[0]
    task = asyncio.create_task(run_episode(small_env, policy, task_id, rollout_id="r", seed=0,
                                           trace_path=tmp_path / "t.json"))
    await policy.stalled.wait()
    assert small_env.env.pool.counters()["leased"] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert small_env.env.pool.counters()["leased"] == 0
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["cancelled"] is True and len(trace["steps"]) == 2


async def test_cancelling_many_episodes_at_arbitrary_points_leaks_nothing(small_env: InProcessEnvClient) -> None:
    policy = HeuristicPolicy()
    task_ids = (await small_env.list_tasks("train"))[:8]
    for delay in (0.0, 0.001, 0.003, 0.01):
        tasks = [asyncio.create_task(run_episode(small_env, policy, t, rollout_id=f"{t}/{s}", seed=s))
                 for t in task_ids for s in range(4)]
        await asyncio.sleep(delay)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert small_env.env.pool.counters()["leased"] == 0
