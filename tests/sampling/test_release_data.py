"""The public release's per-step figures (80 steps, target 16, wave 32) obey the wave-loop rules.

``tests/data/shopsimrl_release_steps.csv`` is a copy of ``shared/data/shopsimrl_release_steps.csv``.
"""

import csv
from pathlib import Path

import pytest

STEPS = list(csv.DictReader((Path(__file__).parent.parent / "data" / "shopsimrl_release_steps.csv").open()))
TARGET, WAVE = 16, 32


def test_the_release_has_80_steps():
    assert len(STEPS) == 80


@pytest.mark.parametrize("row", STEPS, ids=lambda r: f"step{r['step']}")
def test_release_step_obeys_the_wave_loop(row):
    technical, zero_std = int(row["technical_drops"]), int(row["zero_std_drops"])
    completed, train = int(row["completed_groups"]), int(row["train_groups"])
    fallbacks = int(row["zero_std_groups_in_batch"])
    assert train == TARGET
    # one wave of 32: drops can take remaining from 32 down to 16, never lower (else a 2nd wave)
    assert technical + zero_std <= WAVE - TARGET
    # every completed group was kept, dropped or surplus; the rest of the wave was aborted
    assert completed >= train + technical + zero_std and completed <= WAVE
    # a zero-std group is admitted only once remaining has fallen to 16, i.e. after 16 drops
    if fallbacks:
        assert technical + zero_std == WAVE - TARGET
