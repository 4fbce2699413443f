"""SelectorDataSource against slime's data-source interface (slime/rollout/data_source.py, slime/ray/rollout.py).

slime builds it as ``cls(args)``, calls ``get_samples(n) -> list[list[Sample]]`` (n groups of
``n_samples_per_prompt`` copies with ``group_index`` / ``index`` counting up), ``add_samples``,
``save(rollout_id)`` / ``load(rollout_id)`` and ``len()``; the all-samples hook gets the data source.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from shopsimrl.slime.data_source import SelectorDataSource, state_path
from shopsimrl.slime_metrics import enrich_rollout_metrics, record_generated_rollout_groups


@pytest.fixture
def args(tmp_path):
    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"task-{i}", "metadata": {"task_id": f"task-{i}", "split": "train"}}) + "\n"
                               for i in range(40)))
    return SimpleNamespace(prompt_data=str(prompts), input_key="prompt", metadata_key="metadata", n_samples_per_prompt=4,
                           rollout_seed=0, save=str(tmp_path / "ckpt"), load=str(tmp_path / "ckpt"), reward_key="reward",
                           shopsim_selection="spread")


def finish(kit, groups, rewards_for):
    """Score each handed-out group like the generate hook would."""
    unscored = kit.unscored
    done = []
    for group in groups:
        task = group[0].metadata["task_id"]
        rewards = rewards_for(task)
        if rewards is None:
            done.append([unscored(s.group_index, s.index) for s in group])
            continue
        done.append(kit.scored_group(group, rewards, task))
    return done


def test_get_samples_has_slime_s_shape(args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    assert len(source) == 40
    groups = source.get_samples(3)
    assert [len(g) for g in groups] == [4, 4, 4]
    assert [s.group_index for g in groups for s in g] == [0] * 4 + [1] * 4 + [2] * 4
    assert [s.index for g in groups for s in g] == list(range(12))
    assert all(s.prompt == g[0].prompt and s.metadata["task_id"] == s.prompt for g in groups for s in g)
    assert groups[0][0] is not groups[0][1]  # deep copies, as slime makes


@pytest.mark.parametrize("handed", ["the data source (custom rollout functions)",
                                    "its bound get_samples (slime's own generate_rollout)"])
def test_the_all_samples_hook_feeds_the_selector_and_aborted_prompts_come_back(args, kit, handed):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    groups = source.get_samples(6)
    tasks = [g[0].metadata["task_id"] for g in groups]
    completed = finish(kit, groups[:4], lambda t: None if t == tasks[3] else [1.0, 1.0, 1.0, 1.0] if t == tasks[0] else [1.0, 0.0, 1.0, 0.0])
    # groups 4 and 5 were aborted by slime
    record_generated_rollout_groups(args, completed, source if handed.startswith("the") else source.get_samples)
    assert source.selector.in_flight == frozenset()
    assert source.selector.predicted_pass_rate(tasks[0]) > 0.8 > 0.6 > source.selector.predicted_pass_rate(tasks[1])
    assert source.selector.predicted_pass_rate(tasks[3]) is None  # technical: released, no evidence
    again = [g[0].metadata["task_id"] for g in source.get_samples(8)]
    fresh = [t for t in again if t not in tasks[:3]]  # not picked from what was observed
    assert set(fresh[:3]) == {tasks[3], tasks[4], tasks[5]}  # released prompts first in line: never lost
    metrics: dict = {}
    enrich_rollout_metrics(1, args, [s for g in completed[1:3] for s in g], metrics, 1.0)
    assert metrics["rollout/shopsim/selector/prompts_chosen"] == 6
    assert metrics["rollout/shopsim/selector/informative_per_1k_episodes"] == pytest.approx(1000 * 2 / 24)


def test_save_and_load_with_slime_s_checkpoints(args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    groups = source.get_samples(5)
    record_generated_rollout_groups(args, finish(kit, groups, lambda t: [1.0, 0.0, 0.0, 1.0]), source)
    source.get_samples(2)  # in flight at save time (a crash mid-step)
    source.save(7)
    assert state_path(args.save, 7).exists()
    resumed = SelectorDataSource(args, sample_cls=kit.Sample)
    resumed.load(7)
    assert resumed.sample_index == source.sample_index and resumed.sample_group_index == source.sample_group_index
    assert resumed.selector.in_flight == frozenset()  # what was in flight went back to the pool
    resumed.load(8)  # no state for that step: unchanged, no error
    assert resumed.sample_index == source.sample_index


def test_add_samples_are_served_first_and_checked(args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    partial = source.get_samples(1)
    source.add_samples(partial)
    assert source.get_buffer_length() == 1
    assert source.get_samples(2)[0] is partial[0]
    with pytest.raises(ValueError, match="n_samples_per_prompt=4"):
        source.add_samples([[kit.Sample()]])


def test_partial_rollout_is_refused_when_slime_builds_the_data_source(args, kit):
    args.partial_rollout = True
    with pytest.raises(ValueError, match="--partial-rollout is not supported"):
        SelectorDataSource(args, sample_cls=kit.Sample)


def test_bad_prompt_file_is_named(tmp_path, args, kit):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "x"}) + "\n")
    args.prompt_data = str(bad)
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        SelectorDataSource(args, sample_cls=kit.Sample)


def test_selection_informative_puts_the_data_source_on_slime_s_command_line(tmp_path):
    from shopsimrl.slime.launch import LaunchError, TrainConfig

    config = TrainConfig.from_env({"RUN_DIR": str(tmp_path), "SELECTION": "skip"})
    argv = config.train_args()
    assert argv[argv.index("--data-source-path") + 1] == "shopsimrl.slime.data_source.SelectorDataSource"
    assert config.custom_config()["shopsim_selection"] == "skip"
    assert "--data-source-path" not in TrainConfig.from_env({"RUN_DIR": str(tmp_path)}).train_args()
    with pytest.raises(LaunchError, match="SELECTION=.greedy. is not one of seed, skip, spread"):
        TrainConfig.from_env({"RUN_DIR": str(tmp_path), "SELECTION": "greedy"}).check()
    adaptive = TrainConfig.from_env({"RUN_DIR": str(tmp_path), "WAVES": "adaptive"})
    argv = adaptive.train_args()
    assert argv[argv.index("--rollout-function-path") + 1] == "shopsimrl.slime.rollout_fn.generate_rollout"
    assert "--data-source-path" in argv and adaptive.custom_config()["shopsim_selection"] == "seed"


def test_under_our_adaptive_rollout_function_the_selector_explores_over_the_adaptive_horizon(args, kit):
    from shopsimrl.defaults import ROLLOUT_FUNCTION_PATH
    from shopsimrl.sampling.adaptive import ADAPTIVE_EXPLORE_HORIZON_EPOCHS
    from shopsimrl.sampling.spread import EXPLORE_HORIZON_EPOCHS

    assert SelectorDataSource(args, sample_cls=kit.Sample).selector.explore_horizon_epochs == EXPLORE_HORIZON_EPOCHS
    args.rollout_function_path = ROLLOUT_FUNCTION_PATH
    selector = SelectorDataSource(args, sample_cls=kit.Sample).selector
    assert selector.explore_horizon_epochs == ADAPTIVE_EXPLORE_HORIZON_EPOCHS != EXPLORE_HORIZON_EPOCHS


def test_each_strategy_through_the_data_source_and_the_concentration_figures_in_slime_s_log(args, kit):
    """The data source takes every selection (the one default: seed) and refuses an unknown one naming the choices;
    the log hook adds the trained prompts' concentration figures, which a checkpoint carries on."""
    from shopsimrl.sampling.order import SeedOrder
    from shopsimrl.sampling.skip import SkipOrder
    from shopsimrl.sampling.spread import SpreadSelector

    args.shopsim_selection = None
    assert type(SelectorDataSource(args, sample_cls=kit.Sample).selector) is SeedOrder
    args.shopsim_selection = "spread"
    assert type(SelectorDataSource(args, sample_cls=kit.Sample).selector) is SpreadSelector
    args.shopsim_selection = "greedy"
    with pytest.raises(ValueError, match="shopsim_selection: selection must be one of seed, skip, spread"):
        SelectorDataSource(args, sample_cls=kit.Sample)
    args.shopsim_selection = "skip"
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    assert type(source.selector) is SkipOrder
    for rollout_id in range(2):
        groups = source.get_samples(6)
        completed = finish(kit, groups, lambda t: [1.0, 0.0, 1.0, 0.0])
        record_generated_rollout_groups(args, completed, source)
        metrics: dict = {}
        enrich_rollout_metrics(rollout_id, args, [s for g in completed[:4] for s in g], metrics, 1.0)  # 4 trained
    assert metrics["rollout/shopsim/concentration/distinct_prompts_epoch"] == 8
    assert metrics["rollout/shopsim/concentration/max_trainings_per_prompt"] == 1
    assert metrics["rollout/shopsim/concentration/top10_share"] == pytest.approx(8 / 8)
    source.save(3)
    resumed = SelectorDataSource(args, sample_cls=kit.Sample)
    resumed.load(3)
    assert resumed.selector.concentration.state_dict() == source.selector.concentration.state_dict()


def test_the_informative_rule_s_weight_is_in_the_drawn_samples_metadata_and_the_seed_order_s_samples_have_none(args,
                                                                                                               kit):
    """A prompt re-tried on a run of zero-spread groups is drawn with its importance weight in every sample's
    metadata (the reward post-process applies it); the seed order's samples are drawn as before."""
    for selection, weighted in (("skip", True), ("seed", False)):
        args.shopsim_selection = selection
        source = SelectorDataSource(args, sample_cls=kit.Sample)
        first = source.get_samples(40)  # a whole pass
        record_generated_rollout_groups(args, finish(kit, first, lambda t: [1.0, 1.0, 1.0, 1.0]), source)
        second = source.get_samples(20)
        weights = [{s.metadata.get("shopsim_weight") for s in g} for g in second]
        assert all(len(w) == 1 for w in weights)  # one weight per group
        drawn = {w.pop() for w in weights}
        if weighted:
            assert drawn - {None} and all(w is None or w > 1.0 for w in drawn), drawn
            for group in second:
                task = group[0].metadata["task_id"]
                assert source.selector.weight(task) == group[0].metadata.get("shopsim_weight", 1.0)
        else:
            assert drawn == {None}
