"""``replay_recorded`` and ``WaveController.complete_in_order``: a real run's step replayed from its record.

slime's own loop filters a batch in the order of asyncio's done set, not in submission order: which
groups fill the last places, and which zero-std groups are dropped or admitted, follow that order.
"""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    ControllerStateError,
    Decision,
    TooManyTechnicalFailures,
    Verdict,
    WaveController,
)
from shopsimrl.sampling.recorded import Finished, Opened, replay_recorded
from shopsimrl.slime.harness.double.reference_loop import slime_loop

Z, V, T = Verdict.ZERO_STD, Verdict.VARIED, Verdict.TECHNICAL


def test_a_batch_is_decided_in_the_order_given_not_in_submission_order():
    in_order, sorted_ = WaveController(1, 4), WaveController(1, 4)
    in_order.submit(), sorted_.submit()
    decided = in_order.complete_in_order([(3, V), (1, V)])
    assert [(d.index, d.decision) for d in decided] == [(3, Decision.ACCEPTED), (1, Decision.SURPLUS)]
    assert [(d.index, d.decision) for d in sorted_.complete_batch([(3, V), (1, V)])] == [
        (1, Decision.ACCEPTED), (3, Decision.SURPLUS)]


def test_the_order_decides_whether_a_zero_std_group_is_dropped_or_admitted():
    # target 2, wave 3: remaining 3 > 2 drops the first zero-std group; at remaining 2 the next is a fallback
    ctrl = WaveController(2, 3)
    ctrl.submit()
    decided = ctrl.complete_in_order([(2, Z), (0, Z)])
    assert [(d.index, d.decision, d.remaining) for d in decided] == [(2, Decision.DROPPED, 2),
                                                                     (0, Decision.FALLBACK, 2)]


def test_the_rest_of_the_batch_is_still_filtered_once_the_batch_is_full():
    ctrl = WaveController(1, 4)
    ctrl.submit()
    decided = ctrl.complete_in_order([(2, V), (0, T), (3, V), (1, Z)])
    assert [d.decision for d in decided] == [Decision.ACCEPTED, Decision.DROPPED, Decision.SURPLUS, Decision.DROPPED]
    assert ctrl.drop_counts == {REASON_TECHNICAL: 1, REASON_ZERO_STD: 1} and ctrl.done


def test_complete_in_order_refuses_what_complete_batch_refuses():
    ctrl = WaveController(2, 4)
    ctrl.submit()
    with pytest.raises(ControllerStateError, match="appears twice"):
        ctrl.complete_in_order([(1, V), (1, V)])
    with pytest.raises(ControllerStateError, match="never submitted"):
        ctrl.complete_in_order([(9, V)])
    ctrl.complete_in_order([(3, V), (2, V)])
    with pytest.raises(ControllerStateError, match="state DONE"):
        ctrl.complete_in_order([(0, V)])


def test_a_stop_inside_an_ordered_batch_carries_its_decisions_in_that_order():
    ctrl = WaveController(2, 4, 2)
    ctrl.submit()
    with pytest.raises(TooManyTechnicalFailures) as stop:
        ctrl.complete_in_order([(3, V), (2, T), (0, T), (1, V)])
    assert [(d.index, d.decision) for d in stop.value.decisions] == [(3, Decision.ACCEPTED), (2, Decision.DROPPED),
                                                                    (0, Decision.DROPPED)]


def test_fixed_waves_open_by_slimes_rule_and_each_batch_is_read_in_its_order():
    # target 2, wave 2: a technical drop leaves remaining 1 < 2, so a second wave (2, 3) opens after the batch
    done = replay_recorded([Finished([(1, T)]), Finished([(3, V), (0, V), (2, Z)])],
                           rollout_batch_size=2, over_sampling_batch_size=2, waves="fixed")
    assert (done.waves, done.submitted) == (2, 4)
    assert done.kept == [3, 0] and done.surplus == [] and done.aborted == []
    assert done.dropped == {REASON_TECHNICAL: [1], REASON_ZERO_STD: [2]}  # remaining 3 > 2 when 2 was filtered


def test_adaptive_opens_what_the_record_says_and_decides_a_batch_in_submission_order():
    done = replay_recorded([Opened(2), Finished([(1, Z)]), Opened(1), Finished([(2, V), (0, V)])],
                           rollout_batch_size=2, over_sampling_batch_size=8, waves="adaptive")
    # group 1 at remaining 2 <= target: a fallback; then 0 fills the batch and 2 is surplus
    assert done.kept == [1, 0] and done.fallback == [1] and done.surplus == [2]
    assert (done.waves, done.submitted, done.completed) == (2, 3, 3)


def test_a_record_the_protocol_refuses_raises():
    with pytest.raises(ControllerStateError, match="state DONE"):  # a batch after the step was full
        replay_recorded([Opened(1), Finished([(0, V)]), Finished([(0, V)])],
                        rollout_batch_size=1, over_sampling_batch_size=1, waves="adaptive")
    with pytest.raises(ValueError, match="batches only"):
        replay_recorded([Opened(2)], rollout_batch_size=1, over_sampling_batch_size=2, waves="fixed")


verdicts = st.sampled_from(["varied", "zero_std", "technical"])


@st.composite
def runs(draw):
    target = draw(st.integers(min_value=1, max_value=8))
    wave = draw(st.integers(min_value=target, max_value=3 * target))
    n = draw(st.integers(min_value=wave, max_value=8 * wave))
    supply = draw(st.lists(st.tuples(verdicts, st.integers(0, 6).map(float)), min_size=n, max_size=n))
    return target, wave, supply, draw(st.randoms(use_true_random=False))


@settings(max_examples=300, deadline=None)
@given(runs())
def test_the_replay_of_a_record_decides_as_slimes_loop_in_its_done_set_order(run):
    target, wave, supply, rnd = run

    def done_set_order(indices):
        indices = list(indices)
        rnd.shuffle(indices)
        return indices

    try:
        ref = slime_loop(supply, target, wave, order=done_set_order)
    except LookupError:
        assume(False)
        return
    done = replay_recorded([Finished(batch) for batch in ref["batches"]], rollout_batch_size=target,
                           over_sampling_batch_size=wave, waves="fixed", max_consecutive_failed_groups=10**9)
    assert done.kept == ref["kept"] and done.fallback == ref["fallback"] and done.surplus == ref["surplus"]
    assert sorted(i for ids in done.dropped.values() for i in ids) == ref["dropped"]
    assert (done.aborted, done.submitted, done.remaining) == (ref["aborted"], ref["submitted"], ref["remaining"])

