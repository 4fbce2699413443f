"""Determinism on the modelled clock: two runs of one seed give identical outputs, for every selection, wave mode,
siblings mode and loop (each value of each option appears in one of the configurations); and a run resumed on
another clock is refused in one line."""

from __future__ import annotations

import pytest
from learn.test_main_job import batch, rollout

from shopsimrl.io import read_jsonl

pytestmark = pytest.mark.slow  # eight runs of the main job: with -n this file starts first

#: Every selection, wave mode, siblings mode and loop appears at least once (four selections: four configurations).
CONFIGURATIONS = {
    "seed-fixed-all-sync": ["--selection", "seed", "--waves", "fixed"],
    "skip-adaptive-staged-async": ["--selection", "skip", "--waves", "adaptive", "--siblings", "staged",
                                   "--loop", "async"],
    "spread-adaptive-all-async-tis": ["--selection", "spread", "--waves", "adaptive", "--loop", "async",
                                      "--tis-cap", "2"],
    "forecast-fixed-staged-async": ["--selection", "forecast", "--waves", "fixed", "--siblings", "staged",
                                    "--loop", "async"],
}
#: Two steps: the second is the first the async loop trains on data of the policy one update old.
STEPS = 2
COMMON = ["--learner", "grpo", "--clock", "modelled", "--steps", str(STEPS), "--eval-every", "2",
          "--eval-samples", "2"]


@pytest.mark.parametrize("name", list(CONFIGURATIONS))
def test_two_runs_of_one_seed_on_the_modelled_clock_give_identical_outputs(tmp_path, cli_cache, name):
    for run in ("a", "b"):
        assert rollout(tmp_path, run, *COMMON, *CONFIGURATIONS[name]) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    rows_a, rows_b = list(read_jsonl(a / "metrics.jsonl")), list(read_jsonl(b / "metrics.jsonl"))
    assert len(rows_a) == STEPS
    assert rows_a == rows_b  # every field: on the modelled clock none holds the machine's time
    for k in range(1, STEPS + 1):
        assert batch(a, k) == batch(b, k)
        assert (a / f"step-{k}" / "events.jsonl").read_text() == (b / f"step-{k}" / "events.jsonl").read_text()


def test_a_run_resumed_on_another_clock_is_refused_in_one_line(tmp_path, cli_cache, capsys):
    assert rollout(tmp_path, "r", "--learner", "grpo", "--steps", "1", "--clock", "modelled") == 0
    capsys.readouterr()
    assert rollout(tmp_path, "r", "--learner", "grpo", "--steps", "2", "--resume") == 2
    err = capsys.readouterr().err.strip()
    assert "the run ran on the modelled clock, not the machine one: continue it with --clock modelled" in err
    assert len(err.splitlines()) == 1
    assert rollout(tmp_path, "r", "--learner", "grpo", "--steps", "2", "--resume", "--clock", "modelled") == 0
    rows = list(read_jsonl(tmp_path / "r" / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2]
    prefix = "rollout/shopsim/clock/"
    assert rows[1][prefix + "total_s"] == pytest.approx(rows[0][prefix + "total_s"] + rows[1][prefix + "step_s"])
