"""One simulated training run: the real ``RolloutStep`` (controller, prompt source, wave sizer) over the simulated world.

Per step: groups are submitted (whole waves, or adaptive refills), finish after
their simulated duration, are filtered by the controller exactly as in the main
job, and their results go back to the selector; the kept informative groups then
train the simulated policy.  The step's events use the driver's event schema
(``wave`` / ``decision`` / ``abort`` with a time ``t``), so the same wave-timeline
picture draws both.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from shopsimrl.sampling import ConsecutiveFailureGuard, GroupDecision, Verdict
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, AdaptiveWaves, horizon_for_waves
from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD
from shopsimrl.sampling.knobs import SamplingKnobs
from shopsimrl.sampling.modes import DEFAULT_STRATEGY, DEFAULT_WAVE_MODE, WaveMode
from shopsimrl.sampling.selector import PromptSelector
from shopsimrl.sampling.source import prompt_source
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import AdaptiveRefills, FixedWaves, RolloutStep, Start, WaveSizer
from shopsimrl.sampling.verdict import reward_spread_verdict
from shopsimrl.simulate.model import World, WorldParams


@dataclass
class StepRecord:
    step: int
    submitted: int
    completed: int
    accepted: int  # informative groups kept (trained with a gradient)
    fallback: int  # zero-std groups kept by the fallback
    zero_std_dropped: int
    technical_dropped: int
    surplus: int
    aborted: int
    zero_spread_completed: int  # completed, scored groups with zero spread
    scored_completed: int
    successes: int  # successful episodes among completed scored groups
    all_wrong_completed: int
    waves: int
    wall_s: float
    mean_pass_rate: float  # over every prompt, after this step's update
    selector: dict[str, float]
    # the step-object shell (capacity model, staged siblings); None/0 on the default loop
    episodes: int | None = None  # episodes started (a staged group stopped early: K)
    stopped_early: int = 0  # staged groups decided as zero-std drops after K
    episodes_saved: int = 0  # their n − K siblings never started
    staged: int = 0  # groups started staged (K first)
    started_whole: int = 0  # staging skipped: predicted to spread
    judged_episodes: int | None = None  # episodes of the completed groups the filter judged

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RunResult:
    label: str
    selection: str
    waves: str
    steps: list[StepRecord]
    coverage: float
    initial_pass_rate: float
    timelines: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: every completed, scored group in order: (step, prompt id, zero spread) — for the persistence statistics
    groups: list[tuple[int, str, bool]] = field(default_factory=list)
    #: clustered worlds: each cluster's final mean pass rate, and how many clusters had a prompt generated
    cluster_pass_rates: list[float] = field(default_factory=list)
    clusters_generated: int | None = None

    def summary(self, n_samples_per_prompt: int) -> dict[str, float]:
        s = self.steps
        submitted = sum(r.submitted for r in s)
        kept = sum(r.accepted + r.fallback for r in s)
        accepted = sum(r.accepted for r in s)
        scored = sum(r.scored_completed for r in s)
        episodes = sum(r.submitted * n_samples_per_prompt if r.episodes is None else r.episodes for r in s)
        wall = sum(r.wall_s for r in s)
        return {
            "steps": len(s),
            "groups_submitted": submitted,
            "groups_trained": kept,
            "informative_trained": accepted,
            "informative_per_1k_generated_episodes": 1000.0 * accepted / episodes,
            "generated_per_trained_episode": episodes / (kept * n_samples_per_prompt),
            "informative_share_of_trained": accepted / kept,
            "zero_spread_share_of_completed": sum(r.zero_spread_completed for r in s) / scored if scored else 0.0,
            "initial_mean_pass_rate": self.initial_pass_rate,
            "final_mean_pass_rate": s[-1].mean_pass_rate,
            "coverage": self.coverage,
            "wall_time_s": wall,
            "mean_step_wall_s": wall / len(s),
            "wall_s_per_informative_group": wall / accepted if accepted else float("inf"),
            "generated_episodes": episodes,
            "stopped_early": sum(r.stopped_early for r in s),
            "episodes_saved_by_staging": sum(r.episodes_saved for r in s),
            **({"cluster_final_pass_min": min(self.cluster_pass_rates),
                "cluster_final_pass_median": median(self.cluster_pass_rates)} if self.cluster_pass_rates else {}),
            **({"clusters_generated": self.clusters_generated} if self.clusters_generated is not None else {}),
        }


def simulate_run(
    *,
    selection: str = DEFAULT_STRATEGY,
    waves: WaveMode | str = DEFAULT_WAVE_MODE,
    steps: int = 80,
    seed: int = 0,
    world: WorldParams | None = None,
    knobs: SamplingKnobs | None = None,
    explore_horizon_epochs: float | None = None,
    cushion: float = DEFAULT_CUSHION,
    keep_timelines: tuple[int, ...] = (),
    label: str | None = None,
    staging: StagedSiblings | None = None,
    capacity: float | None = None,
    labels: bool = True,
) -> RunResult:
    """Simulate ``steps`` rollout steps (and their training updates) with one strategy.

    ``selection``: ``seed``, ``informative``, ``oracle`` (reads the true pass rates: an upper bound), or
    ``seen-oracle`` (informative, but reads the true pass rates of the prompts it has observed: what better
    estimates could still win with the same exploration).  ``explore_horizon_epochs`` defaults to the
    wave mode's (``horizon_for_waves``).  ``staging`` (staged siblings) or ``capacity`` (episodes in flight
    share the engine's throughput, :mod:`~shopsimrl.simulate.capacity`) run each step on the step-object shell
    (:mod:`~shopsimrl.simulate.shell`); by default ``_simulate_step`` times groups without sharing.
    ``labels``: in a clustered world, the selector is told each prompt's cluster (``False``: it is not, as
    before clusters were known).
    """
    mode = WaveMode.parse(waves)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    knobs = knobs or SamplingKnobs()
    w = World(world or WorldParams(), seed)
    n = knobs.n_samples_per_prompt
    if len(w.prompt_ids) < knobs.over_sampling_batch_size:
        raise ValueError(f"{len(w.prompt_ids)} prompts cannot fill a wave of {knobs.over_sampling_batch_size}")
    if explore_horizon_epochs is None:
        explore_horizon_epochs = horizon_for_waves(mode)
    clusters = w.cluster_labels() if labels else None
    if selection == "oracle":
        from shopsimrl.simulate.oracle import OracleSelector

        selector: PromptSelector = OracleSelector(w, n, seed, clusters=clusters)
    elif selection == "seen-oracle":
        from shopsimrl.simulate.oracle import SeenOracleSelector

        selector = SeenOracleSelector(w, n, seed, explore_horizon_epochs=explore_horizon_epochs, clusters=clusters)
    else:
        selector = prompt_source(selection, w.prompt_ids, n, seed, explore_horizon_epochs=explore_horizon_epochs,
                                 clusters=clusters)
    guard = ConsecutiveFailureGuard(knobs.max_consecutive_failed_groups)
    sizer: WaveSizer = FixedWaves(n)
    if mode is WaveMode.ADAPTIVE:
        sizer = AdaptiveRefills(AdaptiveWaves(knobs.rollout_batch_size, knobs.over_sampling_batch_size, cushion), n)
    initial = w.mean_pass_rate()
    records: list[StepRecord] = []
    timelines: dict[int, list[dict[str, Any]]] = {}
    groups: list[tuple[int, str, bool]] = []
    for step in range(1, steps + 1):
        if staging is not None or capacity is not None:
            from shopsimrl.simulate.shell import simulate_step_shared

            record, events = simulate_step_shared(step, w, selector, guard, knobs, sizer, groups, staging=staging,
                                                  capacity=capacity)
        else:
            record, events = _simulate_step(step, w, selector, guard, knobs, sizer, groups)
        records.append(record)
        if step in keep_timelines:
            timelines[step] = events
    return RunResult(
        label=label or f"{selection}/{waves}" + ("+staged" if staging is not None else ""),
        selection=selection,
        waves=waves,
        steps=records,
        coverage=selector.coverage(),
        initial_pass_rate=initial,
        timelines=timelines,
        groups=groups,
        cluster_pass_rates=w.cluster_pass_rates() if w.clustered else [],
        clusters_generated=len({w.cluster(pid) for pid in selector.ever_chosen()}) if w.clustered else None,
    )


def _simulate_step(
    step: int,
    world: World,
    source: PromptSelector,
    guard: ConsecutiveFailureGuard,
    knobs: SamplingKnobs,
    sizer: WaveSizer,
    groups: list[tuple[int, str, bool]],
) -> tuple[StepRecord, list[dict[str, Any]]]:
    """One step: a shell around :class:`RolloutStep` (groups finish after their simulated duration)."""
    rollout = RolloutStep(knobs.rollout_batch_size, knobs.over_sampling_batch_size, source=source, sizer=sizer,
                          guard=guard)
    heap: list[tuple[float, int]] = []
    rewards_of: dict[int, list[float] | None] = {}
    events: list[dict[str, Any]] = [{"t": 0.0, "event": "step_start", "step": step}]
    now = 0.0

    def act(actions: list[Any]) -> None:
        started: list[Start] = []
        for action in actions:
            if type(action) is Start:
                rewards, duration = world.play_group(str(action.prompt), len(action.siblings))
                rewards_of[action.index] = rewards
                heapq.heappush(heap, (now + duration, action.index))
                started.append(action)
            elif type(action) is GroupDecision:
                events.append({"t": now, "event": "decision", "task_id": str(rollout.prompts[action.index]),
                               **action.as_dict()})
        if started:  # one wave (or refill) per event
            events.append({"t": now, "event": "wave", "wave": started[0].wave, "first_index": started[0].index,
                           "last_index": started[-1].index, "task_ids": [str(a.prompt) for a in started],
                           "remaining": rollout.controller.remaining})

    act(rollout.start())
    while not rollout.done:
        now, index = heapq.heappop(heap)
        batch = [index]
        while heap and heap[0][0] == now:
            batch.append(heapq.heappop(heap)[1])
        act(rollout.complete_batch([(i, _verdict(rewards_of[i]), rewards_of[i]) for i in batch]))
    done = rollout.close()  # results reach the selector at step end, as in the driver: no prompt twice in one step
    events.append({"t": now, "event": "abort", "aborted": done.aborted})

    aborted = set(done.aborted)
    completed = [i for i in rollout.prompts if i not in aborted]
    scored = [r for i in completed if (r := rewards_of[i]) is not None]
    for i in completed:
        r = rewards_of[i]
        if r is not None:
            groups.append((step, str(rollout.prompts[i]), _verdict(r) is Verdict.ZERO_STD))
    world.train([str(rollout.prompts[i]) for i in done.informative])
    stats = source.pop_stats()
    record = StepRecord(
        step=step,
        submitted=done.submitted,
        completed=done.completed,
        accepted=len(done.kept) - len(done.fallback),
        fallback=len(done.fallback),
        zero_std_dropped=len(done.dropped[REASON_ZERO_STD]),
        technical_dropped=len(done.dropped[REASON_TECHNICAL]),
        surplus=len(done.surplus),
        aborted=len(done.aborted),
        zero_spread_completed=sum(1 for r in scored if _verdict(r) is Verdict.ZERO_STD),
        scored_completed=len(scored),
        successes=int(sum(sum(r) for r in scored)),
        all_wrong_completed=sum(1 for r in scored if max(r) == 0.0),
        waves=done.waves,
        wall_s=now,
        mean_pass_rate=world.mean_pass_rate(),
        selector=stats,
    )
    return record, events


def _verdict(rewards: list[float] | None) -> Verdict:
    """The spread rule of docs/dynamic-sampling.md §2 (``reward_spread_verdict``); ``None``: technical."""
    return Verdict.TECHNICAL if rewards is None else reward_spread_verdict(rewards)
