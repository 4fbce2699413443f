"""What the launcher hands slime, seen from inside slime's real parser and loop.

- ``--partial-rollout`` is refused at launch, with the reason, before slime starts: no
  step, no episode (before the fix slime ran with it and served prompts twice a step);
- ``SHOPSIM_WAVE_CUSHION`` reaches slime's ``args`` through the custom config the
  launcher writes (before the fix no launcher setting could set it).
"""

from __future__ import annotations

import pytest

from shopsimrl.slime.harness.loop import LoopSettings, harness_args, launcher_env, prepare, run_leg


@pytest.mark.parametrize("selection", ["seed", "skip"])
def test_partial_rollout_is_refused_at_launch(slime_src, tmp_path, selection):
    settings = LoopSettings(steps=3, tasks=200, extra=("--partial-rollout",))
    paths = prepare(tmp_path, settings)
    leg = run_leg(slime_src, tmp_path / "leg", launcher_env(selection, "fixed", paths, tmp_path / "leg", settings),
                  harness_args(paths, settings))
    assert leg["status"] == 1
    assert "--partial-rollout is not supported" in leg["error"], leg["error"][-2000:]
    assert leg["trained"] == {} and leg["episodes"] == []


def test_the_wave_cushion_reaches_slime(slime_src, tmp_path):
    settings = LoopSettings(steps=2, tasks=200, eval_interval=100, env={"ROLLOUT_BATCH_SIZE": "4",
                                                                         "N_SAMPLES_PER_PROMPT": "2",
                                                                         "SHOPSIM_WAVE_CUSHION": "0.5"})
    paths = prepare(tmp_path, settings)
    leg = run_leg(slime_src, tmp_path / "leg", launcher_env("skip", "adaptive", paths, tmp_path / "leg", settings),
                  harness_args(paths, settings))
    assert leg["status"] == 0, leg.get("error")
    assert leg["args"]["shopsim_wave_cushion"] == 0.5
