"""The data source's saved state under slime's ``train_async.py``: ``save(k)`` is the state as of the end of rollout k.

``train_async.py`` (slime 624b824) starts rollout k+1 before step k trains and calls ``save(k)`` after it:
rollout k+1 has drawn its prompts by then.  The log hook tells the data source each rollout's end
(``enrich_rollout_metrics``), the next draw keeps the state as it was then, and ``save(k)`` writes that one.
The calls below are slime's, in each loop's order (``slime/ray/rollout.py``: ``generate`` runs the rollout
function, which calls the all-samples hook, then the log hook; ``save`` calls the data source's).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from shopsimrl.slime.data_source import KEPT_ROLLOUT_STATES, SelectorDataSource, StateAtRolloutEnd, state_path
from shopsimrl.slime_metrics import enrich_rollout_metrics, record_generated_rollout_groups

GROUPS = 4


@pytest.fixture
def args(tmp_path):
    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"task-{i}", "metadata": {"task_id": f"task-{i}"}}) + "\n"
                               for i in range(40)))
    return SimpleNamespace(prompt_data=str(prompts), input_key="prompt", metadata_key="metadata", n_samples_per_prompt=2,
                           rollout_seed=0, save=str(tmp_path / "ckpt"), load=str(tmp_path / "ckpt"), reward_key="reward",
                           shopsim_selection="skip")


def generate(source, kit, args, rollout_id) -> list[str]:
    """slime's ``RolloutManager.generate(rollout_id)``: draw, play, the all-samples hook, the log hook."""
    groups = source.get_samples(GROUPS)
    tasks = [g[0].metadata["task_id"] for g in groups]
    completed = []
    for group, task in zip(groups, tasks):
        rewards = [1.0, 0.0] if int(task.split("-")[1]) % 3 else [1.0, 1.0]
        completed.append(kit.scored_group(group, rewards, task))
    record_generated_rollout_groups(args, completed, source)
    enrich_rollout_metrics(rollout_id, args, [s for g in completed for s in g], {}, 1.0)
    return tasks


def async_run(args, kit, steps, save_at) -> tuple[SelectorDataSource, list[list[str]]]:
    """``train_async.py``'s order: generate(k+1) before step k trains and before save(k)."""
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    drawn = [generate(source, kit, args, 0)]
    for k in range(steps):
        if k + 1 < steps:
            drawn.append(generate(source, kit, args, k + 1))
        if k == save_at:
            source.save(k)
    return source, drawn


def test_a_resume_from_save_k_under_train_async_draws_what_the_uninterrupted_run_drew_at_k_plus_1(args, kit):
    _, uninterrupted = async_run(args, kit, steps=6, save_at=2)
    resumed = SelectorDataSource(args, sample_cls=kit.Sample)
    resumed.load(2)  # slime: load(start_rollout_id - 1), then generate(3)
    assert [generate(resumed, kit, args, k) for k in range(3, 6)] == uninterrupted[3:6]


def test_save_k_under_train_async_is_not_the_state_after_rollout_k_plus_1_drew(args, kit):
    source, _ = async_run(args, kit, steps=4, save_at=1)  # save(1) came after rollout 2 drew and recorded
    saved = json.loads(state_path(args.save, 1).read_text())
    assert saved["sample_group_index"] == 2 * GROUPS  # rollouts 0 and 1 drew, not rollout 2
    assert source.sample_group_index == 4 * GROUPS
    assert saved != source._state()


def test_under_train_py_save_k_writes_the_current_state_as_before(args, kit):
    """``train.py``'s order: generate(k), train, save(k), then generate(k+1): no state is kept for k."""
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    for k in range(3):
        generate(source, kit, args, k)
        assert source.at_rollout_end.state_for_save(k) is None
        source.save(k)
        assert json.loads(state_path(args.save, k).read_text()) == source._state()


def test_a_kept_state_is_a_copy_that_later_draws_do_not_change(args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    generate(source, kit, args, 0)
    before = source._state()
    generate(source, kit, args, 1)
    assert source.at_rollout_end.state_for_save(0) == before != source._state()


def test_only_the_last_rollouts_states_are_kept():
    kept = StateAtRolloutEnd()
    for k in range(5):
        kept.ended(k)
        kept.before_draw(lambda k=k: {"at": k})
    assert [kept.state_for_save(k) for k in range(5)] == [None] * (5 - KEPT_ROLLOUT_STATES) + [{"at": 3}, {"at": 4}]


def test_a_draw_without_a_rollout_end_keeps_nothing():
    """Two draws of one rollout (adaptive waves): the state is kept before the first only."""
    kept = StateAtRolloutEnd()
    kept.ended(7)
    kept.before_draw(lambda: {"draw": 1})
    kept.before_draw(lambda: {"draw": 2})
    assert kept.state_for_save(7) == {"draw": 1}
