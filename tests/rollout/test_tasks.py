"""The task sampler: seeded epochs, position kept across steps, no task twice in one step."""

from __future__ import annotations

import pytest

from shopsimrl.rollout.tasks import NotEnoughTasksError, TaskSampler

TASKS = [f"t{i}" for i in range(10)]


def test_one_epoch_is_a_seeded_permutation():
    a, b, c = TaskSampler(TASKS, seed=1), TaskSampler(TASKS, seed=1), TaskSampler(TASKS, seed=2)
    for s in (a, b, c):
        s.begin_step()
    first = a.take(10)
    assert sorted(first) == sorted(TASKS)
    assert b.take(10) == first
    assert c.take(10) != first


def test_position_survives_across_steps():
    sampler = TaskSampler(TASKS, seed=0)
    sampler.begin_step()
    step1 = sampler.take(4)
    sampler.begin_step()
    step2 = sampler.take(4)
    assert not set(step1) & set(step2)  # the second step continues the epoch
    sampler.begin_step()
    step3 = sampler.take(2)
    assert sorted(step1 + step2 + step3) == sorted(TASKS)  # one whole epoch
    assert sampler.epoch == 1


def test_no_task_twice_in_a_step_across_an_epoch_boundary():
    sampler = TaskSampler(TASKS, seed=3)
    sampler.begin_step()
    sampler.take(7)
    sampler.begin_step()
    taken = sampler.take(3) + sampler.take(6)  # crosses into epoch 2 inside the step
    assert len(taken) == len(set(taken)) == 9
    assert sampler.epoch == 2
    sampler.begin_step()
    assert len(set(sampler.take(10))) == 10


def test_a_step_cannot_take_more_tasks_than_the_split_holds():
    sampler = TaskSampler(TASKS)
    sampler.begin_step()
    sampler.take(8)
    with pytest.raises(NotEnoughTasksError, match="needs 11 distinct tasks but the train split has 10"):
        sampler.take(3)


def test_empty_task_list_is_refused():
    with pytest.raises(NotEnoughTasksError):
        TaskSampler([])
