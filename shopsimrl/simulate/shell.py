"""One simulated step as an I/O shell around :class:`~shopsimrl.sampling.step.RolloutStep`, under the capacity model.

The step object decides (waves or refills, the filter, ``remaining``, the fallback, abort,
staged siblings); this shell only draws the world's outcomes and times each episode on
:class:`~shopsimrl.simulate.capacity.SharedThroughput`.  A group's ``n`` rewards and solo
durations are drawn once, when it starts (the same draws as the default loop), so a
staged group's rest, when it runs, is the rest of the same group.  A staged group pays
two rounds of latency: its rest starts only when its first ``K`` are back.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.sampling import ConsecutiveFailureGuard, GroupDecision, Verdict
from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD
from shopsimrl.sampling.knobs import SamplingKnobs
from shopsimrl.sampling.selector import PromptSelector
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import AbortRest, RolloutStep, Start, WaveSizer
from shopsimrl.sampling.verdict import reward_spread_verdict
from shopsimrl.simulate.capacity import SharedThroughput
from shopsimrl.simulate.model import World


def simulate_step_shared(
    step: int,
    world: World,
    selector: PromptSelector,
    guard: ConsecutiveFailureGuard,
    knobs: SamplingKnobs,
    sizer: WaveSizer,
    groups: list[tuple[int, str, bool]],
    *,
    staging: StagedSiblings | None,
    capacity: float | None,
) -> tuple[Any, list[dict[str, Any]]]:
    """(the step's ``StepRecord``, its events)."""
    from shopsimrl.simulate.engine import StepRecord

    n = knobs.n_samples_per_prompt
    rs = RolloutStep(knobs.rollout_batch_size, knobs.over_sampling_batch_size, source=selector, sizer=sizer,
                     guard=guard, staging=staging)
    clock = SharedThroughput(capacity)
    drawn: dict[int, tuple[list[float] | None, list[float]]] = {}
    left: dict[tuple[int, int], int] = {}  # job (group, first sibling) -> episodes still running
    running: dict[tuple[int, int], list[tuple[tuple[int, int], int]]] = {}
    first_stages: set[tuple[int, int]] = set()  # jobs that are a staged group's first K
    judged: dict[int, list[float] | None] = {}  # rewards the filter saw (K for a group stopped early)
    events: list[dict[str, Any]] = [{"t": 0.0, "event": "step_start", "step": step}]
    episodes = 0
    now = 0.0

    def act(actions: list[Any]) -> None:
        nonlocal episodes
        starts: list[Start] = []
        for a in actions:
            if isinstance(a, Start):
                if a.index not in drawn:
                    drawn[a.index] = world.play_siblings(str(a.prompt), n)
                    starts.append(a)
                durations = drawn[a.index][1]
                job = (a.index, a.siblings.start)
                keys = [(job, s) for s in a.siblings]
                for key, s in zip(keys, a.siblings):
                    clock.start(key, durations[s])
                left[job], running[job] = len(keys), keys
                if a.siblings.stop < n:
                    first_stages.add(job)
                episodes += len(keys)
            elif isinstance(a, GroupDecision):
                events.append({"t": now, "event": "decision", "task_id": str(rs.prompts[a.index]), **a.as_dict()})
            elif isinstance(a, AbortRest):
                clock.cancel([key for job, keys in running.items() for key in keys if job[0] in a.indices])
        if starts:
            events.append({"t": now, "event": "wave", "wave": starts[0].wave, "first_index": starts[0].index,
                           "last_index": starts[-1].index, "task_ids": [str(s.prompt) for s in starts],
                           "remaining": rs.controller.remaining})

    act(rs.start())
    while not rs.done:
        now, finished = clock.next()
        jobs = []
        for job, _s in finished:
            left[job] -= 1
            if not left[job]:
                del left[job], running[job]
                jobs.append(job)
        for index, first in sorted(jobs):
            if rs.done:
                break  # the batch filled up: what else finished now is aborted with the rest
            rewards, _durations = drawn[index]
            if (index, first) in first_stages:
                assert staging is not None
                head = [None] * staging.stage_size if rewards is None else rewards[:staging.stage_size]
                actions = rs.first_stage(index, head)
                if any(isinstance(a, GroupDecision) for a in actions):
                    judged[index] = list(head)  # type: ignore[arg-type]
                act(actions)
                continue
            judged[index] = rewards
            act(rs.complete(index, _verdict(rewards), rewards))
    done = rs.close()
    events.append({"t": now, "event": "abort", "aborted": done.aborted})

    scored = [r for r in judged.values() if r is not None]
    for index, r in judged.items():
        if r is not None:
            groups.append((step, str(rs.prompts[index]), _verdict(r) is Verdict.ZERO_STD))
    world.train([str(rs.prompts[i]) for i in done.informative])
    stats = selector.pop_stats()
    counts = rs.stage_counts
    record = StepRecord(
        step=step, submitted=done.submitted, completed=done.completed, accepted=len(done.informative),
        fallback=len(done.fallback), zero_std_dropped=len(done.dropped[REASON_ZERO_STD]),
        technical_dropped=len(done.dropped[REASON_TECHNICAL]), surplus=len(done.surplus), aborted=len(done.aborted),
        zero_spread_completed=sum(1 for r in scored if _verdict(r) is Verdict.ZERO_STD), scored_completed=len(scored),
        successes=int(sum(sum(r) for r in scored)), all_wrong_completed=sum(1 for r in scored if max(r) == 0.0),
        waves=done.waves, wall_s=now, mean_pass_rate=world.mean_pass_rate(), selector=stats,
        episodes=episodes, stopped_early=counts["stopped_early"], episodes_saved=counts["episodes_saved"],
        staged=counts["staged"],
        started_whole=counts["whole"], judged_episodes=sum(len(r) for r in scored),
    )
    return record, events


def _verdict(rewards: list[float] | None) -> Verdict:
    return Verdict.TECHNICAL if rewards is None else reward_spread_verdict(rewards)

