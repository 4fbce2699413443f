"""One simulated training run: the real ``RolloutStep`` (controller, prompt source, wave sizer) over the simulated world.

Per step: groups are submitted (whole waves, or adaptive refills), finish after
their simulated duration, are filtered by the controller exactly as in the main
job, and their results go back to the selector; the kept informative groups then
train the simulated policy.  One loop times every mode: each episode runs on the
capacity model's clock (no capacity: no sharing), and staged siblings are the step
object's business.  The step's events use the driver's event schema
(``wave`` / ``decision`` / ``abort`` with a time ``t``), so the same wave-timeline
picture draws both.
"""

from __future__ import annotations

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
from shopsimrl.sampling.step import AbortRest, AdaptiveRefills, FixedWaves, RolloutStep, Start, WaveSizer
from shopsimrl.sampling.verdict import reward_spread_verdict
from shopsimrl.simulate.capacity import SharedThroughput
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
    episodes: int = 0  # episodes started (a staged group stopped early: K)
    # staged siblings (0 without them)
    stopped_early: int = 0  # staged groups decided as zero-std drops after K
    episodes_saved: int = 0  # their n − K siblings never started
    staged: int = 0  # groups started staged (K first)
    started_whole: int = 0  # staging skipped: predicted to spread
    judged_episodes: int = 0  # episodes of the completed groups the filter judged

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
        episodes = sum(r.episodes for r in s)
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
    wave mode's (``horizon_for_waves``).  ``staging``: staged siblings; ``capacity``: episodes in flight
    share the engine's throughput (:mod:`~shopsimrl.simulate.capacity`; ``None``, the default: no sharing).
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
        record, events = _simulate_step(step, w, selector, guard, knobs, sizer, groups, staging=staging,
                                        capacity=capacity)
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
    *,
    staging: StagedSiblings | None = None,
    capacity: float | None = None,
) -> tuple[StepRecord, list[dict[str, Any]]]:
    """One step: an I/O shell around :class:`RolloutStep`, which decides everything (waves or refills, the
    filter, the fallback, the abort, staged siblings).  The shell draws each group's ``n`` rewards and solo
    durations once, when it starts (a staged group's rest is the rest of the same group), and times every
    episode on :class:`SharedThroughput` (``capacity=None``: no sharing, a group takes its slowest sibling).
    Groups that finish at one instant are one batch; a staged group's first ``K`` report after them."""
    n = knobs.n_samples_per_prompt
    rs = RolloutStep(knobs.rollout_batch_size, knobs.over_sampling_batch_size, source=source, sizer=sizer,
                     guard=guard, staging=staging)
    clock = SharedThroughput(capacity)
    drawn: dict[int, tuple[list[float] | None, list[float]]] = {}
    running: dict[tuple[int, int], list[tuple[tuple[int, int], int]]] = {}  # job (group, first sibling): episodes
    left: dict[tuple[int, int], int] = {}  # job -> its episodes still running
    heads: set[int] = set()  # groups whose first K are out (staged)
    judged: dict[int, list[float] | None] = {}  # rewards the filter saw (K for a group stopped early)
    events: list[dict[str, Any]] = [{"t": 0.0, "event": "step_start", "step": step}]
    episodes, now = 0, 0.0

    def act(actions: list[Any]) -> None:
        nonlocal episodes
        starts: list[Start] = []
        for a in actions:
            if type(a) is Start:
                if a.index not in drawn:
                    drawn[a.index] = world.play_siblings(str(a.prompt), n)
                    starts.append(a)
                job, durations = (a.index, a.siblings.start), drawn[a.index][1]
                running[job] = [(job, s) for s in a.siblings]
                for key in running[job]:
                    clock.start(key, durations[key[1]])
                left[job] = len(a.siblings)
                episodes += len(a.siblings)
                if a.siblings.stop < n:
                    heads.add(a.index)
            elif type(a) is GroupDecision:
                events.append({"t": now, "event": "decision", "task_id": str(rs.prompts[a.index]), **a.as_dict()})
            elif type(a) is AbortRest:
                clock.cancel([key for job, keys in running.items() if job[0] in a.indices for key in keys])
        if starts:  # one wave (or refill) per event
            events.append({"t": now, "event": "wave", "wave": starts[0].wave, "first_index": starts[0].index,
                           "last_index": starts[-1].index, "task_ids": [str(s.prompt) for s in starts],
                           "remaining": rs.controller.remaining})

    act(rs.start())
    while not rs.done:
        now, finished = clock.next()
        ended = []
        for job, _s in finished:
            left[job] -= 1
            if not left[job]:
                del left[job], running[job]
                ended.append(job[0])
        whole = sorted(i for i in ended if i not in heads)
        if whole:
            judged.update((i, drawn[i][0]) for i in whole)
            act(rs.complete_batch([(i, _verdict(drawn[i][0]), drawn[i][0]) for i in whole]))
        for index in sorted(i for i in ended if i in heads):
            heads.discard(index)
            if rs.done:
                break  # the batch filled up: what else finished now is aborted with the rest
            assert staging is not None
            rewards = drawn[index][0]
            head = [None] * staging.stage_size if rewards is None else rewards[:staging.stage_size]
            actions = rs.first_stage(index, head)
            if any(type(a) is GroupDecision for a in actions):
                judged[index] = list(head)  # type: ignore[arg-type]
            act(actions)
    done = rs.close()  # results reach the selector at step end, as in the driver: no prompt twice in one step
    events.append({"t": now, "event": "abort", "aborted": done.aborted})

    scored = [r for i in sorted(judged) if (r := judged[i]) is not None]
    groups.extend((step, str(rs.prompts[i]), _verdict(r) is Verdict.ZERO_STD)
                  for i in sorted(judged) if (r := judged[i]) is not None)
    world.train([str(rs.prompts[i]) for i in done.informative])
    counts = rs.stage_counts
    record = StepRecord(
        step=step, submitted=done.submitted, completed=done.completed, accepted=len(done.informative),
        fallback=len(done.fallback), zero_std_dropped=len(done.dropped[REASON_ZERO_STD]),
        technical_dropped=len(done.dropped[REASON_TECHNICAL]), surplus=len(done.surplus), aborted=len(done.aborted),
        zero_spread_completed=sum(1 for r in scored if _verdict(r) is Verdict.ZERO_STD), scored_completed=len(scored),
        successes=int(sum(sum(r) for r in scored)), all_wrong_completed=sum(1 for r in scored if max(r) == 0.0),
        waves=done.waves, wall_s=now, mean_pass_rate=world.mean_pass_rate(), selector=source.pop_stats(),
        episodes=episodes, stopped_early=counts["stopped_early"], episodes_saved=counts["episodes_saved"],
        staged=counts["staged"], started_whole=counts["whole"], judged_episodes=sum(len(r) for r in scored),
    )
    return record, events


def _verdict(rewards: list[float] | None) -> Verdict:
    """The spread rule of docs/dynamic-sampling.md §2 (``reward_spread_verdict``); ``None``: technical."""
    return Verdict.TECHNICAL if rewards is None else reward_spread_verdict(rewards)
