"""The main job with staged siblings (R29): every step runs to its end, every group the trainer sees is whole,
and a group decided after K leaves its triage and a zero-std drop, as the seed's rule would."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from rollout.fakes import jittered, load_events, read_json

from shopsimrl.commands import rollout as cli
from shopsimrl.io import read_jsonl
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.synthetic import synthetic_runner, unit_hash
from shopsimrl.sampling import REASON_ZERO_STD, SamplingKnobs
from shopsimrl.sampling.modes import Selection, Siblings, WaveMode
from shopsimrl.sampling.staged import STAGED_PREFIX

KNOBS = SamplingKnobs(rollout_batch_size=4, n_samples_per_prompt=8, over_sampling_batch_size=12,
                      global_batch_size=16, max_consecutive_failed_groups=50)


def polar_outcome(spec):
    """Most tasks always fail or always succeed (agreement the prediction learns); one in five is a coin flip."""
    kind = unit_hash("kind", spec.task_id)
    if kind < 0.2:
        return True, 1.0 if unit_hash("episode", spec.seed) < 0.5 else 0.0
    return True, 1.0 if kind > 0.6 else 0.0


def run(tmp_path, *, siblings, steps=6, stage_size=None, selection="seed"):
    config = RolloutConfig(knobs=KNOBS, steps=steps, seed=0, out=tmp_path, name=f"{siblings}-{selection}",
                           selection=Selection(selection), siblings=Siblings(siblings), stage_size=stage_size,
                           timeline=False)
    tasks = [f"task-{i:04d}" for i in range(30)]
    return asyncio.run(run_rollout(config, synthetic_runner(polar_outcome, delay=jittered()), tasks))


def test_r29_staged_steps_run_to_the_end_with_whole_groups_and_early_stops_that_are_zero_std_drops(tmp_path):
    result = run(tmp_path, siblings="staged")
    stopped_total = 0
    for report in result.reports:
        step_dir = result.paths.step(report.step).root
        assert len(report.kept) == KNOBS.rollout_batch_size
        rows = list(read_jsonl(step_dir / "batch.jsonl"))
        assert set(Counter(r["group_index"] for r in rows).values()) == {8}, "every trained group has all 8"
        for i in report.kept:
            assert [s.sibling for s in report.groups[i].specs] == list(range(8))
        m = report.metrics
        stopped = int(m[STAGED_PREFIX + "groups_stopped_early"])
        assert m[STAGED_PREFIX + "episodes_saved"] == 4 * stopped
        # generated episodes count what each group was given: a group stopped early generated 4, not 8
        assert m["rollout/shopsim/waste/episodes_submitted"] == sum(len(g.specs) for g in report.groups.values())
        assert m["rollout/shopsim/waste/episodes_dropped"] == 8 * m["rollout/shopsim/waste/groups_dropped"] - 4 * stopped
        events = load_events(step_dir)
        decisions = {e["index"]: e for e in events if e["event"] == "decision"}
        short = [i for i, g in report.groups.items() if len(g.specs) == 4 and i in decisions]
        assert len(short) == stopped  # a group judged on 4 siblings is exactly a group stopped early
        for i in short:
            d = decisions[i]
            assert (d["decision"], d["reason"], d["verdict"]) == ("dropped", REASON_ZERO_STD, "zero_std")
            assert d["remaining"] >= KNOBS.rollout_batch_size  # it was dropped from remaining > target
            triage = json.loads((step_dir / "triage" / f"g{i:04d}.json").read_text())
            assert len(triage["siblings"]) == 4  # the Failure Analyst sees what was generated
        rests = [e for e in events if e["event"] == "rest"]
        assert all(e["siblings"] == [4, 5, 6, 7] for e in rests)
        stopped_total += stopped
    assert stopped_total > 0, "the polar tasks are predicted to agree once seen: some groups stop after K"
    config = read_json(result.paths.config)
    assert (config["siblings"], config["stage_size"]) == ("staged", 4)


def test_r29_the_default_starts_every_group_whole_and_writes_no_staging_figures(tmp_path):
    result = run(tmp_path, siblings="all", steps=2)
    for report in result.reports:
        assert all(len(g.specs) == 8 for g in report.groups.values())
        assert not [k for k in report.metrics if k.startswith(STAGED_PREFIX)]
    assert "siblings" not in read_json(result.paths.config)


def test_r29_cli_staged_on_the_in_process_env_every_group_in_batch_jsonl_has_all_8_siblings(tmp_path, cli_cache,
                                                                                            capsys):
    code = cli.main(["--steps", "2", "--products", "2000", "--out", str(tmp_path), "--name", "staged",
                     "--view", "plain", "--siblings", "staged", "--learning", "--no-timeline"])
    out = capsys.readouterr().out
    assert code == 0, out
    for k in (1, 2):
        step = tmp_path / "staged" / f"step-{k}"
        rows = list(read_jsonl(step / "batch.jsonl"))
        groups = Counter(r["group_index"] for r in rows)
        assert len(groups) == 16 and set(groups.values()) == {8}
        metrics = json.loads((step / "metrics.json").read_text())
        assert metrics["rollout/shopsim/train_group_count"] == 16
        assert STAGED_PREFIX + "groups_stopped_early" in metrics


@pytest.mark.parametrize(("argv", "message"), [
    (["--siblings", "staged", "--stage-size", "8"], "stage size must be within [1, n_samples_per_prompt) = [1, 8)"),
    (["--siblings", "staged", "--stage-size", "0"], "argument --stage-size: must be a whole number >= 1"),
    (["--stage-size", "3"], "is for staged siblings (--siblings staged)"),
])
def test_r29_cli_refuses_bad_staging_options(tmp_path, capsys, argv, message):
    assert cli.main([*argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


class Snapshots:
    """An observer that takes every snapshot it is offered (as the live view does)."""

    def __init__(self):
        self.taken = 0

    def step_started(self, step, target):
        pass

    def progressed(self, snapshot):
        snapshot()
        self.taken += 1

    def step_finished(self, report, progress):
        pass


def test_r29_staged_with_adaptive_waves_and_a_live_view_snapshots_only_groups_the_shell_started(tmp_path):
    """Several refills opened in one batch of first stages: the view's snapshot comes once every action is carried
    out (a snapshot between a refill's WaveOpened and a later refill's starts met groups not started yet)."""
    config = RolloutConfig(knobs=KNOBS, steps=6, seed=0, out=tmp_path, name="staged-adaptive",
                           selection=Selection("skip"), waves=WaveMode("adaptive"), siblings=Siblings("staged"),
                           timeline=False)
    tasks = [f"task-{i:04d}" for i in range(30)]
    observer = Snapshots()
    result = asyncio.run(run_rollout(config, synthetic_runner(polar_outcome, delay=jittered()), tasks,
                                     observer=observer))
    assert [len(r.kept) for r in result.reports] == [KNOBS.rollout_batch_size] * 6
    assert sum(int(r.metrics[STAGED_PREFIX + "groups_stopped_early"]) for r in result.reports) > 0
    assert observer.taken > 0
