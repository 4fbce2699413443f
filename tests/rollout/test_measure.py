"""rollout.measure: groups of siblings on the rollout's group runner, counted with triage's labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.fakes import TASK, WINNING, FakeEnv, ScriptedPolicy, call

from shopsimrl.rollout.group import CLASSIFICATIONS
from shopsimrl.rollout.measure import measure, measurement_groups


class FreshScript:
    """A policy whose every episode replays ``turns`` from the start (siblings run concurrently)."""

    name = "scripted"

    def __init__(self, turns: Sequence[Any]) -> None:
        self.turns = turns

    def new_episode(self, task: Any, seed: int) -> ScriptedPolicy:
        return ScriptedPolicy(self.turns)

    async def aclose(self) -> None:
        return None


WRONG_SIZE = [*WINNING[:2], call("click", value="size=10"), WINNING[3]]


async def test_a_solved_task_is_one_all_correct_group_and_every_lease_is_released() -> None:
    env = FakeEnv()
    result = await measure(env, FreshScript(WINNING), [TASK.task_id], siblings=4)
    assert result.episodes == 4 and result.success_rate == 1.0 and result.reward_mean == 1.0
    assert result.group_types == {label: int(label == "all_correct") for label in CLASSIFICATIONS}
    assert result.end_reasons == {"purchase": 4} and result.per_task_success == {TASK.task_id: 1.0}
    assert env.leased == 0 and len(env.released) == 4


async def test_a_failed_task_is_all_wrong_and_a_failing_env_is_technical() -> None:
    wrong = await measure(FakeEnv(), FreshScript(WRONG_SIZE), [TASK.task_id], siblings=3)
    assert wrong.group_types["all_wrong"] == 1 and wrong.success_rate == 0.0
    broken = await measure(FakeEnv(fail_on="step"), FreshScript(WINNING), [TASK.task_id], siblings=3)
    assert broken.group_types["technical"] == 1 and broken.episodes == 3


def test_siblings_get_the_same_seeds_on_every_task() -> None:
    groups = measurement_groups(["a", "b"], siblings=3, seed=2)
    assert [[s.seed for s in g.specs] for g in groups] == [[2000, 2001, 2002]] * 2
    assert all(s.trace_path is None for g in groups for s in g.specs)
    assert [s.rollout_id for s in groups[1].specs] == ["b/0", "b/1", "b/2"]
