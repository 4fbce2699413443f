"""``shopsimrl compare`` shows the ``forecast`` rule's calibration over a run: its groups' mean predicted and observed
zero-spread rate and its Brier score, weighted by the groups of each step; no such columns without the rule."""

from __future__ import annotations

import json

import pytest

from shopsimrl.cli import main
from shopsimrl.io import append_jsonl
from shopsimrl.learn.compare import read_run, table_rows

F = "rollout/shopsim/selector/forecast/"


def run(root, forecast: bool):
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"learner": "grpo", "selection": "forecast" if forecast else "seed",
                                               "waves": "adaptive"}))
    steps = [(10, 0.5, 0.6, 0.2), (30, 0.7, 0.7, 0.1)]  # groups, predicted, observed, brier
    for step, (groups, predicted, observed, brier) in enumerate(steps, start=1):
        row = {"step": step, "rollout/shopsim/waste/episodes_submitted": 256, "eval/shopsim/trained_steps": step - 1,
               "eval/shopsim/success_rate": 0.5}
        if forecast:
            row |= {F + "groups": groups, F + "predicted_zero_spread": predicted, F + "observed_zero_spread": observed,
                    F + "brier": brier}
        append_jsonl(root / "metrics.jsonl", row)


def test_the_forecasts_calibration_is_weighted_by_its_groups_and_shown(tmp_path, capsys):
    run(tmp_path / "fc", True)
    run(tmp_path / "seed", False)
    curve = read_run(tmp_path / "fc")
    assert curve.forecast == pytest.approx({"predicted_zero_spread": (5 + 21) / 40, "observed_zero_spread": (6 + 21) / 40,
                                            "brier": (2 + 3) / 40})
    assert read_run(tmp_path / "seed").forecast is None
    assert "forecast brier" not in table_rows([read_run(tmp_path / "seed")])[0]
    assert main(["compare", str(tmp_path / "fc"), str(tmp_path / "seed"), "--chart", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "0.65/0.68" in out and "0.125" in out
