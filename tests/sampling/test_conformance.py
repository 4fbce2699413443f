"""Every shell is a pump around ``RolloutStep``: the same scripted supply gives the same step in each.

In the style of Gymnasium's ``check_env``: one scripted supply (each group's rewards and its siblings'
durations, by submission index; random, seeded) runs through the four shells, each with its own I/O
replaced by a virtual clock that finishes jobs at ``start + slowest sibling`` (jobs ending at one instant
come back together, in a shuffled order):

- the main job's driver (``rollout/driver.py``), its asyncio tasks replaced by :class:`ScriptedTasks`;
- slime's rollout function (``slime/rollout_fn.py``), slime's generation replaced by :class:`ScriptedGeneration`
  and slime's modules by stand-ins;
- the simulator's step (``simulate/engine.py``), its world replaced by :class:`ScriptedWorld`;
- ``replay`` (fixed waves, whole groups only: the shell that times a supply of verdicts).

Each run yields the decisions (index, decision, reason, remaining, kept) in order, the aborted groups,
the groups decided after their first ``K`` and the consecutive-failure stop (the trigger and the streak).
The shells that can run a case (replay: fixed, unstaged; slime's rollout function: adaptive) must agree
on all of it.  ``check_prompt_source`` is run on the source of every ``Strategy``.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.io import read_jsonl
from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.driver import StepDriver
from shopsimrl.rollout.group import EpisodeSlots, EpisodeSpec, GroupRun, classify, episode_seed
from shopsimrl.rollout.outputs import prepare_run_dir
from shopsimrl.rollout.tasks import GroupTasks
from shopsimrl.sampling import ConsecutiveFailureGuard, SamplingKnobs, TooManyTechnicalFailures, Verdict, replay
from shopsimrl.sampling.conformance import SourceContractError, check_prompt_source
from shopsimrl.sampling.modes import Strategy
from shopsimrl.sampling.source import prompt_source
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import Start
from shopsimrl.sampling.verdict import group_verdict

PROMPTS = [f"task-{i:03d}" for i in range(400)]


# -- the scripted supply ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    target: int
    wave: int
    n: int
    waves: str
    staged: bool
    limit: int
    seed: int
    technical: float  # chance that a group is unscored (every sibling)
    strategy: str = "informative"

    def play(self, index: int) -> tuple[list[float] | None, list[float]]:
        """Group ``index``'s rewards (``None``: technical) and its siblings' durations."""
        rng = random.Random(f"{self.seed}:{index}")
        durations = [float(rng.randint(1, 4)) for _ in range(self.n)]
        kind = rng.random()
        if kind < self.technical:
            return None, durations
        if kind < self.technical + (1 - self.technical) / 2:  # all siblings agree: zero spread
            return [float(rng.random() < 0.5)] * self.n, durations
        return [float(rng.random() < 0.5) for _ in range(self.n)], durations

    def staging(self) -> StagedSiblings | None:
        # threshold 1: decided after K whenever the K agree and the fallback could not keep the group
        return StagedSiblings(self.n, self.n // 2, threshold=1.0, skip_q=1.0) if self.staged else None

    def knobs(self) -> SamplingKnobs:
        return SamplingKnobs(rollout_batch_size=self.target, n_samples_per_prompt=self.n,
                             over_sampling_batch_size=self.wave, global_batch_size=self.n,
                             max_consecutive_failed_groups=self.limit)

    def source(self) -> Any:
        return prompt_source(self.strategy, PROMPTS, self.n, self.seed)


class Clock:
    """The virtual clock every scripted shell shares: a job (a group's siblings started together) ends at its
    start time plus its slowest sibling; the jobs ending first come back together, shuffled."""

    def __init__(self, case: Case) -> None:
        self.case, self.now = case, 0.0
        self.heap: list[tuple[float, int]] = []
        self.shuffle = random.Random(case.seed)

    def start(self, index: int, siblings: range) -> None:
        durations = self.case.play(index)[1]
        heapq.heappush(self.heap, (self.now + max(durations[s] for s in siblings), index))

    def cancel(self, indices: set[int]) -> None:
        self.heap = [job for job in self.heap if job[1] not in indices]
        heapq.heapify(self.heap)

    def next(self) -> list[int]:
        self.now, index = heapq.heappop(self.heap)
        ended = [index]
        while self.heap and self.heap[0][0] == self.now:
            ended.append(heapq.heappop(self.heap)[1])
        self.shuffle.shuffle(ended)
        return ended


@dataclass
class Outcome:
    """What a shell made of the supply: comparable across shells."""

    decisions: list[tuple[int, str, str | None, int, int]] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    stopped_early: int = 0  # staged groups decided after their first K
    stop: tuple[int, int] | None = None  # the consecutive-failure stop: (the trigger's index, the streak)


def stopped(exc: TooManyTechnicalFailures) -> Outcome:
    """A run the stop ended: its trigger and streak are what every shell must agree on."""
    return Outcome(stop=(exc.decisions[-1].index, exc.count))


# -- the driver --------------------------------------------------------------------------------------------------
def episode(spec: EpisodeSpec, reward: float | None) -> EpisodeResult:
    return EpisodeResult(task_id=spec.task_id, rollout_id=spec.rollout_id, seed=spec.seed, policy="scripted",
                         scored=reward is not None, reward=reward, strict_reward=reward,
                         success=None if reward is None else float(reward == 1.0),
                         end_reason="purchase" if reward is not None else None,
                         error=None if reward is not None else {"type": "EnvError", "message": "scripted",
                                                                 "stage": "step"},
                         turns=1, env_steps=1, wall_seconds=0.0)


class ScriptedTasks(GroupTasks):
    """The driver's groups on the virtual clock: no asyncio task, the episodes are the script's."""

    def __init__(self, case: Case, *args: Any) -> None:
        super().__init__(*args)
        self.case, self.clock = case, Clock(case)
        self.pending: dict[int, list[EpisodeSpec]] = {}  # group -> the specs of its running job

    def start(self, start: Start, *, first_stage: bool = False) -> GroupRun | None:
        index, task_id = start.index, str(start.prompt)
        specs = [EpisodeSpec(task_id=task_id, rollout_id=f"s{self.step}-g{index}-r{i}",
                             seed=episode_seed(self.ctx.seed, self.step, index, i), trace_path=None,
                             group_index=index, sibling=i) for i in start.siblings]
        new = index not in self.groups
        if new:
            self.groups[index] = GroupRun(index=index, wave=start.wave, task_id=task_id, specs=[])
        self.pending[index] = specs
        self.clock.start(index, start.siblings)
        return self.groups[index] if new else None

    async def next_batch(self) -> list[GroupRun]:
        finished = []
        for index in self.clock.next():
            group, specs = self.groups[index], self.pending.pop(index)
            rewards = self.case.play(index)[0]
            group.specs = [*group.specs, *specs]
            group.episodes = [*group.episodes,
                              *(episode(s, None if rewards is None else rewards[s.sibling]) for s in specs)]
            group.started = True
            if len(group.specs) == self.case.n:  # whole: judged, triaged first
                group.verdict = group_verdict(group.samples())
                group.classification = classify(group.verdict, group.episodes)
                self.triage(group)
            finished.append(group)
        return finished

    async def cancel_all(self) -> tuple[list[int], list[int]]:
        cancelled = sorted(self.pending)
        self.pending.clear()
        return cancelled, []


def run_driver(case: Case, tmp_path: Any) -> Outcome:
    ctx = RunContext(knobs=case.knobs(), runner=None, source=case.source(),  # type: ignore[arg-type]
                     guard=ConsecutiveFailureGuard(case.limit), slots=EpisodeSlots(1),
                     paths=prepare_run_dir(tmp_path, "driver"), waves=case.waves,  # type: ignore[arg-type]
                     staging=case.staging())
    driver = StepDriver(ctx, 1)
    driver.tasks = ScriptedTasks(case, ctx, 1, driver.paths, driver.log.now)
    driver.live.groups = driver.tasks.groups
    try:
        asyncio.run(driver.run())
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    finally:
        ctx.paths.unlock()
    out = Outcome(stopped_early=driver.rollout.stage_counts["stopped_early"])
    for e in read_jsonl(driver.paths.root / "events.jsonl"):
        if e["event"] == "decision":
            out.decisions.append((e["index"], e["decision"], e["reason"], e["remaining"], e["kept"]))
        elif e["event"] == "abort":
            out.aborted = list(e["aborted"])
    return out


# -- the simulator -----------------------------------------------------------------------------------------------
class ScriptedWorld:
    """The simulator's world: the ``i``-th group drawn is group ``i`` of the script (groups are drawn in the
    order they start, which is their index order)."""

    def __init__(self, case: Case) -> None:
        self.case, self.drawn = case, 0

    def play_siblings(self, prompt: str, n: int) -> tuple[list[float] | None, list[float]]:
        self.drawn += 1
        return self.case.play(self.drawn - 1)

    def train(self, prompts: list[str]) -> None:
        return None

    def mean_pass_rate(self) -> float:
        return 0.0


def run_simulator(case: Case) -> Outcome:
    from shopsimrl.simulate.engine import _simulate_step

    try:
        record, events = _simulate_step(1, ScriptedWorld(case), case.source(),  # type: ignore[arg-type]
                                        ConsecutiveFailureGuard(case.limit), case.knobs(), [],
                                        waves=case.waves, staging=case.staging(), capacity=None)  # type: ignore[arg-type]
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    out = Outcome(stopped_early=record.stopped_early)
    for e in events:
        if e["event"] == "decision":
            out.decisions.append((e["index"], e["decision"], e["reason"], e["remaining"], e["kept"]))
        elif e["event"] == "abort":
            out.aborted = list(e["aborted"])
    return out


# -- replay ------------------------------------------------------------------------------------------------------
def run_replay(case: Case) -> Outcome:
    supply = []
    for index in range(case.wave * 40):
        rewards, durations = case.play(index)
        verdict = Verdict.TECHNICAL if rewards is None else (
            Verdict.ZERO_STD if max(rewards) - min(rewards) <= 1e-6 else Verdict.VARIED)
        supply.append((verdict, max(durations)))
    try:
        result = replay(supply, rollout_batch_size=case.target, over_sampling_batch_size=case.wave,
                        max_consecutive_failed_groups=case.limit)
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    out = Outcome()
    out.decisions = [(e.group.index, e.group.decision.value, e.group.reason, e.group.remaining, e.group.kept)
                     for e in result.events]
    out.aborted = list(result.aborted)
    return out


# -- slime's rollout function ------------------------------------------------------------------------------------
@dataclass
class DynamicFilterOutput:  # slime's (filter_hub/base_types.py)
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


class MetricGatherer:  # slime's: drop reasons counted
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def on_dynamic_filter_drop(self, reason: str | None) -> None:
        if reason:
            self.counts[reason] = self.counts.get(reason, 0) + 1

    def collect(self) -> dict[str, int]:
        return {f"rollout/dynamic_filter/drop_{r}": c for r, c in self.counts.items()}


def call_dynamic_filter(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return DynamicFilterOutput(keep=True) if fn is None else fn(*args, **kwargs)


class ScriptedDataSource:
    """slime's data source as the selector data source hands it out: groups of samples, one per prompt."""

    def __init__(self, case: Case) -> None:
        self.case, self.selector, self.groups = case, case.source(), 0

    def get_samples(self, k: int) -> list[list[Any]]:
        out = []
        for task_id in self.selector.next_prompts(k):
            out.append([SimpleNamespace(prompt=task_id, metadata={"task_id": task_id}, group_index=self.groups,
                                        index=self.groups * self.case.n + i, reward=None)
                        for i in range(self.case.n)])
            self.groups += 1
        return out


def install_slime(monkeypatch: Any, case: Case) -> SimpleNamespace:
    """Stand-ins for the slime modules the rollout function imports, and its generation on the virtual clock."""
    from shopsimrl.slime import rollout_fn
    from shopsimrl.slime.group_tasks import GroupGeneration
    from shopsimrl.slime.state import reset_hook_state

    seen = SimpleNamespace(decisions=[], aborted=[], generation=None)

    class ScriptedGeneration(GroupGeneration):
        def __init__(self, args: Any) -> None:
            self.args, self.heads, self.clock = args, {}, Clock(case)
            self.state = SimpleNamespace(remaining_batch_size=0, reset=lambda: None)
            self.jobs: dict[int, tuple[list[Any], range]] = {}
            seen.generation = self

        def start(self, start: Start) -> None:
            self.jobs[start.index] = (start.prompt, start.siblings)
            self.clock.start(start.index, start.siblings)

        async def finished(self) -> list[tuple[int, list[Any]]]:
            back = []
            for index in self.clock.next():
                group, siblings = self.jobs.pop(index)
                rewards = case.play(index)[0]
                samples = []
                for s in siblings:
                    sample = SimpleNamespace(**vars(group[s]))
                    sample.reward = None if rewards is None else rewards[s]
                    sample.metadata = {**group[s].metadata, "shopsim_scored": rewards is not None}
                    samples.append(sample)
                back.append((index, samples))
            return back

    class SpiedBatch(rollout_fn.SlimeBatch):
        def decided(self, decision: Any) -> None:
            seen.decisions.append((decision.index, decision.decision.value, decision.reason, decision.remaining,
                                   decision.kept))
            super().decided(decision)

    async def abort(args: Any, rollout_id: int) -> list[Any]:  # slime's: every group still generating
        seen.aborted = sorted(seen.generation.jobs)
        return []

    sglang = types.SimpleNamespace(abort=abort)
    rollout_pkg = types.ModuleType("slime.rollout")
    rollout_pkg.sglang_rollout = sglang  # type: ignore[attr-defined]
    modules = {
        "slime": types.ModuleType("slime"), "slime.rollout": rollout_pkg, "slime.rollout.sglang_rollout": sglang,
        "slime.rollout.filter_hub": types.ModuleType("slime.rollout.filter_hub"),
        "slime.rollout.filter_hub.base_types": types.SimpleNamespace(
            DynamicFilterOutput=DynamicFilterOutput, MetricGatherer=MetricGatherer,
            call_dynamic_filter=call_dynamic_filter),
        "slime.utils": types.ModuleType("slime.utils"),
        "slime.utils.misc": types.SimpleNamespace(load_function=_load_function),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(rollout_fn, "GroupGeneration", ScriptedGeneration)
    monkeypatch.setattr(rollout_fn, "SlimeBatch", SpiedBatch)
    monkeypatch.setattr(rollout_fn, "staging_of", lambda args: case.staging())
    reset_hook_state()
    return seen


def _load_function(path: str) -> Any:
    import importlib

    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def run_slime(case: Case, monkeypatch: Any, tmp_path: Any) -> Outcome:
    from shopsimrl.slime.rollout_fn import adaptive_rollout_async

    seen = install_slime(monkeypatch, case)
    args = SimpleNamespace(rollout_batch_size=case.target, over_sampling_batch_size=case.wave,
                           n_samples_per_prompt=case.n, shopsim_max_consecutive_failed_groups=case.limit,
                           shopsim_trace_dir=str(tmp_path), reward_key=None,
                           dynamic_sampling_filter_path="shopsimrl.slime.filter.fully_scored_group_filter",
                           rollout_sample_filter_path=None, rollout_all_samples_process_path=None)
    try:
        _data, metrics, _aborted = asyncio.run(adaptive_rollout_async(args, 0, ScriptedDataSource(case)))
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    return Outcome(decisions=seen.decisions, aborted=seen.aborted,
                   stopped_early=int(metrics.get("rollout/shopsim/staged/groups_stopped_early", 0)))


# -- the check -------------------------------------------------------------------------------------------------------
def cases() -> list[Case]:
    out = []
    for seed in range(10):
        for waves in ("fixed", "adaptive"):
            for staged in (False, True):
                technical = 0.55 if seed % 3 == 2 else 0.12  # every third supply fails often enough to stop
                out.append(Case(target=3 + seed % 3, wave=6 + seed % 4, n=4, waves=waves, staged=staged,
                                limit=3 if seed % 3 == 2 else 8, seed=seed, technical=technical))
    return out


def shells(case: Case, monkeypatch: Any, tmp_path: Any) -> dict[str, Outcome]:
    """Every shell that can run ``case``: replay runs fixed waves of whole groups; slime's rollout function is
    adaptive (on fixed waves slime runs its own loop)."""
    out = {"driver": run_driver(case, tmp_path), "simulator": run_simulator(case)}
    if case.waves == "fixed" and not case.staged:
        out["replay"] = run_replay(case)
    if case.waves == "adaptive":
        out["slime"] = run_slime(case, monkeypatch, tmp_path)
    return out


@pytest.mark.parametrize("case", cases(), ids=lambda c: f"{c.waves}-{'staged' if c.staged else 'whole'}-{c.seed}")
def test_every_shell_makes_the_same_decisions_drops_and_abort_point(case, monkeypatch, tmp_path):
    outcomes = shells(case, monkeypatch, tmp_path)
    reference = outcomes["simulator"]
    assert reference.stop is not None or reference.decisions, "the step decided nothing"
    for name, outcome in outcomes.items():
        assert outcome == reference, f"{name} differs from the simulator on {case}"


def test_the_scripted_supplies_cover_what_the_shells_must_agree_on(monkeypatch, tmp_path):
    """The cases above exercise the stop, decisions after K, fallbacks, surplus, drops and aborts."""
    seen: dict[str, int] = {"stop": 0, "stopped_early": 0, "fallback": 0, "surplus": 0, "dropped": 0, "aborted": 0}
    for case in cases():
        out = run_simulator(case)
        seen["stop"] += out.stop is not None
        seen["stopped_early"] += out.stopped_early
        seen["aborted"] += bool(out.aborted)
        for _i, decision, *_ in out.decisions:
            if decision in seen:
                seen[decision] += 1
    assert all(seen.values()), seen


# -- every prompt source keeps the contract ---------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategys_prompt_source_passes_check_prompt_source(strategy):
    check_prompt_source(lambda: prompt_source(strategy, PROMPTS[:40], 4, 0))


class HandsOutTwice:
    """A broken source: its batches ignore what is in flight."""

    def __init__(self) -> None:
        self.inner = prompt_source("seed", PROMPTS[:40], 4, 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def next_prompts(self, k: int) -> list[Any]:
        return PROMPTS[:k]


class ChanceAboveOne(HandsOutTwice):
    def next_prompts(self, k: int) -> list[Any]:
        return self.inner.next_prompts(k)

    def next_prompt(self) -> tuple[Any, float]:
        return self.inner.next_prompt()[0], 1.5


class WeighsBelowOne(ChanceAboveOne):
    def next_prompt(self) -> tuple[Any, float]:
        return self.inner.next_prompt()

    def weight(self, prompt: Any) -> float:
        return 0.5


@pytest.mark.parametrize(("broken", "message"), [(HandsOutTwice, "already in flight"),
                                                  (ChanceAboveOne, "within \\[0, 1\\]"),
                                                  (WeighsBelowOne, "weight.*>= 1")])
def test_check_prompt_source_names_the_promise_a_broken_source_breaks(broken, message):
    with pytest.raises(SourceContractError, match=message):
        check_prompt_source(broken)


def test_under_slimes_rollout_function_the_step_stops_the_run_with_the_hooks_guard_and_its_message(
        monkeypatch, tmp_path):
    """The stop is the step's: it feeds the hook state's guard once per group (the filter hook leaves it alone),
    and the error names slime's group indices and the trace folder, as the filter hook's did."""
    from shopsimrl.slime.rollout_fn import adaptive_rollout_async
    from shopsimrl.slime.state import hook_state

    case = Case(target=3, wave=6, n=4, waves="adaptive", staged=False, limit=3, seed=2, technical=0.9)
    install_slime(monkeypatch, case)
    args = SimpleNamespace(rollout_batch_size=case.target, over_sampling_batch_size=case.wave,
                           n_samples_per_prompt=case.n, shopsim_max_consecutive_failed_groups=case.limit,
                           shopsim_trace_dir=str(tmp_path), reward_key=None,
                           dynamic_sampling_filter_path="shopsimrl.slime.filter.fully_scored_group_filter",
                           rollout_sample_filter_path=None, rollout_all_samples_process_path=None)
    with pytest.raises(TooManyTechnicalFailures) as info:
        asyncio.run(adaptive_rollout_async(args, 0, ScriptedDataSource(case)))
    exc = info.value
    assert exc.count == 3 and hook_state().guard.count == 3  # counted once per group, by the step
    assert all(g.startswith("group_index=") for g in exc.groups) and exc.trace_dir == str(tmp_path)
    assert f"under {tmp_path}" in str(exc)
