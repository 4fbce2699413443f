"""docs/dynamic-sampling.md §3-§5 and §8: the wave loop as a state machine, rule by rule."""

import pytest

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    ControllerStateError,
    Decision,
    KnobError,
    State,
    TooManyTechnicalFailures,
    Verdict,
    WaveController,
)

Z, V, T = Verdict.ZERO_STD, Verdict.VARIED, Verdict.TECHNICAL


def feed(ctrl, verdicts, start=0):
    """Complete groups one at a time, in index order; return their decisions."""
    return [ctrl.complete(start + i, v) for i, v in enumerate(verdicts)]


def test_first_wave_submits_over_sampling_batch_size_groups():
    ctrl = WaveController(16, 32)
    assert ctrl.state is State.NEEDS_WAVE and ctrl.needs_wave
    assert ctrl.submit() == range(0, 32)
    assert (ctrl.submitted, ctrl.remaining, ctrl.waves, ctrl.state) == (32, 32, 1, State.WAITING)
    assert ctrl.submit() == range(32, 32)  # remaining >= target: no new wave


def test_remaining_is_submitted_minus_dropped_and_kept_groups_do_not_decrease_it():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    feed(ctrl, [V, V, V])
    assert ctrl.remaining == 32
    feed(ctrl, [Z, T], start=3)
    assert ctrl.remaining == 30 == ctrl.submitted - sum(ctrl.drop_counts.values())


def test_zero_std_is_really_dropped_while_remaining_above_target():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    decisions = feed(ctrl, [Z] * 16)
    assert all(d.decision is Decision.DROPPED and d.reason == REASON_ZERO_STD for d in decisions)
    assert [d.remaining for d in decisions] == list(range(31, 15, -1))


def test_zero_std_takes_the_fallback_once_remaining_reaches_target():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    feed(ctrl, [Z] * 16)
    d = ctrl.complete(16, Z)
    assert d.decision is Decision.FALLBACK and d.remaining == 16 and d.kept == 1
    assert ctrl.fallback == [16] and ctrl.kept == [16]
    assert ctrl.submit() == range(32, 32)  # the fallback avoided another wave


def test_technical_groups_are_always_dropped_even_at_the_fallback_threshold():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    feed(ctrl, [Z] * 16)
    d = ctrl.complete(16, T)
    assert d.decision is Decision.DROPPED and d.reason == REASON_TECHNICAL and d.remaining == 15


def test_a_new_wave_opens_only_when_remaining_falls_below_target():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    feed(ctrl, [Z] * 16)
    assert ctrl.submit() == range(32, 32)
    ctrl.complete(16, T)
    assert ctrl.state is State.NEEDS_WAVE and ctrl.needs_wave
    assert ctrl.submit() == range(32, 64)  # 32 new prompts' groups, never a rerun
    assert (ctrl.waves, ctrl.remaining) == (2, 47)
    assert ctrl.wave_of(31) == 1 and ctrl.wave_of(32) == 2 and ctrl.wave_of(63) == 2


def test_varied_groups_are_accepted_until_data_holds_target_then_step_is_done():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    decisions = feed(ctrl, [V] * 16)
    assert all(d.decision is Decision.ACCEPTED for d in decisions)
    assert ctrl.done and ctrl.state is State.DONE
    assert ctrl.submit() == range(32, 32)


def test_groups_completing_in_the_same_batch_after_data_is_full_are_filtered_surplus_or_dropped():
    ctrl = WaveController(16, 32)
    ctrl.submit()
    feed(ctrl, [V] * 14)
    batch = [(14, V), (15, V), (16, V), (17, Z), (18, T), (19, Z)]
    decisions = ctrl.complete_batch(batch)
    assert [d.decision for d in decisions] == [
        Decision.ACCEPTED,
        Decision.ACCEPTED,
        Decision.SURPLUS,  # spread, but data is full: never trained
        Decision.DROPPED,  # remaining 32 > 16: a real drop, still counted
        Decision.DROPPED,
        Decision.DROPPED,
    ]
    assert ctrl.surplus == [16] and ctrl.drop_counts == {REASON_TECHNICAL: 1, REASON_ZERO_STD: 2}
    assert 16 not in ctrl.kept


def test_zero_std_after_data_is_full_at_threshold_is_surplus_not_fallback():
    ctrl = WaveController(2, 2)
    ctrl.submit()
    decisions = ctrl.complete_batch([(0, V), (1, Z)])
    assert [d.decision for d in decisions] == [Decision.ACCEPTED, Decision.FALLBACK]
    ctrl = WaveController(1, 2)
    ctrl.submit()
    decisions = ctrl.complete_batch([(0, V), (1, Z)])
    # remaining 2 > 1: the zero-std is dropped (counted) even though data is full
    assert [d.decision for d in decisions] == [Decision.ACCEPTED, Decision.DROPPED]


def test_batch_is_processed_in_submission_order_whatever_order_it_is_given_in():
    a, b = WaveController(16, 32), WaveController(16, 32)
    a.submit(), b.submit()
    items = [(5, Z), (2, V), (9, T)]
    shuffled = a.complete_batch(items)
    ordered = b.complete_batch(sorted(items))
    assert [d.index for d in shuffled] == [2, 5, 9]
    assert [d.as_dict() for d in shuffled] == [d.as_dict() for d in ordered]


def test_a_group_completed_after_the_step_is_done_is_refused():
    """The controller refuses complete() once data is full (the eviction rule itself: test_rules.py, R17)."""
    ctrl = WaveController(16, 32)
    ctrl.submit()
    feed(ctrl, [Z] * 16)  # drops
    feed(ctrl, [Z] * 2, start=16)  # 2 fallbacks
    feed(ctrl, [V] * 14, start=18)
    assert ctrl.done and ctrl.fallback == [16, 17]
    assert ctrl.kept[:2] == [16, 17]
    with pytest.raises(ControllerStateError, match="state DONE"):
        ctrl.complete(31, V)  # later groups cannot swap in


def test_abort_returns_in_flight_groups_and_closes_the_step():
    ctrl = WaveController(4, 8)
    ctrl.submit()
    feed(ctrl, [V] * 4)
    assert ctrl.abort() == [4, 5, 6, 7]
    assert ctrl.aborted == [4, 5, 6, 7] and ctrl.in_flight == frozenset()
    with pytest.raises(ControllerStateError, match="ABORTED"):
        ctrl.submit()


def test_protocol_errors_name_the_state():
    ctrl = WaveController(4, 8)
    with pytest.raises(ControllerStateError, match="never submitted"):
        ctrl.complete(0, V)
    ctrl.submit()
    ctrl.complete(0, Z)
    with pytest.raises(ControllerStateError, match="already completed"):
        ctrl.complete(0, V)
    with pytest.raises(ControllerStateError, match="twice"):
        ctrl.complete_batch([(1, V), (1, V)])


def test_the_stop_fires_inside_the_controller_and_freezes_it():
    ctrl = WaveController(16, 32, 3)
    ctrl.submit()
    feed(ctrl, [T, T])
    with pytest.raises(TooManyTechnicalFailures):
        ctrl.complete(2, T)
    assert ctrl.state is State.FAILED
    with pytest.raises(ControllerStateError, match="FAILED"):
        ctrl.complete(3, V)


def test_the_guard_is_shared_across_steps_as_in_slimes_process():
    from shopsimrl.sampling import ConsecutiveFailureGuard

    guard = ConsecutiveFailureGuard(3)
    step1 = WaveController(1, 2, guard=guard)
    step1.submit()
    step1.complete_batch([(0, T), (1, T)])
    step1.submit()
    step1.complete(2, V)
    assert guard.count == 0
    step2 = WaveController(1, 2, guard=guard)
    step2.submit()
    step2.complete_batch([(0, T), (1, T)])
    assert guard.count == 2  # carried into the next step's waves


@pytest.mark.parametrize("target, wave", [(0, 32), (-1, 4), (16, 15), (16, 8)])
def test_knobs_are_validated_with_clear_errors(target, wave):
    with pytest.raises(KnobError):
        WaveController(target, wave)


def test_over_sampling_equal_to_batch_size_standalone_script_default():
    """run_shopsimrl_slime.sh alone: no spare slots, every zero-std is a fallback, technical opens a wave."""
    ctrl = WaveController(16, 16)
    assert ctrl.submit() == range(16)
    d = ctrl.complete(0, Z)
    assert d.decision is Decision.FALLBACK and ctrl.drop_counts[REASON_ZERO_STD] == 0
    d = ctrl.complete(1, T)
    assert d.decision is Decision.DROPPED and ctrl.remaining == 15
    assert ctrl.submit() == range(16, 32)
