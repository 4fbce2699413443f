"""slime's asynchronous loop (``train_async.py``, ``ASYNC=1``) with the launcher's argv and our hooks.

One configuration with our data source (``SELECTION=skip WAVES=fixed``), shorter than the
``train.py`` legs: 24 steps, an eval every 5, a checkpoint every 10, the training actor crashing at
step 15, the resume through slime's own ``load``.  rollout k+1 is generated before step k trains
(the stand-in Ray runs each call when made, so the two do not overlap in time: the order is slime's,
and the ``loop`` check asserts it).  ``shopsimrl slime check`` (``make slime-check``) runs every
configuration through both loops, 80 steps each.

Every check of the ``train.py`` legs holds, ``resume`` included: slime 624b824's ``train_async.py``
saves the data source at step k after step k+1's rollout drew its prompts, and the data source saves
its state as of the end of rollout k (``StateAtRolloutEnd`` in ``shopsimrl/slime/data_source.py``).
Before that fix the resumed run's step 10 drew the uninterrupted run's step 11 prompts, and step 10's
were never trained (``make mutate -k async`` puts the defect back: this file's resume test fails).
"""

from __future__ import annotations

import pytest

from shopsimrl.slime.harness.checks import CHECKS
from shopsimrl.slime.harness.loop import LoopSettings, run_configuration
from shopsimrl.slime.harness.outcome import Status

SETTINGS = LoopSettings(steps=24, eval_interval=5, save_interval=10, crash_at=15, tasks=400,
                        informative_tasks=100).asynchronous()


@pytest.fixture(scope="module")
def async_run(slime_src, tmp_path_factory):
    return run_configuration(slime_src, tmp_path_factory.mktemp("slime-async"), "skip", "fixed", SETTINGS)


def test_the_legs_ran_slimes_train_async(async_run):
    full, crash, resume = async_run.legs["full"], async_run.legs["crash"], async_run.legs["resume"]
    assert full["status"] == 0 and sorted(map(int, full["trained"])) == list(range(24))
    assert full["script"] == crash["script"] == resume["script"] == "train_async.py"
    assert crash["status"] == 3 and "injected" in crash["error"]
    assert min(map(int, resume["trained"])) == SETTINGS.resume_from == 10
    assert async_run.name == "SELECTION=skip WAVES=fixed ASYNC=1"


@pytest.mark.parametrize("check", [c for c in CHECKS if c != "resume"])
def test_the_checks_hold_in_the_async_loop(async_run, check):
    outcome = async_run.checks[check]
    assert (outcome.status, outcome.problems) == (Status.PASS, ()), f"{check}: {outcome}"


def test_a_resume_of_the_async_loop_equals_the_uninterrupted_run(async_run):
    outcome = async_run.checks["resume"]
    assert (outcome.status, outcome.problems) == (Status.PASS, ()), outcome
    full, resume = async_run.legs["full"], async_run.legs["resume"]
    for step in range(SETTINGS.resume_from, SETTINGS.steps):  # the same prompts drawn, step by step
        drawn = [sorted(tasks) for rid, tasks, _ in full["draws"] if rid == step]
        assert drawn and drawn == [sorted(tasks) for rid, tasks, _ in resume["draws"] if rid == step], step


def test_rollout_k_plus_1_drew_before_step_k_trained_and_its_feedback_came_first(async_run):
    """slime's asynchronous order, read from the leg: rollout k+1's first draw comes before step k trains; step k's
    records come before rollout k+1's first draw (its rollout returned before slime started the next)."""
    order = [tuple(event) for event in async_run.legs["full"]["feedback"]]
    for k in range(SETTINGS.steps - 1):
        assert order.index(("hand", k + 1)) < order.index(("train", k))
        assert max(i for i, e in enumerate(order) if e == ("record", k)) < order.index(("hand", k + 1))
    assert async_run.checks["feedback"].note == "step k's feedback reached step k+1's picks in every step"
