"""The public release run (80 steps, target 16, wave 32), fed through the project's own code.

Two files in ``tests/data/`` (described in ``tests/data/README.md``):

- ``shopsimrl_release_steps.csv``: per step, slime's drop counts, the completed groups, the
  zero-std groups admitted into the batch (fallbacks), ``success_rate`` and ``all_wrong_group_rate``;
- ``shopsimrl_release_groups.csv``: per submitted group, how many of its 8 siblings were scored and
  their mean ``r_strict`` / ``r_success``.

Each group is rebuilt as 8 slime-like samples and judged by ``group_verdict`` (R5, R7); each step's
verdicts are replayed through ``replay`` (R12-R17) and its groups measured by
``rollout_step_metrics`` (R19-R24).  The replay must reproduce the run's drop counts, fallbacks,
completed and aborted groups; the metrics must reproduce the rates the run reported.

What the files cannot say, and how the rebuild fills it in (none of it changes a count or a rate):
- the sibling rewards: a mean of exactly 0.0 or 1.0 means eight equal rewards; any other mean is
  rebuilt as a spread ``m + d, m - d, m, ...`` with the same mean;
- groups whose siblings all had the *same intermediate* reward (zero-std, yet a mean strictly between
  0 and 1): the steps file counts them (its zero-std drops + fallbacks), the groups file cannot tell
  them apart, so the first such groups of the step are rebuilt as equal rewards;
- the completion order: the run completed groups in an order we do not know; any order in which
  every technical group finishes before the 16th drop and the step's last completion is kept
  reproduces the run's counts, so several such orders are replayed;
- in the 6 steps that ended with groups still generating (``completed_groups < 32``): which groups
  were aborted.  Those steps are replayed with the first groups of each kind completing and the rest
  aborted; their rates are not checked (they depend on which groups were aborted).
"""

from __future__ import annotations

import csv
import functools
import random
from collections import defaultdict
from pathlib import Path
from statistics import fmean

import pytest

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    Decision,
    GroupOutcome,
    TrajectoryOutcome,
    Verdict,
    group_verdict,
    replay,
    rollout_step_metrics,
)
from shopsimrl.sampling import metrics as m

DATA = Path(__file__).parent.parent / "data"
TARGET, WAVE, SIBLINGS = 16, 32, 8


def _read(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


STEPS = {int(row["step"]): row for row in _read("shopsimrl_release_steps.csv")}
GROUPS: dict[int, list[dict[str, str]]] = defaultdict(list)
for _row in _read("shopsimrl_release_groups.csv"):
    GROUPS[int(_row["step"])].append(_row)

COMPLETE = [s for s, row in STEPS.items() if int(row["completed_groups"]) == WAVE]
INCOMPLETE = [s for s, row in STEPS.items() if int(row["completed_groups"]) < WAVE]


def counts(step: int) -> tuple[int, int, int, int]:
    """(technical drops, zero-std drops, completed groups, fallbacks) as the run reported them."""
    row = STEPS[step]
    return (int(row["technical_drops"]), int(row["zero_std_drops"]), int(row["completed_groups"]),
            int(row["zero_std_groups_in_batch"]))


def fully_scored(row: dict[str, str]) -> bool:
    return row["scored_siblings"] == row["siblings"]


def zero_spread_mean(row: dict[str, str]) -> bool:
    return fully_scored(row) and float(row["reward_mean"]) in (0.0, 1.0)


@functools.cache
def equal_reward_groups(step: int) -> frozenset[int]:
    """group_index of the groups rebuilt with eight equal rewards (see the module docstring)."""
    rows = GROUPS[step]
    technical, zero_std_drops, completed, fallbacks = counts(step)
    equal = {int(r["group_index"]) for r in rows if zero_spread_mean(r)}
    if completed == WAVE:  # all 32 judged: the run's zero-std total is drops + fallbacks
        hidden = zero_std_drops + fallbacks - len(equal)
        assert hidden >= 0, f"step {step}: the groups file shows more zero-spread groups than the run counted"
        intermediate = [int(r["group_index"]) for r in rows if fully_scored(r) and int(r["group_index"]) not in equal]
        equal |= set(intermediate[:hidden])
    return frozenset(equal)


def samples(row: dict[str, str], equal: bool) -> list[dict]:
    """Eight slime-like samples with the row's scored count and mean reward."""
    scored, base = int(row["scored_siblings"]), int(row["group_index"]) * SIBLINGS
    out = []
    if scored:
        mean = float(row["reward_mean"])
        spread = 0.0 if equal else min(mean, 1.0 - mean)
        rewards = [mean] * scored
        if scored >= 2:
            rewards[0], rewards[1] = mean + spread, mean - spread
        out = [{"index": base + i, "reward": r, "metadata": {"shopsim_scored": True}} for i, r in enumerate(rewards)]
    out += [{"index": base + i, "reward": None, "metadata": {"shopsim_scored": False}} for i in range(scored, SIBLINGS)]
    return out


@functools.cache
def verdicts(step: int) -> tuple[Verdict, ...]:
    equal = equal_reward_groups(step)
    return tuple(group_verdict(samples(r, int(r["group_index"]) in equal)) for r in GROUPS[step])


def outcome(row: dict[str, str], equal: bool) -> GroupOutcome:
    """The group as the metrics see it: r_success per sibling such that the row's success mean holds."""
    scored = int(row["scored_siblings"])
    trajectories = []
    if scored:
        success_mean = float(row["success_mean"])
        wins = round(success_mean * scored)
        assert abs(wins / scored - success_mean) < 1e-9, row  # the mean is a count over the scored siblings
        for i, s in enumerate(samples(row, equal)[:scored]):
            trajectories.append(TrajectoryOutcome(i, True, s["reward"], s["reward"], 1.0 if i < wins else 0.0))
    trajectories += [TrajectoryOutcome(i, False) for i in range(scored, SIBLINGS)]
    return GroupOutcome(int(row["group_index"]), trajectories)


def completion_orders(step: int, n: int = 3) -> list[list[int]]:
    """Positions (0..31) in completion orders consistent with the run: technical first, a kept group last."""
    v = verdicts(step)
    technical = [i for i, x in enumerate(v) if x is Verdict.TECHNICAL]
    zero_std = [i for i, x in enumerate(v) if x is Verdict.ZERO_STD]
    varied = [i for i, x in enumerate(v) if x is Verdict.VARIED]
    orders = [technical + zero_std + varied]  # every drop before any group with spread
    rng = random.Random(step)
    for _ in range(n - 1):
        rest = zero_std + varied[:-1]
        rng.shuffle(rest)
        orders.append(technical + rest + varied[-1:])
    return orders


def supply(step: int, order: list[int]) -> list[tuple[Verdict, float]]:
    """The step's 32 groups in submission order, each finishing at its place in ``order`` (1, 2, ...)."""
    v = verdicts(step)
    finish = {position: float(k + 1) for k, position in enumerate(order)}
    return [(v[i], finish.get(i, 1000.0)) for i in range(WAVE)]


def test_the_release_has_80_steps_of_32_groups_of_8_siblings():
    assert sorted(STEPS) == list(range(1, 81))
    assert all([int(r["group_index"]) for r in GROUPS[s]] == list(range((s - 1) * WAVE, s * WAVE)) for s in STEPS)
    assert all(r["siblings"] == "8" for s in STEPS for r in GROUPS[s])
    assert len(COMPLETE) == 74 and INCOMPLETE == [6, 7, 9, 11, 15, 17]


@pytest.mark.parametrize("step", COMPLETE)
def test_verdicts_of_a_complete_step_match_the_runs_counts(step):
    """R5, R7: partly scored groups are technical; zero-spread groups are zero-std; the totals are the run's."""
    technical, zero_std_drops, _, fallbacks = counts(step)
    v = verdicts(step)
    assert v.count(Verdict.TECHNICAL) == technical
    assert v.count(Verdict.ZERO_STD) == zero_std_drops + fallbacks
    for row, verdict in zip(GROUPS[step], v):
        if zero_spread_mean(row):
            assert verdict is Verdict.ZERO_STD, row
        if not fully_scored(row):
            assert verdict is Verdict.TECHNICAL, row


@pytest.mark.parametrize("step", COMPLETE)
def test_replay_of_a_complete_step_reproduces_its_drops_and_fallbacks(step):
    """R12-R17: drops stay within the 16 spare slots; zero-std groups are admitted only after 16 drops."""
    technical, zero_std_drops, completed, fallbacks = counts(step)
    assert technical + zero_std_drops == WAVE - TARGET  # the run: all 32 judged, 16 kept, so 16 dropped
    for order in completion_orders(step):
        r = replay(supply(step, order), rollout_batch_size=TARGET, over_sampling_batch_size=WAVE)
        assert r.technical_group_drop_count == technical
        assert r.zero_std_group_drop_count == zero_std_drops
        assert len(r.fallback) == fallbacks
        assert (len(r.kept), r.completed, r.aborted, r.surplus, r.waves) == (TARGET, completed, [], [], 1)
        drops_so_far = 0
        for e in r.events:
            drops_so_far += e.group.decision is Decision.DROPPED
            if e.group.decision is Decision.FALLBACK:
                assert drops_so_far == WAVE - TARGET and e.group.remaining == TARGET


@pytest.mark.parametrize("step", INCOMPLETE)
def test_replay_of_a_step_that_ended_with_groups_in_flight_reproduces_it(step):
    """R13, R15: fewer than 16 drops, so no fallback; the step ends when 16 are kept and aborts the rest."""
    technical, zero_std_drops, completed, fallbacks = counts(step)
    assert (technical, fallbacks) == (0, 0) and technical + zero_std_drops == completed - TARGET < WAVE - TARGET
    rows = GROUPS[step]
    zero = [i for i, r in enumerate(rows) if zero_spread_mean(r)][:zero_std_drops]
    spread = [i for i, r in enumerate(rows) if fully_scored(r) and not zero_spread_mean(r)][:TARGET]
    assert len(zero) == zero_std_drops and len(spread) == TARGET
    r = replay(supply(step, zero + spread), rollout_batch_size=TARGET, over_sampling_batch_size=WAVE)
    assert r.zero_std_group_drop_count == zero_std_drops and r.technical_group_drop_count == 0
    assert r.fallback == [] and sorted(r.kept) == sorted(spread)
    assert r.completed == completed and len(r.aborted) == WAVE - completed and r.waves == 1


@pytest.mark.parametrize("step", COMPLETE)
def test_metrics_of_a_complete_step_reproduce_the_reported_rates(step):
    """R19-R24: success over every scored sibling of all completed groups; all-wrong over fully scored groups."""
    row = STEPS[step]
    technical, zero_std_drops, _, _ = counts(step)
    equal = equal_reward_groups(step)
    r = replay(supply(step, completion_orders(step)[0]), rollout_batch_size=TARGET, over_sampling_batch_size=WAVE)
    kept = [GROUPS[step][i]["group_index"] for i in r.kept]
    completed = [outcome(g, int(g["group_index"]) in equal) for g in GROUPS[step]]
    drops = {REASON_TECHNICAL: r.technical_group_drop_count, REASON_ZERO_STD: r.zero_std_group_drop_count}
    out = rollout_step_metrics(completed, [int(g) for g in kept], drops)
    assert out[m.SUCCESS_RATE] == pytest.approx(float(row["success_rate"]), abs=5e-7)
    assert out[m.ALL_WRONG_GROUP_RATE] == pytest.approx(float(row["all_wrong_group_rate"]), abs=5e-7)
    assert (out[m.GROUP_COUNT], out[m.TRAJECTORY_COUNT]) == (32, 256)
    assert (out[m.TRAIN_GROUP_COUNT], out[m.TRAIN_TRAJECTORY_COUNT]) == (16, 128)
    assert out[m.ZERO_STD_GROUP_DROP_RATE] == zero_std_drops / (TARGET + zero_std_drops)
    assert out[m.TECHNICAL_GROUP_DROP_RATE] == technical / (TARGET + technical)


def test_step_1_in_detail():
    """Step 1: 4 technical groups, 12 zero-std drops; the only step whose rates need both denominators.

    success_rate 0.562753 is over the 247 scored siblings (not 256); all_wrong_group_rate 0.107143 is
    3 all-wrong groups over the 28 fully scored groups (3/32 would be 0.09375).
    """
    scored = sum(int(g["scored_siblings"]) for g in GROUPS[1])
    assert scored == 247
    completed = [outcome(g, False) for g in GROUPS[1]]
    out = rollout_step_metrics(completed, [], {REASON_TECHNICAL: 4, REASON_ZERO_STD: 12})
    assert out[m.SCORED_RATE] == 247 / 256
    assert out[m.ALL_WRONG_GROUP_RATE] == 3 / 28
    assert round(out[m.SUCCESS_RATE], 6) == 0.562753


def test_rounds_1_to_3_drop_16_zero_std_groups_every_step_and_admit_the_reported_fallbacks():
    """The release's summary: rounds 1-3 average 7.35, 9.0 and 9.8 zero-std fallbacks per 16-group batch."""
    by_round: dict[int, list[int]] = defaultdict(list)
    for step in COMPLETE:
        r = replay(supply(step, completion_orders(step)[0]), rollout_batch_size=TARGET, over_sampling_batch_size=WAVE)
        round_ = int(STEPS[step]["round"])
        if round_ >= 1:
            assert r.zero_std_group_drop_count == 16
        by_round[round_].append(len(r.fallback))
    assert [len(by_round[k]) for k in (1, 2, 3)] == [20, 20, 20]
    assert [round(fmean(by_round[k]), 2) for k in (1, 2, 3)] == [7.35, 9.0, 9.8]
