"""One simulated training run: the real ``RolloutStep`` (controller, selector, wave sizer) over the simulated world.

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

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from shopsimrl.defaults import DEFAULT_CUSHION
from shopsimrl.rollout.loops import (
    DEFAULT_TRAINING_LOOP,
    POLICY_LAG,
    LaggedTrainer,
    TrainingLoop,
    TrainTiming,
    loop_wall_s,
)
from shopsimrl.sampling import ConsecutiveFailureGuard, GroupDecision, Verdict
from shopsimrl.sampling.adaptive import horizon_for_waves
from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD
from shopsimrl.sampling.knobs import SamplingKnobs
from shopsimrl.sampling.modes import DEFAULT_SELECTION, DEFAULT_WAVE_MODE, WaveMode
from shopsimrl.sampling.pump import Hooks, pump
from shopsimrl.sampling.selector import RuleSelector
from shopsimrl.sampling.source import new_selector
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import RolloutStep, Start, StepDone, WaveOpened, new_step
from shopsimrl.sampling.verdict import reward_spread_verdict, rewards_verdict
from shopsimrl.simulate.events import StepEvents
from shopsimrl.simulate.inflight import GroupsInFlight
from shopsimrl.simulate.model import World, WorldParams
from shopsimrl.simulate.oracle import Oracle, OracleSelector, SeenOracleSelector


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
    #: worlds with directions: each kind's mean pass rate at the start and at the end (kind 0: the majority)
    kind_pass_rates_initial: list[float] = field(default_factory=list)
    kind_pass_rates: list[float] = field(default_factory=list)
    #: worlds with directions: informative groups trained per kind, per step
    trained_kinds: list[list[int]] = field(default_factory=list)
    #: slime's loop that ran the steps (``async``: each rollout on weights one training step older)
    loop: str = DEFAULT_TRAINING_LOOP.value
    #: training and weight-sync seconds per step: the summary then times the loop (``None``: rollouts only)
    timing: TrainTiming | None = None

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
            **({f"kind_{k}_{when}_pass_rate": rate for when, rates in (("initial", self.kind_pass_rates_initial),
                                                                       ("final", self.kind_pass_rates))
                for k, rate in enumerate(rates)} if self.kind_pass_rates else {}),
            **({"kind_0_share_of_trained_after_step_10": _share_after(self.trained_kinds, 10)}
               if self.trained_kinds else {}),
            **(self._loop_summary(self.timing, accepted) if self.timing is not None else {}),
        }

    def _loop_summary(self, timing: TrainTiming, accepted: int) -> dict[str, float]:
        """The loop's figures: ``wall_time_s`` and its kin above time the rollouts alone."""
        wall = loop_wall_s(self.loop, [r.wall_s for r in self.steps], timing)
        return {"train_s_per_step": timing.train_s, "weight_sync_s": timing.weight_sync_s,
                "loop_wall_time_s": wall, "loop_mean_step_wall_s": wall / len(self.steps),
                "loop_wall_s_per_informative_group": wall / accepted if accepted else float("inf")}


def simulate_run(
    *,
    selection: str = DEFAULT_SELECTION,
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
    loop: TrainingLoop | str = DEFAULT_TRAINING_LOOP,
    timing: TrainTiming | None = None,
) -> RunResult:
    """Simulate ``steps`` rollout steps (and their training updates) with one selection.

    ``selection``: ``seed``, ``informative``, ``oracle`` (reads the true pass rates: an upper bound), or
    ``seen-oracle`` (informative, but reads the true pass rates of the prompts it has observed: what better
    estimates could still win with the same exploration).  ``explore_horizon_epochs`` defaults to the
    wave mode's (``horizon_for_waves``).  ``staging``: staged siblings; ``capacity``: episodes in flight
    share the engine's throughput (:mod:`~shopsimrl.simulate.capacity`; ``None``, the default: no sharing).
    ``labels``: in a clustered world, the selector is told each prompt's cluster (``False``: it is not, as
    before clusters were known).  ``loop``: slime's ``train.py`` (``sync``, the default) or ``train_async.py``
    (``async``: each rollout runs on the weights of one training step earlier, :mod:`~shopsimrl.rollout.loops`);
    ``timing``: training and weight-sync seconds per step, which add the loop's wall time to the summary.
    """
    mode = WaveMode.parse(waves)
    training_loop = TrainingLoop.parse(loop)
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
    if selection == Oracle.TRUE:
        selector: RuleSelector = OracleSelector(w, n, seed, clusters=clusters)
    elif selection == Oracle.SEEN:
        selector = SeenOracleSelector(w, n, seed, explore_horizon_epochs=explore_horizon_epochs, clusters=clusters)
    else:
        selector = new_selector(selection, w.prompt_ids, n, seed, waves=mode,
                                 explore_horizon_epochs=explore_horizon_epochs, clusters=clusters)
    guard = ConsecutiveFailureGuard(knobs.max_consecutive_failed_groups)
    initial = w.mean_pass_rate()
    kinds_initial = w.kind_pass_rates() if w.stance is not None else []
    records: list[StepRecord] = []
    timelines: dict[int, list[dict[str, Any]]] = {}
    groups: list[tuple[int, str, bool]] = []
    trainer = LaggedTrainer(w.train, POLICY_LAG[training_loop])
    for step in range(1, steps + 1):
        record, events = simulate_step(step, w, selector, guard, knobs, groups, waves=mode, cushion=cushion,
                                        staging=staging, capacity=capacity, train=trainer)
        records.append(record)
        if step in keep_timelines:
            timelines[step] = events
    if trainer.flush():  # the last steps train after the last rollout: the final record counts them
        records[-1].mean_pass_rate = w.mean_pass_rate()
    return RunResult(
        label=label or f"{selection}/{waves}" + ("+staged" if staging is not None else "")
        + ("" if training_loop is DEFAULT_TRAINING_LOOP else f"+{training_loop}"),
        selection=selection,
        waves=waves,
        steps=records,
        coverage=selector.coverage(),
        initial_pass_rate=initial,
        timelines=timelines,
        groups=groups,
        cluster_pass_rates=w.cluster_pass_rates() if w.clustered else [],
        clusters_generated=len({w.cluster(pid) for pid in selector.ever_chosen()}) if w.clustered else None,
        kind_pass_rates_initial=kinds_initial,
        kind_pass_rates=w.kind_pass_rates() if w.stance is not None else [],
        trained_kinds=w.trained_kinds,
        loop=training_loop.value,
        timing=timing,
    )


def _share_after(per_step: list[list[int]], step: int) -> float:
    """Kind 0's share of the informative groups trained after ``step`` (the learner's exploration is over by 10)."""
    late = per_step[step:]
    total = sum(sum(c) for c in late)
    return sum(c[0] for c in late) / total if total else float("nan")


def simulate_step(
    step: int,
    world: World,
    source: RuleSelector,
    guard: ConsecutiveFailureGuard,
    knobs: SamplingKnobs,
    groups: list[tuple[int, str, bool]],
    *,
    waves: WaveMode = DEFAULT_WAVE_MODE,
    cushion: float = DEFAULT_CUSHION,
    staging: StagedSiblings | None = None,
    capacity: float | None = None,
    train: Callable[[list[str]], None] | None = None,
) -> tuple[StepRecord, list[dict[str, Any]]]:
    """One step: a pump around :class:`RolloutStep`, which decides everything (waves or refills, the filter, the
    fallback, the abort, staged siblings); :class:`GroupsInFlight` plays and times the groups it starts.  Groups
    that finish at one instant come back together.  ``train`` takes the kept informative groups' prompts (default:
    the world trains on them at once, as ``train.py`` does before the next rollout)."""
    rs = new_step(knobs.rollout_batch_size, knobs.over_sampling_batch_size, knobs.n_samples_per_prompt,
                  source=source, waves=waves, cushion=cushion, staging=staging, guard=guard)
    shell = _Simulated(rs, GroupsInFlight(world, knobs.n_samples_per_prompt, capacity), source, StepEvents(step))
    done = pump(rs, shell)  # results reach the selector at step end, as in the driver: no prompt twice in one step
    scored = _learn(step, rs.prompts, done, shell.judged, train or world.train, groups, shell.weights)
    record = _record(step, done, scored, rs.stage_counts, episodes=shell.flight.episodes, wall_s=shell.now(),
                     mean_pass_rate=world.mean_pass_rate(), selector=source.pop_stats())
    return record, shell.log.events


class _Simulated(Hooks):
    """The simulator's shell: :class:`GroupsInFlight` plays and times the groups the step starts; groups that finish
    at one instant come back together.  It keeps the rewards the filter judged (``K`` for a group stopped early)
    and the source's importance weight of each group's hand-out."""

    def __init__(self, step: RolloutStep, flight: GroupsInFlight, source: RuleSelector, log: StepEvents) -> None:
        self.step, self.flight, self.source, self.log = step, flight, source, log
        self.judged: dict[int, list[float] | None] = {}  # rewards the filter saw (K for a group stopped early)
        self.weights: dict[int, float] = {}  # the source's importance weight of each group's hand-out
        self.opening: list[Start] = []  # the new groups of the wave being opened
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        self.weights.setdefault(start.index, self.source.weight(start.prompt))  # a staged rest: its first's
        if self.flight.start(start):
            self.opening.append(start)

    def next_finished(self) -> list[int]:
        self.t, ended = self.flight.next()
        return ended

    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        rewards = self.judged[index] = self.flight.rewards(index)
        return rewards_verdict(rewards), rewards

    def measure_first_k(self, index: int) -> list[float | None]:
        return self.flight.first_rewards(index)

    def cancel(self, indices: tuple[int, ...]) -> None:
        self.flight.cancel(indices)

    def opened(self, wave: WaveOpened, t: float) -> None:
        self.log.wave(t, self.opening, wave.remaining)
        self.opening = []

    def decided(self, decision: GroupDecision, t: float) -> None:
        self.log.decision(t, self.step.prompts[decision.index], decision)

    def stopped_early(self, index: int, t: float) -> None:
        self.judged[index] = self.flight.first_rewards(index)  # type: ignore[assignment]  # all K scored

    def closed(self, done: StepDone, t: float) -> None:
        self.log.abort(t, done.aborted)


def _learn(step: int, prompts: dict[int, Any], done: StepDone, judged: dict[int, list[float] | None],
           train: Callable[[list[str]], None], groups: list[tuple[int, str, bool]],
           weights: dict[int, float]) -> list[list[float]]:
    """The step's end: the judged, scored groups join ``groups`` (the persistence statistics) and the kept
    informative groups go to ``train`` (the world's policy), each as many times as its importance weight (the
    learner multiplies its advantages by it; the skip rule's weights are whole numbers: 4 and 5).  Returns
    the scored groups' rewards, in index order."""
    scored = {i: r for i in sorted(judged) if (r := judged[i]) is not None}
    groups.extend((step, str(prompts[i]), reward_spread_verdict(r) is Verdict.ZERO_STD) for i, r in scored.items())
    train([str(prompts[i]) for i in done.informative for _ in range(max(1, round(weights.get(i, 1.0))))])
    return list(scored.values())


def _record(step: int, done: StepDone, scored: list[list[float]], counts: dict[str, int], *, episodes: int,
            wall_s: float, mean_pass_rate: float, selector: dict[str, float]) -> StepRecord:
    """The step's counts, from its outcome and the rewards of the groups the filter judged."""
    return StepRecord(
        step=step, submitted=done.submitted, completed=done.completed, accepted=len(done.informative),
        fallback=len(done.fallback), zero_std_dropped=len(done.dropped[REASON_ZERO_STD]),
        technical_dropped=len(done.dropped[REASON_TECHNICAL]), surplus=len(done.surplus), aborted=len(done.aborted),
        zero_spread_completed=sum(1 for r in scored if reward_spread_verdict(r) is Verdict.ZERO_STD),
        scored_completed=len(scored), successes=int(sum(sum(r) for r in scored)),
        all_wrong_completed=sum(1 for r in scored if max(r) == 0.0), waves=done.waves, wall_s=wall_s,
        mean_pass_rate=mean_pass_rate, selector=selector, episodes=episodes, stopped_early=counts["stopped_early"],
        episodes_saved=counts["episodes_saved"], staged=counts["staged"], started_whole=counts["whole"],
        judged_episodes=sum(len(r) for r in scored),
    )
