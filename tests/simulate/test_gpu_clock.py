"""The modelled clock's calibration: the seed order with fixed waves reproduces the release run's step times.

``python -m benchmarks.bench_gpu_clock`` ran the main job 80 steps on the modelled clock (the default
catalog, the heuristic policy) and published its step times; the package's constants must be the ones
it published, its figures must meet the targets (median within 10% of the release's, 10th-90th
percentile range within 20%), and the main job must still produce those very step times (its first
steps are run again here)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks.bench_gpu_clock import RELEASE_CSV, modelled_run
from shopsimrl.rollout.gputime import RELEASE_TRAINED_SAMPLES, TimeModel
from shopsimrl.rollout.loops import CALIBRATED_TRAIN_S
from shopsimrl.simulate.clock_fit import check, release_step_times

RESULT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu_clock.json"
STEPS_AGAIN = 4


@pytest.fixture(scope="module")
def published() -> dict:
    return json.loads(RESULT.read_text())


def test_the_package_runs_the_published_fit(published):
    assert published["model"] == TimeModel().as_dict()


def test_the_main_job_on_the_calibrated_clock_reproduces_the_release_step_times(published):
    release = release_step_times(RELEASE_CSV)
    times = published["main_job"]["step_times_s"]
    assert len(times) == len(release) == 80
    figures = check(times, release)
    assert figures["median_met"], figures  # median within 10% of the release's
    assert figures["range_met"], figures  # 10th-90th percentile range within 20%


def test_a_release_step_trains_the_public_figure(published):
    tokens = published["main_job"]["mean_tokens_per_episode"]
    assert TimeModel().train_seconds(RELEASE_TRAINED_SAMPLES * tokens) == pytest.approx(CALIBRATED_TRAIN_S, rel=1e-3)


def test_the_main_job_still_produces_the_published_step_times(published, default_catalog, monkeypatch):
    monkeypatch.setenv("SHOPSIMRL_CACHE", str(default_catalog.parent))
    times, _episodes = asyncio.run(modelled_run(TimeModel(), STEPS_AGAIN))
    assert [round(t, 3) for t in times] == published["main_job"]["step_times_s"][:STEPS_AGAIN]
