"""One simulated training run: the real ``WaveController`` and ``PromptSelector`` over the simulated world.

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

from shopsimrl.sampling import ConsecutiveFailureGuard, Decision, Verdict, WaveController
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, AdaptiveWaves, horizon_for_waves
from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD
from shopsimrl.sampling.knobs import SamplingKnobs
from shopsimrl.sampling.selector import PromptSelector
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
        return {
            "steps": len(s),
            "groups_submitted": submitted,
            "groups_trained": kept,
            "informative_trained": accepted,
            "informative_per_1k_generated_episodes": 1000.0 * accepted / (submitted * n_samples_per_prompt),
            "generated_per_trained_episode": submitted / kept,
            "informative_share_of_trained": accepted / kept,
            "zero_spread_share_of_completed": sum(r.zero_spread_completed for r in s) / scored if scored else 0.0,
            "initial_mean_pass_rate": self.initial_pass_rate,
            "final_mean_pass_rate": s[-1].mean_pass_rate,
            "coverage": self.coverage,
            "wall_time_s": sum(r.wall_s for r in s),
            "mean_step_wall_s": sum(r.wall_s for r in s) / len(s),
            **({"cluster_final_pass_min": min(self.cluster_pass_rates),
                "cluster_final_pass_median": median(self.cluster_pass_rates)} if self.cluster_pass_rates else {}),
            **({"clusters_generated": self.clusters_generated} if self.clusters_generated is not None else {}),
        }


def simulate_run(
    *,
    selection: str = "seed",
    waves: str = "fixed",
    steps: int = 80,
    seed: int = 0,
    world: WorldParams | None = None,
    knobs: SamplingKnobs | None = None,
    explore_horizon_epochs: float | None = None,
    cushion: float = DEFAULT_CUSHION,
    keep_timelines: tuple[int, ...] = (),
    label: str | None = None,
    labels: bool = True,
) -> RunResult:
    """Simulate ``steps`` rollout steps (and their training updates) with one strategy.

    ``selection``: ``seed``, ``informative``, ``oracle`` (reads the true pass rates: an upper bound), or
    ``seen-oracle`` (informative, but reads the true pass rates of the prompts it has observed: what better
    estimates could still win with the same exploration).  ``explore_horizon_epochs`` defaults to the
    wave mode's (``horizon_for_waves``).  ``labels``: in a clustered world, the selector is told each prompt's
    cluster (``False``: it is not, as before clusters were known).
    """
    if waves not in ("fixed", "adaptive"):
        raise ValueError(f"waves must be 'fixed' or 'adaptive', got {waves!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    knobs = knobs or SamplingKnobs()
    w = World(world or WorldParams(), seed)
    n = knobs.n_samples_per_prompt
    if len(w.prompt_ids) < knobs.over_sampling_batch_size:
        raise ValueError(f"{len(w.prompt_ids)} prompts cannot fill a wave of {knobs.over_sampling_batch_size}")
    if explore_horizon_epochs is None:
        explore_horizon_epochs = horizon_for_waves(waves)
    clusters = w.cluster_labels() if labels else None
    if selection == "oracle":
        from shopsimrl.simulate.oracle import OracleSelector

        selector: PromptSelector = OracleSelector(w, n, seed, clusters=clusters)
    elif selection == "seen-oracle":
        from shopsimrl.simulate.oracle import SeenOracleSelector

        selector = SeenOracleSelector(w, n, seed, explore_horizon_epochs=explore_horizon_epochs, clusters=clusters)
    else:
        selector = PromptSelector(w.prompt_ids, n, selection, seed, explore_horizon_epochs=explore_horizon_epochs,
                                  clusters=clusters)
    guard = ConsecutiveFailureGuard(knobs.max_consecutive_failed_groups)
    sizer = AdaptiveWaves(knobs.rollout_batch_size, knobs.over_sampling_batch_size, cushion)
    initial = w.mean_pass_rate()
    records: list[StepRecord] = []
    timelines: dict[int, list[dict[str, Any]]] = {}
    groups: list[tuple[int, str, bool]] = []
    for step in range(1, steps + 1):
        record, events = _simulate_step(step, w, selector, guard, knobs, sizer if waves == "adaptive" else None,
                                        groups)
        records.append(record)
        if step in keep_timelines:
            timelines[step] = events
    return RunResult(
        label=label or f"{selection}/{waves}",
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
    selector: PromptSelector,
    guard: ConsecutiveFailureGuard,
    knobs: SamplingKnobs,
    sizer: AdaptiveWaves | None,
    groups: list[tuple[int, str, bool]],
) -> tuple[StepRecord, list[dict[str, Any]]]:
    n = knobs.n_samples_per_prompt
    ctrl = WaveController(knobs.rollout_batch_size, knobs.over_sampling_batch_size, guard=guard)
    heap: list[tuple[float, int]] = []
    prompt_of: dict[int, str] = {}
    rewards_of: dict[int, list[float] | None] = {}
    q_of: dict[int, float] = {}
    feedback: list[tuple[str, Decision, list[float] | None]] = []
    events: list[dict[str, Any]] = [{"t": 0.0, "event": "step_start", "step": step}]
    now = 0.0

    def launch(indices: range, prompts: list[str]) -> None:
        for index, pid in zip(indices, prompts):
            rewards, duration = world.play_group(pid, n)
            prompt_of[index], rewards_of[index] = pid, rewards
            heapq.heappush(heap, (now + duration, index))
        events.append({"t": now, "event": "wave", "wave": ctrl.wave_of(indices[0]), "first_index": indices[0],
                       "last_index": indices[-1], "task_ids": list(prompts), "remaining": ctrl.remaining})

    def submit() -> None:
        if sizer is None:
            new = ctrl.submit()
            if new:
                launch(new, [str(p) for p in selector.next_prompts(len(new))])
            return
        picks = sizer.choose(len(ctrl.kept), [q_of[i] for i in ctrl.in_flight], selector.next_prompt, ctrl.submitted)
        if picks:
            new = ctrl.refill(len(picks))
            for index, (_, q) in zip(new, picks):
                q_of[index] = q
            launch(new, [str(pid) for pid, _ in picks])

    submit()
    while not ctrl.done:
        now, index = heapq.heappop(heap)
        batch = [index]
        while heap and heap[0][0] == now:
            batch.append(heapq.heappop(heap)[1])
        verdicts = [(i, _verdict(rewards_of[i])) for i in batch]
        for d in ctrl.complete_batch(verdicts):
            pid = prompt_of[d.index]
            feedback.append((pid, d.decision, rewards_of[d.index]))
            events.append({"t": now, "event": "decision", "task_id": pid, **d.as_dict()})
        if not ctrl.done:
            submit()
    aborted = ctrl.abort()
    for index in aborted:
        selector.release(prompt_of[index])
    # results reach the selector at step end, as in the driver: no prompt twice in one step
    for pid, decision, rewards in feedback:
        selector.settle(pid, rewards, surplus=decision is Decision.SURPLUS)
    events.append({"t": now, "event": "abort", "aborted": aborted})

    completed = [i for i in prompt_of if i not in set(aborted)]
    scored = [rewards_of[i] for i in completed if rewards_of[i] is not None]
    for i in completed:
        r = rewards_of[i]
        if r is not None:
            groups.append((step, prompt_of[i], max(r) - min(r) <= 1e-6))
    informative = [prompt_of[i] for i in ctrl.kept if i not in set(ctrl.fallback)]
    world.train(informative)
    stats = selector.pop_stats()
    record = StepRecord(
        step=step,
        submitted=ctrl.submitted,
        completed=ctrl.completed,
        accepted=len(ctrl.kept) - len(ctrl.fallback),
        fallback=len(ctrl.fallback),
        zero_std_dropped=len(ctrl.dropped[REASON_ZERO_STD]),
        technical_dropped=len(ctrl.dropped[REASON_TECHNICAL]),
        surplus=len(ctrl.surplus),
        aborted=len(aborted),
        zero_spread_completed=sum(1 for r in scored if max(r) == min(r)),
        scored_completed=len(scored),
        successes=int(sum(sum(r) for r in scored)),
        all_wrong_completed=sum(1 for r in scored if max(r) == 0.0),
        waves=ctrl.waves,
        wall_s=now,
        mean_pass_rate=world.mean_pass_rate(),
        selector=stats,
    )
    return record, events


def _verdict(rewards: list[float] | None) -> Verdict:
    if rewards is None:
        return Verdict.TECHNICAL
    return Verdict.ZERO_STD if max(rewards) - min(rewards) <= 1e-6 else Verdict.VARIED
