"""One example per dynamic-sampling rule that fails when that rule, and only that rule, is broken.

Rule numbers (R7, R17, ...) are those of docs/dynamic-sampling.md.  Every expected
number below is written out and derived in a comment, never computed by the code
under test.  ``make mutate`` checks that breaking each rule makes this folder fail.
"""

import pytest

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    ConsecutiveFailureGuard,
    Decision,
    GroupOutcome,
    TooManyTechnicalFailures,
    TrajectoryOutcome,
    Verdict,
    WaveController,
    filter_output,
    group_verdict,
    grpo_advantages,
    replay,
    rollout_step_metrics,
    split_into_updates,
    unique_rollout_rewards,
)
from shopsimrl.sampling import metrics as m


def sample(index, reward, rollout_id=None):
    return {"index": index, "rollout_id": rollout_id, "reward": reward, "metadata": {"shopsim_scored": True}}


# -- §2.2 R7: the spread tolerance is 1e-6, inclusive ------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ((0.0, 1e-6), Verdict.ZERO_STD),  # exactly the tolerance: max - min <= 1e-6 is zero-std (catches `<`)
        ((0.0, 8e-7), Verdict.ZERO_STD),  # below 1e-6: zero-std (a 5e-7 tolerance would call it varied)
        ((0.0, 1.5e-6), Verdict.VARIED),  # above 1e-6: varied (a 2e-6 tolerance would call it zero-std)
        ((0.25, 0.25 + 1.5e-6, 0.25), Verdict.VARIED),  # the spread, not the std: one outlier of 1.5e-6 is enough
        ((0.0, 0.0), Verdict.ZERO_STD),
    ],
)
def test_r7_spread_tolerance_is_pinned_on_both_sides_of_1e_6(rewards, expected):
    group = [sample(i, r) for i, r in enumerate(rewards)]
    assert group_verdict(group) is expected


# -- §2.2 R8: one trajectory fanned out into segments counts once -------------------------------------


def test_r8_segments_sharing_a_rollout_id_count_once():
    # rollout "a" has three segments (indices 0-2), rollout "b" one (index 3): two unique rollouts, not four
    same = [sample(0, 1.0, "a"), sample(1, 1.0, "a"), sample(2, 1.0, "a"), sample(3, 1.0, "b")]
    assert unique_rollout_rewards(same) == {"a": 1.0, "b": 1.0}
    assert group_verdict(same) is Verdict.ZERO_STD
    # segments of one rollout are one trajectory: if they disagree, that is a data error, not a spread
    with pytest.raises(ValueError, match="rollout_id='a'"):
        group_verdict([sample(0, 1.0, "a"), sample(1, 0.0, "a")])
    # without rollout_id, each index is its own trajectory
    assert unique_rollout_rewards([sample(4, 1.0), sample(5, 0.0)]) == {4: 1.0, 5: 0.0}
    assert group_verdict([sample(4, 1.0), sample(5, 0.0)]) is Verdict.VARIED


# -- §2.1 R5: one unscorable sibling makes the whole group technical --------------------------------


def test_r5_one_unscored_sibling_of_eight_makes_the_group_technical():
    group = [sample(i, float(i % 2)) for i in range(8)]
    group[5]["metadata"] = {"shopsim_scored": False}
    assert group_verdict(group) is Verdict.TECHNICAL
    # the same 8 with every sibling scored have spread 1.0: varied
    group[5]["metadata"] = {"shopsim_scored": True}
    assert group_verdict(group) is Verdict.VARIED


# -- §2.2 R9: the filter's output and reason strings -------------------------------------------------


def test_r9_filter_outputs_and_reason_strings_are_exact():
    def fields(verdict):
        out = filter_output(verdict)
        return (out.keep, out.reason, out.keep_when_insufficient)

    assert fields(Verdict.TECHNICAL) == (False, "shopsim_unscored_technical_group", False)  # never a fallback
    assert fields(Verdict.ZERO_STD) == (False, "shopsim_zero_std_group", True)  # a fallback when short
    assert fields(Verdict.VARIED) == (True, None, False)


# -- §2.1 R6: the consecutive-failure stop ---------------------------------------------------------


def test_r6_eight_technical_groups_in_a_row_stop_and_a_scored_group_resets_the_count():
    guard = ConsecutiveFailureGuard()  # default limit 8
    for _ in range(7):
        guard.observe(Verdict.TECHNICAL)
    guard.observe(Verdict.ZERO_STD)  # a scored group: the count goes back to 0
    assert guard.count == 0
    for _ in range(7):
        guard.observe(Verdict.TECHNICAL)
    assert guard.count == 7  # 7 in a row: not yet
    with pytest.raises(TooManyTechnicalFailures) as info:
        guard.observe(Verdict.TECHNICAL)  # the 8th in a row
    assert info.value.count == 8


def test_r6_the_stop_fires_on_the_eighth_technical_group_of_a_replay_not_before():
    # 7 technical, 1 varied, then 7 technical at distinct times: 7 in a row at most -> no stop
    supply = [("technical", 1.0)] * 7 + [("varied", 2.0)] + [("technical", 3.0)] * 7 + [("varied", 4.0)] * 17
    r = replay(supply, rollout_batch_size=16, over_sampling_batch_size=32)
    assert r.technical_group_drop_count == 14
    # one more technical group in the second run of failures makes 8 in a row: the stop
    supply = [("technical", 1.0)] * 7 + [("varied", 2.0)] + [("technical", 3.0)] * 8 + [("varied", 4.0)] * 16
    with pytest.raises(TooManyTechnicalFailures, match="8 technical groups in a row"):
        replay(supply, rollout_batch_size=16, over_sampling_batch_size=32)


# -- §3 R12/R13: remaining and the fallback threshold -----------------------------------------------


def test_r12_r13_sixteen_zero_std_drops_then_the_seventeenth_zero_std_group_is_a_fallback_at_remaining_16():
    ctrl = WaveController(16, 32)
    ctrl.submit()  # remaining 32
    decisions = [ctrl.complete(i, Verdict.ZERO_STD) for i in range(17)]
    # groups 0..15 dropped: remaining 31, 30, ..., 16 (one less per drop)
    assert [d.decision for d in decisions[:16]] == [Decision.DROPPED] * 16
    assert [d.remaining for d in decisions[:16]] == [31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16]
    # group 16 arrives at remaining 16 <= 16: admitted (fallback), remaining stays 16, data holds 1
    assert (decisions[16].decision, decisions[16].remaining, decisions[16].kept) == (Decision.FALLBACK, 16, 1)
    # a technical group at remaining 16 is still dropped: 15, and a second wave of 32 opens: 15 + 32 = 47
    assert ctrl.complete(17, Verdict.TECHNICAL).remaining == 15
    assert ctrl.submit() == range(32, 64) and ctrl.remaining == 47


# -- §3 R14: a new wave only when remaining < target ------------------------------------------------


def test_r14_no_new_wave_at_remaining_equal_to_target():
    ctrl = WaveController(4, 8)
    ctrl.submit()  # remaining 8
    ctrl.complete_batch([(i, Verdict.TECHNICAL) for i in range(4)])  # 4 drops: remaining 4 == target
    assert ctrl.remaining == 4 and not ctrl.needs_wave and ctrl.submit() == range(8, 8)  # no wave at 4
    ctrl.complete(4, Verdict.TECHNICAL)  # remaining 3 < 4
    assert ctrl.needs_wave and ctrl.submit() == range(8, 16) and (ctrl.remaining, ctrl.waves) == (11, 2)


# -- §3 R15: the step ends once target groups are kept; in-flight groups are aborted -------------------


def test_r15_abort_once_target_kept_even_with_groups_of_two_waves_in_flight():
    # target 2, wave 4.  Wave 1 at t=0: groups 0-2 technical (done at t=1), group 3 varied (t=10).
    # t=1: three drops, remaining 4 -> 1 < 2: wave 2 (groups 4-7) submitted at t=1.
    # group 4 varied (t=1+1=2), group 5 varied (t=1+2=3), groups 6-7 varied (t=1+5=6).
    supply = [("technical", 1.0)] * 3 + [("varied", 10.0)] + [("varied", 1.0), ("varied", 2.0)] + [("varied", 5.0)] * 2
    r = replay(supply, rollout_batch_size=2, over_sampling_batch_size=4)
    assert r.wave_times == [0.0, 1.0]
    assert r.kept == [4, 5] and r.end_time == 3.0  # kept 2 at t=3: the step ends there
    assert r.aborted == [3, 6, 7]  # group 3 (t=10) and 6, 7 (t=6) were still generating
    assert r.surplus == [] and r.completed == 5


# -- §4 R16: first finished, first judged; no re-ranking by spread ----------------------------------


def test_r16_the_first_group_to_finish_is_judged_first_whatever_its_submission_index():
    # target 1, wave 3: group 1 finishes at t=1, group 2 at t=3, group 0 (submitted first) at t=5.
    # Group 1 takes the only slot at t=1; the step ends there and groups 0 and 2 are aborted.
    r = replay([("varied", 5.0), ("varied", 1.0), ("varied", 3.0)], rollout_batch_size=1, over_sampling_batch_size=3)
    assert r.kept == [1] and r.aborted == [0, 2] and r.end_time == 1.0
    # target 2, wave 3: zero-std group 0 (t=1) is judged at remaining 3 > 2 and dropped before the groups
    # with spread finish; nothing re-ranks it later: groups 1 (t=2) and 2 (t=3) are accepted
    r = replay([("zero_std", 1.0), ("varied", 2.0), ("varied", 3.0)], rollout_batch_size=2, over_sampling_batch_size=3)
    assert r.dropped[REASON_ZERO_STD] == [0] and r.kept == [1, 2] and r.fallback == []


# -- §4 R17: no eviction --------------------------------------------------------------------------


def test_r17_no_eviction_a_kept_fallback_stays_when_more_groups_with_spread_than_free_slots_finish_together():
    # target 4, wave 8 (4 spare slots).
    # t=1: groups 0-3 zero-std, dropped: remaining 8 -> 4.
    # t=2: group 4 zero-std at remaining 4 <= 4: fallback (data [4]); group 5 technical: remaining 3 -> wave 2
    #      (groups 8-15) at t=2, remaining 11.
    # t=3: groups 8-11, four with spread, finish together; three slots are free: 8, 9, 10 accepted, 11 surplus.
    # Groups 6, 7 (t=100) and 12-15 (t=102) are aborted.
    supply = [("zero_std", 1.0)] * 4 + [("zero_std", 2.0), ("technical", 2.0)] + [("varied", 100.0)] * 2
    supply += [("varied", 1.0)] * 4 + [("varied", 100.0)] * 4
    r = replay(supply, rollout_batch_size=4, over_sampling_batch_size=8)
    assert r.waves == 2 and r.wave_times == [0.0, 2.0]
    assert r.fallback == [4]
    assert r.kept == [4, 8, 9, 10]  # the fallback is still there: it was not swapped for group 11
    assert r.surplus == [11]
    assert r.dropped == {REASON_TECHNICAL: [5], REASON_ZERO_STD: [0, 1, 2, 3]}
    assert r.aborted == [6, 7, 12, 13, 14, 15]
    last = [(e.group.index, e.group.decision) for e in r.events if e.time == 3.0]
    assert last == [(8, Decision.ACCEPTED), (9, Decision.ACCEPTED), (10, Decision.ACCEPTED), (11, Decision.SURPLUS)]


# -- §5 R18: zero-std drops alone never open another wave -------------------------------------------


def test_r18_thirty_two_zero_std_groups_make_one_wave_sixteen_drops_sixteen_fallbacks():
    r = replay([("zero_std", float(i)) for i in range(32)])
    assert r.waves == 1 and r.submitted == 32
    assert r.dropped[REASON_ZERO_STD] == list(range(16)) and r.fallback == list(range(16, 32))


# -- §6 R19: each drop rate is its count over trained groups plus that count --------------------------


def _group(gi, successes):
    return GroupOutcome(gi, [TrajectoryOutcome(i, True, s, s, s) for i, s in enumerate(successes)])


def test_r19_each_drop_rate_is_its_count_over_trained_groups_plus_its_own_count():
    # 16 trained groups, 12 zero-std drops, 4 technical drops (the release run's step 1)
    completed = [_group(i, [1.0, 0.0]) for i in range(16)] + [_group(100 + i, [0.0, 0.0]) for i in range(12)]
    completed += [GroupOutcome(200 + i, [TrajectoryOutcome(0, False)]) for i in range(4)]
    out = rollout_step_metrics(completed, range(16), {REASON_ZERO_STD: 12, REASON_TECHNICAL: 4})
    assert out[m.ZERO_STD_GROUP_DROP_RATE] == 12 / 28  # 12 / (16 + 12), not 12 / (16 + 12 + 4) nor 12 / 16
    assert out[m.TECHNICAL_GROUP_DROP_RATE] == 4 / 20  # 4 / (16 + 4)
    assert out[m.ZERO_STD_GROUP_DROP_COUNT] == 12.0 and out[m.TECHNICAL_GROUP_DROP_COUNT] == 4.0


def test_r20_success_and_reward_means_count_dropped_and_surplus_groups_not_only_kept_ones():
    # kept: successes 1, 0; dropped zero-std: 0, 0, 0, 0; surplus: 1, 1 -> 3 successes over 8 trajectories
    kept, dropped, surplus = _group(0, [1.0, 0.0]), _group(1, [0.0] * 4), _group(2, [1.0, 1.0])
    out = rollout_step_metrics([kept, dropped, surplus], [0], {REASON_ZERO_STD: 1})
    assert out[m.SUCCESS_RATE] == 3 / 8 and out[m.REWARD_MEAN] == 3 / 8  # over the kept group alone: 1 / 2
    assert out[m.TRAIN_GROUP_COUNT] == 1 and out[m.GROUP_COUNT] == 3


def test_r21_sixteen_groups_of_eight_at_global_batch_64_make_two_updates_of_eight_groups():
    assert split_into_updates(list(range(16)), 8, 64) == [list(range(0, 8)), list(range(8, 16))]
    assert split_into_updates(list(range(16)), 8, 32) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_r22_grpo_advantages_written_out():
    # rewards 1, 0, 0, 0: mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = sqrt(0.25) = 0.5
    adv = grpo_advantages([0, 1, 2, 3], [1.0, 0.0, 0.0, 0.0])
    assert adv == pytest.approx([0.75 / 0.500001, -0.25 / 0.500001, -0.25 / 0.500001, -0.25 / 0.500001], rel=1e-12)
    # without the std division: r - mean
    assert grpo_advantages([0, 1, 2, 3], [1.0, 0.0, 0.0, 0.0], std_normalization=False) == [0.75, -0.25, -0.25, -0.25]
    # one rollout in two segments: std taken as 0, advantage 0 (not NaN)
    assert grpo_advantages(["a", "a"], [1.0, 1.0]) == [0.0, 0.0]


def test_r23_all_wrong_group_rate_is_over_fully_scored_groups():
    # g0: all wrong; g1: one right; g2: one sibling unscored (technical), the other wrong -> 1 of 2 fully scored
    g2 = GroupOutcome(2, [TrajectoryOutcome(0, True, 0.0, 0.0, 0.0), TrajectoryOutcome(1, False)])
    out = rollout_step_metrics([_group(0, [0.0, 0.0]), _group(1, [1.0, 0.0]), g2], [1], {REASON_TECHNICAL: 1})
    assert out[m.ALL_WRONG_GROUP_RATE] == 1 / 2  # not 2 / 3 (g2 counted) nor 1 / 3
    assert out[m.SCORED_RATE] == 5 / 6


# -- §7 R24: trajectories are de-duplicated by (group_index, rollout_id) ------------------------------


def test_r24_three_segments_of_one_trajectory_are_one_trajectory_in_the_metrics():
    right, wrong = TrajectoryOutcome("a", True, 1.0, 1.0, 1.0), TrajectoryOutcome("b", True, 0.0, 0.0, 0.0)
    g = GroupOutcome(0, [right, right, right, wrong])
    out = rollout_step_metrics([g], [0], {})
    assert out[m.TRAJECTORY_COUNT] == 2 and out[m.TRAIN_TRAJECTORY_COUNT] == 2
    assert out[m.SUCCESS_RATE] == 0.5  # (1 + 0) / 2, not (1 + 1 + 1 + 0) / 4


# -- §8 R26/R27: a batch of simultaneous completions, in submission order ------------------------------


def test_r27_simultaneous_completions_are_judged_in_submission_order_whatever_order_they_arrive_in():
    # target 1, wave 2: groups 1 and 0, both with spread, finish together: group 0 takes the only slot
    ctrl = WaveController(1, 2)
    ctrl.submit()
    decisions = ctrl.complete_batch([(1, Verdict.VARIED), (0, Verdict.VARIED)])
    assert [(d.index, d.decision) for d in decisions] == [(0, Decision.ACCEPTED), (1, Decision.SURPLUS)]
    # target 1, wave 2, remaining 2: group 1 technical and group 0 zero-std finish together.
    # Group 0 first: zero-std at remaining 2 > 1 -> dropped (1); then group 1 technical -> dropped (0).
    # (Group 1 first would leave remaining 1 and admit group 0 as a fallback.)
    ctrl = WaveController(1, 2)
    ctrl.submit()
    decisions = ctrl.complete_batch([(1, Verdict.TECHNICAL), (0, Verdict.ZERO_STD)])
    assert [(d.index, d.decision, d.remaining, d.kept) for d in decisions] == [
        (0, Decision.DROPPED, 1, 0),
        (1, Decision.DROPPED, 0, 0),
    ]
    assert ctrl.submit() == range(2, 4)  # remaining 0 < 1: a second wave


def test_r26_groups_with_spread_beyond_target_in_the_filling_batch_are_surplus_never_kept():
    # target 2, wave 4: four groups with spread finish together: 0, 1 fill data; 2, 3 are surplus
    ctrl = WaveController(2, 4)
    ctrl.submit()
    decisions = ctrl.complete_batch([(i, Verdict.VARIED) for i in range(4)])
    assert [d.decision for d in decisions] == [Decision.ACCEPTED, Decision.ACCEPTED, Decision.SURPLUS, Decision.SURPLUS]
    assert ctrl.kept == [0, 1] and ctrl.surplus == [2, 3] and ctrl.remaining == 4


def test_r26_r27_a_zero_std_group_after_data_is_full_in_the_same_batch_is_still_filtered():
    # target 2, wave 3: groups 0, 1 varied and group 2 zero-std finish together (remaining 3 > 2).
    # 0, 1 accepted (data full); 2 is still filtered: zero-std at remaining 3 > 2 -> dropped and counted.
    ctrl = WaveController(2, 3)
    ctrl.submit()
    decisions = ctrl.complete_batch([(2, Verdict.ZERO_STD), (0, Verdict.VARIED), (1, Verdict.VARIED)])
    assert [(d.index, d.decision) for d in decisions] == [
        (0, Decision.ACCEPTED),
        (1, Decision.ACCEPTED),
        (2, Decision.DROPPED),
    ]
    assert ctrl.drop_counts == {REASON_TECHNICAL: 0, REASON_ZERO_STD: 1} and ctrl.remaining == 2
