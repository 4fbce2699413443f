"""``RolloutStep``: its events and actions, by example; and, over random completion orders, decision for
decision and prompt for prompt the loop the shells used to write by hand around ``WaveController``."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    ConsecutiveFailureGuard,
    Decision,
    GroupDecision,
    TooManyTechnicalFailures,
    Verdict,
    WaveController,
)
from shopsimrl.sampling.adaptive import AdaptiveWaves
from shopsimrl.sampling.evidence import NotEnoughPromptsError
from shopsimrl.sampling.source import new_selector
from shopsimrl.sampling.step import (
    AbortRest,
    AdaptiveRefills,
    FirstStage,
    FixedWaves,
    RolloutStep,
    Start,
    StepDone,
    StoppedEarly,
    StopRun,
    WaveOpened,
    new_step,
)

PROMPTS = [f"p{i}" for i in range(40)]
V, Z, T = Verdict.VARIED, Verdict.ZERO_STD, Verdict.TECHNICAL
SPREAD, AGREE = [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]


def starts_of(actions):
    return [a for a in actions if isinstance(a, Start)]


def fixed_step(target=2, wave=4, limit=8, selection="seed", source=None):
    source = source or new_selector(selection, PROMPTS, 4, 0)
    step = RolloutStep(target, wave, source=source, sizer=FixedWaves(4), guard=ConsecutiveFailureGuard(limit))
    return step, source


def test_start_opens_one_whole_wave_each_group_with_all_its_siblings_on_the_seed_orders_prompts():
    step, source = fixed_step()
    expected = new_selector("seed", PROMPTS, 4, 0).next_prompts(4)
    actions = step.start()
    assert actions == [*(Start(i, 1, expected[i], range(4), None) for i in range(4)), WaveOpened(1, range(4), 4)]
    assert source.in_flight == frozenset(expected)


def test_a_decision_then_no_action_while_the_groups_in_flight_cover_the_target():
    step, _ = fixed_step()
    step.start()
    actions = step.complete(0, Z, AGREE)  # remaining 4 > target 2: dropped, remaining 3 still covers the target
    assert actions == [GroupDecision(0, 1, Z, Decision.DROPPED, REASON_ZERO_STD, 3, 0)]


def test_a_drop_below_the_target_opens_the_next_wave():
    step, _ = fixed_step()
    step.start()
    step.complete(0, Z, AGREE)
    actions = step.complete(1, T, None)  # remaining 2: not below the target
    assert [a.decision for a in actions if isinstance(a, GroupDecision)] == [Decision.DROPPED]
    assert not [a for a in actions if isinstance(a, Start)]
    actions = step.complete_batch([(2, Z, AGREE)])  # remaining 2 <= target: a fallback, kept
    assert actions[0].decision is Decision.FALLBACK and len(actions) == 1


def test_target_kept_ends_the_batch_with_abort_rest_naming_every_group_in_flight():
    step, _ = fixed_step()
    step.start()
    actions = step.complete_batch([(3, V, SPREAD), (1, V, SPREAD)])
    assert [(a.index, a.decision) for a in actions[:2]] == [(1, Decision.ACCEPTED), (3, Decision.ACCEPTED)]
    assert actions[2] == AbortRest((0, 2))
    assert step.done


def test_results_reach_the_source_only_at_close_aborted_prompts_first_surplus_released_with_evidence():
    step, source = fixed_step(selection="skip")
    prompts = [s.prompt for s in starts_of(step.start())]
    actions = step.complete_batch([(0, V, SPREAD), (1, V, SPREAD), (2, V, SPREAD)])
    assert [a.decision for a in actions[:3]] == [Decision.ACCEPTED, Decision.ACCEPTED, Decision.SURPLUS]
    assert source.in_flight == frozenset(prompts), "nothing is told before the step ends"
    done = step.close()
    assert source.in_flight == frozenset()
    assert done == StepDone(kept=[0, 1], fallback=[], dropped={REASON_ZERO_STD: [], REASON_TECHNICAL: []}, surplus=[2],
                            aborted=[3], waves=1, submitted=4, completed=3, remaining=4)
    stats = source.pop_stats()
    assert stats["released"] == 2  # the aborted group and the surplus one
    assert source.predicted_pass_rate(prompts[2]) is not None  # the surplus group's rewards are evidence
    assert source.predicted_pass_rate(prompts[3]) is None  # aborted: nothing learned
    assert step.close() is done  # idempotent


def test_the_guard_stop_hands_back_the_batch_decisions_before_it_and_the_trigger_is_released():
    step, source = fixed_step(target=2, wave=4, limit=2)
    prompts = [s.prompt for s in starts_of(step.start())]
    with pytest.raises(TooManyTechnicalFailures) as info:
        step.complete_batch([(0, V, SPREAD), (1, T, None), (2, T, None), (3, V, SPREAD)])
    decided = info.value.decisions
    assert [(d.index, d.decision, d.reason) for d in decided] == [
        (0, Decision.ACCEPTED, None), (1, Decision.DROPPED, REASON_TECHNICAL), (2, Decision.DROPPED, REASON_TECHNICAL)]
    assert step.stop() == AbortRest((3,))  # never judged
    step.close()
    assert source.in_flight == frozenset()
    assert source.pop_stats()["released"] == 3  # two technical groups and the aborted one
    del prompts


def test_stop_aborts_everything_in_flight():
    step, source = fixed_step()
    step.start()
    step.complete(0, V, SPREAD)
    assert step.stop() == AbortRest((1, 2, 3))
    assert step.close().aborted == [1, 2, 3] and source.in_flight == frozenset()


def test_adaptive_refills_start_the_predicted_number_each_with_its_chance_of_spread():
    source = new_selector("skip", PROMPTS, 4, 0)
    step = RolloutStep(4, 8, source=source, sizer=AdaptiveRefills(AdaptiveWaves(4, 8, 0.0), 4),
                       guard=ConsecutiveFailureGuard())
    starts = starts_of(step.start())
    assert starts and all(s.spread_chance is not None and 0 < s.spread_chance < 1 for s in starts)
    assert len(starts) == AdaptiveWaves(4, 8, 0.0).refill_size(0, [], lambda j: starts[j].spread_chance)
    actions = step.complete(0, V, SPREAD)
    refills = [a for a in actions if isinstance(a, Start)]
    assert all(s.wave == 2 for s in refills) and len(refills) <= 1


# -- the step decides exactly as the hand-written loop it replaced --------------------------------------
def hand_written_loop(supply, target, wave, limit, selection, adaptive, n=4):
    """The loop the driver, the simulator and slime's rollout function each wrote around WaveController."""
    source = new_selector(selection, PROMPTS, n, 0)
    ctrl = WaveController(target, wave, guard=ConsecutiveFailureGuard(limit))
    rule = AdaptiveWaves(target, wave, -1.5)
    heap, prompt_of, chance, feedback, log = [], {}, {}, [], []
    now = 0.0

    def submit():
        if not adaptive:
            new = ctrl.submit()
            prompts = source.next_prompts(len(new)) if new else []
        else:
            picks = rule.choose(len(ctrl.kept), [chance[i] for i in ctrl.in_flight], source.next_prompt, ctrl.submitted)
            new = ctrl.refill(len(picks)) if picks else range(0)
            for index, (_, q) in zip(new, picks):
                chance[index] = q
            prompts = [p for p, _ in picks]
        for index, prompt in zip(new, prompts):
            prompt_of[index] = prompt
            heapq.heappush(heap, (now + supply[index % len(supply)][1], index))
            log.append(("start", index, prompt))

    submit()
    try:
        while not ctrl.done:
            now, index = heapq.heappop(heap)
            batch = [index]
            while heap and heap[0][0] == now:
                batch.append(heapq.heappop(heap)[1])
            before = len(log)
            for d in ctrl.complete_batch([(i, supply[i % len(supply)][0]) for i in batch]):
                rewards = None if d.verdict is T else (SPREAD if d.verdict is V else AGREE)
                feedback.append((prompt_of[d.index], d.decision, rewards))
                log.append(tuple(d))
            if not ctrl.done:
                submit()
    except TooManyTechnicalFailures:
        return log, "stop"
    except NotEnoughPromptsError:  # the step raises it from the event itself: its decisions are not returned
        return log[:before], "out of prompts"
    aborted = ctrl.abort()
    for index in aborted:
        source.release(prompt_of[index])
    for prompt, decision, rewards in feedback:
        source.settle(prompt, rewards, surplus=decision is Decision.SURPLUS)
    return log, (aborted, source.state_dict())


def step_loop(supply, target, wave, limit, selection, adaptive, n=4):
    """The same run as a shell around RolloutStep."""
    source = new_selector(selection, PROMPTS, n, 0)
    step = new_step(target, wave, n, source=source, waves="adaptive" if adaptive else "fixed", cushion=-1.5,
                    guard=ConsecutiveFailureGuard(limit))
    heap, log = [], []
    now = 0.0

    def act(actions):
        for a in actions:
            if isinstance(a, Start):
                heapq.heappush(heap, (now + supply[a.index % len(supply)][1], a.index))
                log.append(("start", a.index, a.prompt))
            elif isinstance(a, GroupDecision):
                log.append(tuple(a))

    act(step.start())
    try:
        while not step.done:
            now, index = heapq.heappop(heap)
            batch = [index]
            while heap and heap[0][0] == now:
                batch.append(heapq.heappop(heap)[1])
            items = []
            for i in batch:
                verdict = supply[i % len(supply)][0]
                items.append((i, verdict, None if verdict is T else (SPREAD if verdict is V else AGREE)))
            actions = step.finished(items)
            if actions and isinstance(actions[-1], StopRun):
                assert actions[-2] == actions[-1].error.decisions[-1] and actions[-2].reason == REASON_TECHNICAL
                return log, "stop"
            act(actions)
    except NotEnoughPromptsError:
        return log, "out of prompts"
    done = step.close()
    return log, (done.aborted, source.state_dict())


@st.composite
def runs(draw):
    target = draw(st.integers(1, 6))
    wave = draw(st.integers(target, 3 * target))
    supply = draw(st.lists(st.tuples(st.sampled_from([V, Z, T]), st.integers(0, 9).map(float)), min_size=1, max_size=40))
    return (supply, target, wave, draw(st.integers(1, 10)), draw(st.sampled_from(["seed", "skip"])),
            draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(runs())
def test_the_step_decides_and_starts_exactly_as_the_hand_written_loop(run):
    assert step_loop(*run) == hand_written_loop(*run)


def test_runs_first_k_from_a_staged_start_until_its_first_stage_is_reported():
    from shopsimrl.sampling.staged import StagedSiblings

    source = new_selector("seed", PROMPTS, 4, 0)
    step = RolloutStep(2, 4, source=source, sizer=FixedWaves(4), guard=ConsecutiveFailureGuard(8),
                       staging=StagedSiblings.of(4, 2, skip_q=1.0))
    starts = starts_of(step.start())  # no group is sure to spread (skip_q 1): every group starts its first K
    assert [s.siblings for s in starts] == [range(2)] * 4
    assert all(step.runs_first_k(s.index) for s in starts)
    (rest,) = step.first_stage(0, [1.0, 0.0])  # spread already: the rest starts
    assert rest.siblings == range(2, 4) and not step.runs_first_k(0)
    assert step.runs_first_k(1) and not step.runs_first_k(99)


def test_runs_first_k_is_never_true_without_staging():
    step, _ = fixed_step()
    assert not any(step.runs_first_k(s.index) for s in starts_of(step.start()))


# -- finished(): the one event a shell sends --------------------------------------------------------------------------
def staged_fixed_step(target=1, wave=4, limit=8):
    from shopsimrl.sampling.staged import StagedSiblings

    source = new_selector("seed", PROMPTS, 4, 0)
    return RolloutStep(target, wave, source=source, sizer=FixedWaves(4), guard=ConsecutiveFailureGuard(limit),
                       staging=StagedSiblings.of(4, 2, skip_q=1.0))


def test_finished_decides_whole_groups_first_then_first_stages_in_index_order_until_done():
    step = staged_fixed_step(target=1)
    step.start()
    for index in (0, 1):
        step.finished([FirstStage(index, [0.0, 1.0])])  # spread already: both rests start
    actions = step.finished([FirstStage(3, [0.0, 1.0]), (1, V, SPREAD), FirstStage(2, [1.0, 0.0]), (0, V, SPREAD)])
    decided = [(a.index, a.decision) for a in actions if isinstance(a, GroupDecision)]
    assert decided == [(0, Decision.ACCEPTED), (1, Decision.SURPLUS)]  # whole groups, in submission order
    assert actions[-1] == AbortRest((2, 3))  # the batch is full: the first stages back with it are aborted
    assert not [a for a in actions if isinstance(a, Start)] and step.runs_first_k(2) and step.runs_first_k(3)


def test_finished_hears_first_stages_in_index_order_whatever_order_they_came_in():
    step = staged_fixed_step(target=2, wave=4)
    step.start()
    actions = step.finished([FirstStage(2, [1.0, 0.0]), FirstStage(0, [0.0, 1.0])])
    assert [a.index for a in actions] == [0, 2] and all(isinstance(a, Start) for a in actions)


def test_finished_in_order_decides_a_batch_in_the_order_given():
    step, _ = fixed_step(target=1)
    step.start()
    actions = step.finished([(3, V, SPREAD), (1, V, SPREAD)], in_order=True)
    assert [(a.index, a.decision) for a in actions[:2]] == [(3, Decision.ACCEPTED), (1, Decision.SURPLUS)]


def test_finished_ends_with_stop_run_after_the_batch_decisions_up_to_the_trigger():
    step, _ = fixed_step(target=2, wave=4, limit=2)
    step.start()
    actions = step.finished([(0, V, SPREAD), (1, T, None), (2, T, None), (3, V, SPREAD)])
    assert isinstance(actions[-1], StopRun) and isinstance(actions[-1].error, TooManyTechnicalFailures)
    assert [(a.index, a.decision) for a in actions[:-1]] == [(0, Decision.ACCEPTED), (1, Decision.DROPPED),
                                                             (2, Decision.DROPPED)]
    assert list(actions[-1].error.decisions) == actions[:-1]


def test_finished_refuses_a_whole_group_still_in_its_first_stage_and_anything_once_done():
    from shopsimrl.sampling import ControllerStateError

    step = staged_fixed_step(target=1)
    step.start()
    with pytest.raises(ControllerStateError, match="first stage"):
        step.finished([(0, V, SPREAD)])
    step.finished([FirstStage(0, [0.0, 1.0])])
    step.finished([(0, V, SPREAD)])
    with pytest.raises(ControllerStateError, match="state DONE"):
        step.finished([FirstStage(1, [0.0, 1.0])])


def test_a_wave_opened_after_its_starts_carries_remaining():
    step, _ = fixed_step(target=2, wave=4)
    step.start()
    step.finished([(0, Z, AGREE)])  # remaining 3
    actions = step.finished([(1, Z, AGREE), (2, T, None)])  # remaining 1 < 2: a new wave of 4, remaining 5
    assert [type(a) for a in actions] == [GroupDecision, GroupDecision, Start, Start, Start, Start, WaveOpened]
    assert actions[-1] == WaveOpened(2, range(4, 8), 5)


def test_stopped_early_comes_just_before_its_decision():
    from shopsimrl.sampling.staged import StagedSiblings

    class Sure:
        """Every prompt is predicted to fail for sure: agreement after K is a stop."""

        def __init__(self):
            self.inner = new_selector("seed", PROMPTS, 4, 0)

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def predicted_logit(self, prompt):
            return (-30.0, 0.0)

        def predicted_zero_spread(self, prompt):
            return 1.0

    step = RolloutStep(2, 4, source=Sure(), sizer=FixedWaves(4), guard=ConsecutiveFailureGuard(8),
                       staging=StagedSiblings.of(4, 2))
    step.start()
    actions = step.finished([FirstStage(1, [0.0, 0.0])])
    assert actions[:2] == [StoppedEarly(1), GroupDecision(1, 1, Z, Decision.DROPPED, REASON_ZERO_STD, 3, 0)]
    assert step.close().stopped_early == [1]


def test_the_factory_picks_the_sizer_from_the_wave_mode():
    source = new_selector("skip", PROMPTS, 4, 0)
    assert isinstance(new_step(4, 8, 4, source=source).sizer, FixedWaves)
    adaptive = new_step(4, 8, 4, source=source, waves="adaptive", cushion=0.5)
    assert isinstance(adaptive.sizer, AdaptiveRefills) and adaptive.sizer.rule.cushion == 0.5
    with pytest.raises(ValueError, match="wavemode must be one of"):
        new_step(4, 8, 4, source=source, waves="sometimes")


def test_finished_refuses_a_first_stage_of_a_group_not_in_it_before_deciding_anything():
    from shopsimrl.sampling import ControllerStateError

    step = staged_fixed_step(target=2)
    step.start()
    step.finished([FirstStage(0, [0.0, 1.0])])  # its rest starts: no longer in its first stage
    with pytest.raises(ControllerStateError, match="group 0 is not in its first stage"):
        step.finished([(1, V, SPREAD), FirstStage(0, [0.0, 1.0])])
    assert step.kept == 0 and 1 in step.in_flight  # group 1 was not decided either
