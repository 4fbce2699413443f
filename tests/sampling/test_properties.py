"""Property tests: the controller's invariants over random supplies and completion orders,
and decision-for-decision agreement with a literal transcription of slime's loop."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    Decision,
    SupplyExhausted,
    TooManyTechnicalFailures,
    Verdict,
    WaveController,
    replay,
)
from shopsimrl.slime.harness.double.reference_loop import slime_loop

verdicts = st.sampled_from(["varied", "zero_std", "technical"])
durations = st.integers(min_value=0, max_value=12).map(float)  # small range: many simultaneous completions


@st.composite
def scenarios(draw):
    target = draw(st.integers(min_value=1, max_value=8))
    wave = draw(st.integers(min_value=target, max_value=3 * target))
    n = draw(st.integers(min_value=wave, max_value=8 * wave))
    supply = draw(st.lists(st.tuples(verdicts, durations), min_size=n, max_size=n))
    limit = draw(st.integers(min_value=1, max_value=12))
    return target, wave, supply, limit


def run_both(target, wave, supply, limit):
    try:
        ours = replay(supply, rollout_batch_size=target, over_sampling_batch_size=wave, max_consecutive_failed_groups=limit)
    except SupplyExhausted:
        ours = "exhausted"
    except TooManyTechnicalFailures:
        ours = "stop"
    try:
        ref = slime_loop(supply, target, wave, limit)
    except LookupError:
        ref = "exhausted"
    except RuntimeError:
        ref = "stop"
    return ours, ref


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_replay_decides_exactly_as_slimes_loop(scenario):
    ours, ref = run_both(*scenario)
    if isinstance(ref, str):
        assert ours == ref
        return
    assert not isinstance(ours, str)
    assert ours.kept == ref["kept"]
    assert ours.fallback == ref["fallback"]
    assert sorted(i for v in ours.dropped.values() for i in v) == ref["dropped"]
    assert ours.surplus == ref["surplus"]
    assert ours.aborted == ref["aborted"]
    assert (ours.submitted, ours.remaining) == (ref["submitted"], ref["remaining"])
    assert [(e.group.index, e.group.decision.value) for e in ours.events] == ref["decisions"]


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_invariants_of_every_completed_step(scenario):
    target, wave, supply, limit = scenario
    try:
        r = replay(supply, rollout_batch_size=target, over_sampling_batch_size=wave, max_consecutive_failed_groups=limit)
    except (SupplyExhausted, TooManyTechnicalFailures):
        assume(False)
        return
    dropped = [i for v in r.dropped.values() for i in v]
    # exactly target kept; every submitted group has exactly one fate
    assert len(r.kept) == target
    fates = r.kept + dropped + r.surplus + r.aborted
    assert sorted(fates) == list(range(r.submitted))
    # whole waves only; remaining == submitted - dropped >= kept
    assert r.submitted == r.waves * wave
    assert r.remaining == r.submitted - len(dropped) >= target
    # fallbacks are zero-std groups admitted; technical groups are never kept or surplus
    assert set(r.fallback) <= set(r.kept)
    assert all(supply[i][0] == "zero_std" for i in r.fallback)
    assert all(supply[i][0] != "technical" for i in r.kept + r.surplus)
    assert set(r.dropped[REASON_TECHNICAL]) == {i for i in range(r.submitted) if supply[i][0] == "technical"} - set(r.aborted)
    # a group with spread that completed before data was full is always accepted
    for e in r.events:
        if e.group.verdict is Verdict.VARIED:
            assert e.group.decision in (Decision.ACCEPTED, Decision.SURPLUS)
        if e.group.decision is Decision.SURPLUS:
            assert e.group.kept == target
        if e.group.verdict is Verdict.ZERO_STD and e.group.decision is Decision.DROPPED:
            assert e.group.remaining + 1 > target  # dropped only while remaining > target
        if e.group.decision is Decision.FALLBACK:
            assert e.group.remaining <= target
    # the wave count is minimal: a wave opened only when remaining < target after all earlier decisions
    for k, t in enumerate(r.wave_times[1:], start=1):
        dropped_by_t = sum(1 for e in r.events if e.time <= t and e.group.decision is Decision.DROPPED)
        assert k * wave - dropped_by_t < target
    # R15: an aborted group had not finished when the step ended: its own submission time (the time of
    # its wave) plus its duration is strictly later than the last decision (a group finishing at that very
    # time is in the last batch and is judged, not aborted); every judged group had finished by then
    def finish(i):
        return r.wave_times[i // wave] + supply[i][1]

    assert all(finish(i) > r.end_time for i in r.aborted)
    assert all(finish(e.group.index) == e.time <= r.end_time for e in r.events)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=6).flatmap(
        lambda target: st.tuples(
            st.just(target),
            st.integers(min_value=target, max_value=2 * target),
            st.lists(st.tuples(verdicts, st.randoms(use_true_random=False)), min_size=1, max_size=200),
        )
    )
)
def test_controller_counters_stay_consistent_under_arbitrary_completion_orders(args):
    target, wave, steps = args
    ctrl = WaveController(target, wave, 10**6)
    ctrl.submit()
    for verdict, rnd in steps:
        if ctrl.done:
            break
        in_flight = sorted(ctrl.in_flight)
        batch = rnd.sample(in_flight, k=rnd.randint(1, min(3, len(in_flight))))
        ctrl.complete_batch([(i, verdict) for i in batch])
        ctrl.submit()
        total_dropped = sum(ctrl.drop_counts.values())
        assert ctrl.remaining == ctrl.submitted - total_dropped
        assert ctrl.completed + len(ctrl.in_flight) == ctrl.submitted
        assert len(ctrl.kept) <= target
        assert ctrl.done or ctrl.remaining >= target  # after submit(), never stalled
    if ctrl.done:
        aborted = ctrl.abort()
        assert ctrl.completed + len(aborted) == ctrl.submitted
