"""fully_scored_group_filter: the filter slime calls (R5-R9 of docs/dynamic-sampling.md), and its streak across calls.

Expectations are written out or derived by a small oracle from what the generator drew, never
by calling shopsimrl.sampling.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import REASON_TECHNICAL, REASON_ZERO_STD, TooManyTechnicalFailures
from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime.state import hook_state, reset_hook_state
from shopsimrl.slime_runtime import fully_scored_group_filter


@pytest.fixture(autouse=True)
def slime(monkeypatch):
    """The filter runs inside slime: the slime double, installed for every test."""
    slime_double.install(monkeypatch)
    return sys.modules["slime.rollout.filter_hub.base_types"]


def fields_of(output):
    return (output.keep, output.reason, output.keep_when_insufficient)


def test_varied_flat_group_is_kept(kit, slime):
    group = [kit.scored(3, i, r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    out = fully_scored_group_filter(kit.args(), group)
    assert isinstance(out, slime.DynamicFilterOutput)
    assert fields_of(out) == (True, None, False)


@pytest.mark.parametrize("reward", [0.0, 1.0, 0.4])
def test_zero_std_group_is_dropped_with_fallback(kit, reward):
    group = [kit.scored(3, i, reward) for i in range(4)]
    assert fields_of(fully_scored_group_filter(kit.args(), group)) == (False, REASON_ZERO_STD, True)


def test_one_unscored_sibling_makes_the_group_technical_without_fallback(kit):
    group = [kit.scored(3, 0, 1.0), kit.scored(3, 1, 0.0), kit.unscored(3, 2), kit.scored(3, 3, 1.0)]
    assert fields_of(fully_scored_group_filter(kit.args(), group)) == (False, REASON_TECHNICAL, False)


def test_non_finite_reward_is_technical(kit):
    group = [kit.scored(3, 0, 1.0), kit.scored(3, 1, math.nan)]
    assert fields_of(fully_scored_group_filter(kit.args(), group)) == (False, REASON_TECHNICAL, False)


def test_fan_out_segments_count_once_per_rollout(kit):
    # rollout 10 fans out into three segments with reward 1, rollout 11 into one with reward 1: zero std,
    # although a per-segment count would see four identical samples either way; then make them differ.
    same = [[kit.scored(5, 0, 1.0, rollout_id=10)] * 3, [kit.scored(5, 3, 1.0, rollout_id=11)]]
    assert fields_of(fully_scored_group_filter(kit.args(), same)) == (False, REASON_ZERO_STD, True)
    varied = [[kit.scored(5, 0, 1.0, rollout_id=10)] * 3, [kit.scored(5, 3, 0.0, rollout_id=11)]]
    assert fields_of(fully_scored_group_filter(kit.args(), varied)) == (True, None, False)


def test_reward_key_is_read_from_args(kit):
    group = [kit.scored(1, 0, 0.0), kit.scored(1, 1, 0.0)]
    for s, strict in zip(group, (0.2, 0.9)):
        s.reward["r_strict"] = strict
    assert fully_scored_group_filter(kit.args(), group).keep is False
    assert fully_scored_group_filter(kit.args(reward_key="r_strict"), group).keep is True


#: The rewards the generator draws, and which of them are equal within the 1e-6 tolerance (R7):
#: 0.0 and 1e-7 differ by 1e-7, so they are "the same reward"; every other pair differs by 0.5 or more.
REWARD_CLASS = {0.0: "zero", 1e-7: "zero", 0.5: "half", 1.0: "one"}
#: How a trajectory's samples look; all but "scored" make the sample unscorable (R5).
KINDS = ["scored", "scored", "scored", "unscored", "nan", "no_reward_key", "bool"]


@st.composite
def trajectories(draw, group_index, first_index):
    """One trajectory: 1-3 fan-out segments with consecutive indices, sharing a rollout_id (or none at all)."""
    segments = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(KINDS))
    reward = draw(st.sampled_from(sorted(REWARD_CLASS)))
    rid = 1000 + first_index if segments > 1 or draw(st.booleans()) else None  # segments always share an id
    samples = []
    for k in range(segments):
        value = {"nan": math.nan, "bool": True}.get(kind, reward)
        reward_dict = {"other": reward} if kind == "no_reward_key" else {"reward": value}
        samples.append(types.SimpleNamespace(group_index=group_index, index=first_index + k, rollout_id=rid,
                                             reward=reward_dict, metadata={"shopsim_scored": kind != "unscored"}))
    return kind, reward, samples


@st.composite
def groups(draw):
    """A group of 1-8 trajectories, flat or nested (one list per trajectory), with what was drawn."""
    n = draw(st.integers(1, 8))
    drawn, nested, index = [], [], 0
    for _ in range(n):
        kind, reward, samples = draw(trajectories(7, index))
        drawn.append((kind, reward))
        nested.append(samples)
        index += len(samples)
    group = [s for t in nested for s in t] if draw(st.booleans()) else nested
    return drawn, group


def expected_output(drawn):
    """The filter's output, derived from what the generator drew (not from shopsimrl.sampling)."""
    if any(kind != "scored" for kind, _ in drawn):
        return (False, "shopsim_unscored_technical_group", False)  # R5: one unscorable sibling
    if len({REWARD_CLASS[reward] for _, reward in drawn}) == 1:
        return (False, "shopsim_zero_std_group", True)  # R7: every trajectory has the same reward
    return (True, None, False)


@settings(max_examples=300, deadline=None)
@given(case=groups())
def test_property_filter_output_matches_an_independent_oracle(case):
    """R5, R7, R8, R9: technical / zero-std / varied over fan-out, NaN, bool, unscored and 1e-7 rewards."""
    drawn, group = case
    reset_hook_state()
    args = types.SimpleNamespace(reward_key="reward", shopsim_max_consecutive_failed_groups=10**9)
    assert fields_of(fully_scored_group_filter(args, group)) == expected_output(drawn)


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([0.0, 1e-7, 0.0], (False, REASON_ZERO_STD, True)),  # spread 1e-7 <= 1e-6
        ([0.0, 1e-6], (False, REASON_ZERO_STD, True)),  # spread exactly 1e-6
        ([0.0, 1.5e-6], (True, None, False)),  # spread 1.5e-6 > 1e-6
        ([0.5] * 8, (False, REASON_ZERO_STD, True)),  # all the same intermediate value
        ([1.0] * 7 + [0.0], (True, None, False)),
    ],
)
def test_written_out_spread_cases(kit, rewards, expected):
    group = [kit.scored(2, i, r) for i, r in enumerate(rewards)]
    assert fields_of(fully_scored_group_filter(kit.args(), group)) == expected


def test_streak_survives_calls_resets_on_a_scored_group_and_stops_the_run(kit):
    args = kit.args(shopsim_max_consecutive_failed_groups=3, shopsim_trace_dir="/runs/x/traces")
    technical = lambda gi: [kit.unscored(gi, 0), kit.scored(gi, 1, 1.0)]  # noqa: E731
    fully_scored_group_filter(args, technical(1))
    fully_scored_group_filter(args, technical(2))
    assert hook_state().guard.count == 2
    fully_scored_group_filter(args, [kit.scored(3, 0, 1.0), kit.scored(3, 1, 1.0)])  # zero-std is scored: resets
    assert hook_state().guard.count == 0
    fully_scored_group_filter(args, technical(4))
    fully_scored_group_filter(args, technical(5))
    with pytest.raises(TooManyTechnicalFailures) as info:
        fully_scored_group_filter(args, technical(6))
    message = str(info.value)
    assert "/runs/x/traces" in message
    assert "group_index=4" in message and "group_index=6" in message
    assert "shopsim_max_consecutive_failed_groups=3" in message


def test_reset_hook_state_forgets_the_streak(kit):
    args = kit.args(shopsim_max_consecutive_failed_groups=2)
    fully_scored_group_filter(args, [kit.unscored(1, 0)])
    reset_hook_state()
    fully_scored_group_filter(args, [kit.unscored(2, 0)])  # would have stopped the run without the reset
    assert hook_state().guard.count == 1


def test_default_failure_limit_is_eight(kit):
    args = kit.args()
    del args.shopsim_max_consecutive_failed_groups
    for gi in range(7):
        fully_scored_group_filter(args, [kit.unscored(gi, 0)])
    with pytest.raises(TooManyTechnicalFailures):
        fully_scored_group_filter(args, [kit.unscored(7, 0)])


def test_returns_slimes_own_class(kit, slime):
    out = fully_scored_group_filter(kit.args(), [kit.scored(1, 0, 0.0), kit.scored(1, 1, 0.0)])
    assert type(out) is slime.DynamicFilterOutput
    assert fields_of(out) == (False, REASON_ZERO_STD, True)


def test_refuses_a_slime_without_the_fallback_field(kit, monkeypatch, slime):
    @dataclasses.dataclass
    class OldDynamicFilterOutput:
        keep: bool
        reason: str | None = None

    monkeypatch.setattr(slime, "DynamicFilterOutput", OldDynamicFilterOutput)
    with pytest.raises(RuntimeError, match="keep_when_insufficient"):
        fully_scored_group_filter(kit.args(), [kit.scored(1, 0, 0.0)])
