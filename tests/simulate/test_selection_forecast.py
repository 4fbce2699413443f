"""The release regime's judge of the ``forecast`` rule: its targets (issue figures) and each run's calibration."""

from __future__ import annotations

import json

import pytest
from simulate.test_selection_judge import run

from benchmarks.bench_selection import RELEASE, forecast_calibration, paired, targets


def test_the_release_regime_is_the_release_runs_length_over_the_default_catalog():
    assert RELEASE.products is None and RELEASE.steps == 80 and RELEASE.budget == 80 * 32 * 8
    assert RELEASE.configs[0] == "seed/fixed" and "forecast/adaptive" in RELEASE.configs


def test_the_forecast_targets_say_met_or_not_with_the_numbers():
    grid = [0, 2560, 5120, 7680, 10240, 12800, 15360, 17920, 20480]
    base = {s: run([(x, 0.5 + x / 60000) for x in grid]) for s in (0, 1)}
    fast = {s: run([(x, 0.5 + x / 30000) for x in grid], 70.0, 2.0) for s in (0, 1)}
    regimes = {"release": {"summary": {"seed/fixed": {"max_trainings_per_prompt": 2.0},
                                       "forecast/adaptive": {"max_trainings_per_prompt": 2.0}},
                           "paired": paired({"seed/fixed": base, "forecast/adaptive": fast})}}
    checks = targets({"regimes": regimes})
    reach = checks["release: forecast/adaptive episodes to reach seed/fixed's final success <= 0.65x"]
    assert reach["met"] and reach["value"] == pytest.approx(0.5)
    inf = checks["release: forecast/adaptive informative groups per 1k generated episodes >= 1.35x seed/fixed"]
    assert inf["met"] and inf["value"] == pytest.approx(1.4)
    held = checks["release: forecast/adaptive held-out success at equal generated episodes from 2,500 on >= "
                  "seed/fixed - 0.01 (95% low)"]
    assert held["met"] and held["value"] > 0
    assert checks["release: forecast/adaptive most trainings of one prompt <= 1.5x seed order's"]["met"]
    json.dumps(checks)


def test_a_runs_forecast_calibration_is_weighted_by_its_groups():
    key = "rollout/shopsim/selector/forecast/"
    rows = [{key + "groups": 10.0, key + "predicted_zero_spread": 0.5, key + "observed_zero_spread": 0.4,
             key + "brier": 0.2, key + "base_brier": 0.25, key + "skipped": 3.0},
            {key + "groups": 30.0, key + "predicted_zero_spread": 0.7, key + "observed_zero_spread": 0.8,
             key + "brier": 0.1, key + "base_brier": 0.2, key + "skipped": 1.0}]
    c = forecast_calibration(rows)
    assert c["forecast_groups"] == 40 and c["forecast_skipped"] == 4
    assert c["forecast_predicted_zero_spread"] == pytest.approx(0.65)
    assert c["forecast_brier"] == pytest.approx(0.125)
    assert forecast_calibration([{"step": 1}]) == {}
