"""docs/dynamic-sampling.md §2-§3: the filter's output, slime's drop rule and the consecutive-failure stop."""

import pytest

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    ConsecutiveFailureGuard,
    FilterOutput,
    KnobError,
    TooManyTechnicalFailures,
    Verdict,
    filter_output,
    should_drop,
)


def test_reason_strings_are_exact():
    assert REASON_TECHNICAL == "shopsim_unscored_technical_group"
    assert REASON_ZERO_STD == "shopsim_zero_std_group"


def test_technical_output_is_never_a_fallback():
    out = filter_output(Verdict.TECHNICAL)
    assert (out.keep, out.reason, out.keep_when_insufficient) == (False, REASON_TECHNICAL, False)


def test_zero_std_output_allows_the_fallback():
    out = filter_output(Verdict.ZERO_STD)
    assert (out.keep, out.reason, out.keep_when_insufficient) == (False, REASON_ZERO_STD, True)


def test_varied_output_keeps():
    out = filter_output(Verdict.VARIED)
    assert out.keep and out.reason is None


@pytest.mark.parametrize(
    "output, remaining, expected",
    [
        (FilterOutput(True), 0, False),  # kept normally: never dropped
        (FilterOutput(True), 40, False),
        (FilterOutput(False, REASON_ZERO_STD, True), 17, True),  # remaining > target: really dropped
        (FilterOutput(False, REASON_ZERO_STD, True), 16, False),  # remaining <= target: fallback
        (FilterOutput(False, REASON_ZERO_STD, True), 3, False),
        (FilterOutput(False, REASON_TECHNICAL, False), 16, True),  # technical: always dropped
        (FilterOutput(False, REASON_TECHNICAL, False), 2, True),
    ],
)
def test_should_drop_is_slimes_rule(output, remaining, expected):
    assert should_drop(output, remaining, 16) is expected


def test_guard_stops_when_the_limit_is_reached_in_a_row():
    guard = ConsecutiveFailureGuard(3, trace_dir="/runs/x/step-1/traces")
    guard.observe(Verdict.TECHNICAL, "g0")
    guard.observe(Verdict.TECHNICAL, "g1")
    with pytest.raises(TooManyTechnicalFailures) as info:
        guard.observe(Verdict.TECHNICAL, "g2")
    message = str(info.value)
    assert "3 technical groups in a row" in message and "/runs/x/step-1/traces" in message
    assert info.value.groups == ["g0", "g1", "g2"] and info.value.count == 3
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("scored", [Verdict.ZERO_STD, Verdict.VARIED])
def test_guard_streak_resets_on_any_scored_group(scored):
    guard = ConsecutiveFailureGuard(3)
    for _ in range(5):
        guard.observe(Verdict.TECHNICAL)
        guard.observe(Verdict.TECHNICAL)
        guard.observe(scored)
        assert guard.count == 0


def test_guard_limit_one_stops_on_the_first_technical_group():
    with pytest.raises(TooManyTechnicalFailures):
        ConsecutiveFailureGuard(1).observe(Verdict.TECHNICAL)


@pytest.mark.parametrize("limit", [0, -3])
def test_guard_limit_below_one_is_a_value_error(limit):
    with pytest.raises(ValueError, match=">= 1"):
        ConsecutiveFailureGuard(limit)
    assert issubclass(KnobError, ValueError)


def test_guard_default_limit_is_eight():
    guard = ConsecutiveFailureGuard()
    for _ in range(7):
        guard.observe(Verdict.TECHNICAL)
    with pytest.raises(TooManyTechnicalFailures, match="8 technical groups"):
        guard.observe(Verdict.TECHNICAL)
