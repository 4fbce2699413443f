"""docs/dynamic-sampling.md §3-§6 examples, run through ``replay``."""

import pytest

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    Decision,
    SupplyExhausted,
    TooManyTechnicalFailures,
    Verdict,
    replay,
)


def test_spec_section_4_example_14_with_spread_plus_2_all_zero_fallbacks():
    groups = [("zero_std", 1.0)] * 16 + [("zero_std", 2.0)] * 2 + [("varied", 3.0)] * 14
    r = replay(groups)
    assert len(r.kept) == 16 and r.fallback == [16, 17]
    assert r.zero_std_group_drop_count == 16 and r.dropped[REASON_ZERO_STD] == list(range(16))
    assert r.waves == 1 and r.submitted == 32 and r.aborted == [] and r.surplus == []
    assert r.remaining == 16


def test_varied_groups_fill_the_batch_and_the_rest_of_the_wave_is_aborted():
    groups = [("varied", float(i)) for i in range(32)]
    r = replay(groups)
    assert r.kept == list(range(16)) and r.aborted == list(range(16, 32)) and r.waves == 1


def test_zero_std_groups_alone_never_cause_endless_resampling():
    r = replay([("zero_std", 1.0)] * 32)
    assert r.waves == 1 and len(r.fallback) == 16 and r.zero_std_group_drop_count == 16


def test_no_third_wave_once_two_waves_hold_16_scorable_groups():
    # wave 1: 20 technical + 12 scorable (zero-std) -> remaining falls below 16 -> wave 2
    wave1 = [("technical", 1.0)] * 7 + [("zero_std", 1.0)] + [("technical", 1.0)] * 7 + [("zero_std", 1.0)]
    wave1 += [("technical", 1.0)] * 6 + [("zero_std", 1.0)] * 10
    wave2 = [("zero_std", 5.0)] * 32
    r = replay(wave1 + wave2 + [("varied", 1.0)] * 32)
    # t=1, one batch in submission order: 7 technical (32 -> 25), zero-std 7 dropped (24), 7 technical (17),
    # zero-std 15 dropped (16), 6 technical (10), zero-std 22..31 admitted as fallbacks at remaining 10.
    # remaining 10 < 16: wave 2 (32..63) at t=1, remaining 42.  t=6: 26 zero-std drops (42 -> 16), then
    # 58..63 are fallbacks and fill data.  The third wave of the supply (64..95) is never submitted.
    assert r.waves == 2 and r.submitted == 64
    assert r.dropped == {REASON_TECHNICAL: list(range(7)) + list(range(8, 15)) + list(range(16, 22)),
                         REASON_ZERO_STD: [7, 15] + list(range(32, 58))}
    assert r.fallback == r.kept == list(range(22, 32)) + list(range(58, 64))


def test_technical_failures_force_a_second_and_a_third_wave():
    # every wave: 4 x (7 technical, 1 varied), never 8 technical in a row
    wave = ([("technical", 1.0)] * 7 + [("varied", 1.0)]) * 4
    r = replay(wave * 10)
    # each wave: 28 drops and 4 kept -> remaining 4, 8, 12 after waves 1-3; the 4th fills 16
    assert r.waves == 4 and r.wave_times == [0.0, 1.0, 2.0, 3.0]
    assert r.technical_group_drop_count == 4 * 28 and r.zero_std_group_drop_count == 0
    assert r.kept == [7, 15, 23, 31, 39, 47, 55, 63, 71, 79, 87, 95, 103, 111, 119, 127]
    assert r.remaining == 16 and r.aborted == []


def test_second_wave_is_submitted_at_the_time_of_the_decision_that_needed_it():
    groups = [("technical", 1.0)] * 4 + [("zero_std", 2.0)] * 13 + [("varied", 3.0)] * 15 + [("varied", 0.5)] * 32
    r = replay(groups, max_consecutive_failed_groups=8)
    # at t=1: 4 technical drops (remaining 28); at t=2: 12 zero-std drops then remaining 16 -> 13th is a fallback
    assert r.waves == 1 and r.fallback == [16]
    assert r.dropped == {REASON_TECHNICAL: [0, 1, 2, 3], REASON_ZERO_STD: list(range(4, 16))}
    assert r.kept == [16] + list(range(17, 32)) and r.remaining == 16
    groups = [("technical", 1.0)] * 7 + [("zero_std", 1.0)] + [("zero_std", 2.0)] * 12 + [("varied", 9.0)] * 12
    groups += [("varied", 0.5)] * 32
    r = replay(groups)
    # t=1: 7 technical + 1 zero-std dropped -> remaining 24; t=2: 8 more zero-std dropped -> 16, then 4 fallbacks
    assert r.waves == 1 and r.remaining == 16
    assert r.dropped == {REASON_TECHNICAL: list(range(7)), REASON_ZERO_STD: list(range(7, 16))}
    assert r.fallback == [16, 17, 18, 19]
    # t=9: the 12 groups with spread (20..31) fill the 12 free slots
    assert r.kept == [16, 17, 18, 19] + list(range(20, 32)) and r.aborted == []
    groups = [("technical", 1.0)] * 7 + [("zero_std", 1.0)] * 9 + [("technical", 2.0)] + [("varied", 9.0)] * 15
    groups += [("varied", 0.5)] * 32
    r = replay(groups)
    # t=1: 7 technical + 9 zero-std drops -> remaining 16; t=2: technical -> 15 < 16: wave 2 at t=2
    assert r.waves == 2 and r.wave_times == [0.0, 2.0]
    assert r.kept == list(range(32, 48))  # wave 2's groups finish at 2.5, before wave 1's at 9
    # all 32 of wave 2 finish together at 2.5: 48..63 are judged in that batch after data is full
    assert r.surplus == list(range(48, 64)) and r.aborted == list(range(17, 32))


def test_surplus_groups_with_spread_are_never_trained():
    """R26: groups with spread that finish in the batch that fills data are surplus (no eviction: see test_rules.py R17)."""
    groups = [("varied", 1.0)] * 20 + [("varied", 2.0)] * 12
    r = replay(groups)
    # 20 groups finish together at t=1: 0..15 fill data, 16..19 are surplus; 20..31 (t=2) are aborted
    assert r.kept == list(range(16)) and r.surplus == [16, 17, 18, 19] and r.aborted == list(range(20, 32))
    assert [e.group.decision for e in r.events if e.group.index in r.surplus] == [Decision.SURPLUS] * 4


def test_remaining_equals_submitted_minus_dropped_at_every_event():
    cycle = ["technical", "zero_std", "varied", "zero_std", "technical", "zero_std"]
    groups = [(cycle[i % len(cycle)], 1.0 + (i * 7919 % 101) / 10) for i in range(400)]
    r = replay(groups)
    dropped = 0
    for e in r.events:
        dropped += e.group.decision is Decision.DROPPED
        submitted_before = 32 * sum(1 for t in r.wave_times if t < e.time)
        assert e.group.remaining == submitted_before - dropped
    assert r.remaining == r.submitted - sum(len(v) for v in r.dropped.values())


def test_over_sampling_equal_to_batch_size_admits_every_zero_std_group():
    groups = [("zero_std", 1.0)] * 10 + [("varied", 1.0)] * 6
    r = replay(groups, rollout_batch_size=16, over_sampling_batch_size=16)
    assert r.zero_std_group_drop_count == 0 and len(r.fallback) == 10 and r.waves == 1


def test_supply_exhausted_is_a_clear_error():
    with pytest.raises(SupplyExhausted, match="wave 2 needs groups 32..63"):
        replay([("technical", 1.0), ("varied", 1.0)] * 15 + [("technical", 1.0)] * 2)


def test_the_stop_fires_during_replay():
    with pytest.raises(TooManyTechnicalFailures, match="8 technical groups in a row"):
        replay([("technical", 1.0)] * 32)


def test_bad_supply_items_are_refused():
    with pytest.raises(ValueError, match="duration"):
        replay([("varied", -1.0)] * 32)
    with pytest.raises(ValueError, match="unknown verdict"):
        replay([("maybe", 1.0)] * 32)
    with pytest.raises(ValueError, match=r"\(verdict, duration\)"):
        replay(["varied"] * 32)


def test_events_record_time_wave_verdict_decision_remaining_and_kept():
    r = replay([(Verdict.VARIED, 2.0)] * 16 + [(Verdict.ZERO_STD, 1.0)] * 16)
    first = r.events[0]
    assert (first.time, first.group.index, first.group.wave, first.group.verdict, first.group.decision) == (
        1.0,
        16,
        1,
        Verdict.ZERO_STD,
        Decision.DROPPED,
    )
    assert (first.group.remaining, first.group.kept, first.group.reason) == (31, 0, REASON_ZERO_STD)
    assert r.events[-1].group.kept == 16 and r.end_time == 2.0
    assert r.events[-1].as_dict()["decision"] == "accepted"


def test_ties_are_broken_by_submission_index_not_by_supply_position_in_the_heap():
    """R27: groups that finish at the same time form one batch judged in submission order.

    Target 1, wave 4: groups 3, 2, 1 (zero-std, zero-std, varied) and 0 (technical) all finish at t=1.
    In submission order: 0 technical dropped (remaining 3), 1 varied accepted (data full), 2 and 3
    zero-std at remaining 3 > 1 and 2 > 1: dropped -> remaining 1.
    """
    groups = [("technical", 1.0), ("varied", 1.0), ("zero_std", 1.0), ("zero_std", 1.0)]
    r = replay(groups, rollout_batch_size=1, over_sampling_batch_size=4)
    assert [(e.group.index, e.group.decision, e.group.remaining) for e in r.events] == [
        (0, Decision.DROPPED, 3),
        (1, Decision.ACCEPTED, 3),
        (2, Decision.DROPPED, 2),
        (3, Decision.DROPPED, 1),
    ]
