"""Every shell is a pump around ``RolloutStep``: the same scripted supply gives the same step in each.

One scripted supply (each group's rewards and its siblings' durations, by submission index; random, seeded)
runs through every shell in :data:`SHELLS`, each driven through its public entry point, with nothing of it
patched: a group's siblings end at ``start + duration`` (groups ending at one instant come back together).

- the main job's driver: ``run_rollout`` on the modelled clock, its episodes from an ``EpisodeRunner`` that
  reports each sibling's reward and, as completion tokens, its duration (a time model without env latency or
  sharing turns them into exactly those seconds);
- the simulator: ``simulate_step`` over a scripted world (the ``i``-th group drawn is group ``i``);
- ``replay``: the supply as (verdict, duration) pairs (fixed waves, whole groups: what it runs);
- ``replay_recorded``: the reference's own record, batches and refills, as a run records them (whole groups);
- ``check_selector``: the contract every shell relies on, checked on the case's selector;
- slime's rollout function: ``generate_rollout`` on the slime double, its episodes slime's custom generate
  function taking each sibling's reward and duration on a virtual clock (``sampling/slime_shell.py``).

The reference is the step pumped (:func:`~shopsimrl.sampling.pump.pump`) with a scripted shell of the test's
own.  Each run yields the decisions (index, decision, reason, remaining, kept) in order, what they settled
(kept, fallback, drops, surplus, aborted), the groups decided after their first ``K`` and the consecutive-failure
stop (its trigger and streak); a shell must agree with the reference on all it reports.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from sampling import slime_shell

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.io import read_jsonl
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.gputime import Clock, TimeModel
from shopsimrl.rollout.group import EpisodeMeter, EpisodeSpec
from shopsimrl.sampling import ConsecutiveFailureGuard, GroupDecision, SamplingKnobs, TooManyTechnicalFailures, replay
from shopsimrl.sampling.conformance import SourceContractError, check_selector
from shopsimrl.sampling.modes import Selection, Siblings, WaveMode
from shopsimrl.sampling.pump import Hooks, pump
from shopsimrl.sampling.recorded import Finished, Opened, replay_recorded
from shopsimrl.sampling.source import new_selector
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import Start, StepDone, WaveOpened, new_step
from shopsimrl.sampling.verdict import Verdict, rewards_verdict
from shopsimrl.simulate.engine import simulate_step

PROMPTS = [f"task-{i:03d}" for i in range(48)]


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
    selection: str = "skip"

    def play(self, index: int) -> tuple[list[float] | None, list[float]]:
        """Group ``index``'s rewards (``None``: technical) and its siblings' durations."""
        rng = random.Random(f"{self.seed}:{index}")
        base = rng.randint(1, 4)
        durations = [float(base + rng.randint(0, 1)) for _ in range(self.n)]
        if self.seed % 10 == 1:  # every third supply: a wave's groups all end together
            durations = [2.0] * self.n
        kind = rng.random()
        if kind < self.technical:
            return None, durations
        if kind < self.technical + (1 - self.technical) / 2:  # all siblings agree: zero spread
            return [float(rng.random() < 0.5)] * self.n, durations
        return [float(rng.random() < 0.5) for _ in range(self.n)], durations

    def verdict(self, index: int) -> Verdict:
        return rewards_verdict(self.play(index)[0])

    def staging(self) -> StagedSiblings | None:
        return StagedSiblings.of(self.n) if self.staged else None

    def knobs(self) -> SamplingKnobs:
        return SamplingKnobs(rollout_batch_size=self.target, n_samples_per_prompt=self.n,
                             over_sampling_batch_size=self.wave, global_batch_size=self.n,
                             max_consecutive_failed_groups=self.limit)

    def source(self) -> Any:
        """The case's selector, taught by a few steps whose groups all succeeded (so staged groups can be
        predicted to agree, and decided after their first K)."""
        source = new_selector(self.selection, PROMPTS, self.n, self.seed, waves=self.waves)
        for _ in range(WARM_UP_STEPS):
            pump(new_step(8, 16, self.n, source=source, waves=self.waves), AllSucceed(self.n))
        return source


WARM_UP_STEPS = 3


class AllSucceed(Hooks):
    """A shell whose groups all come back at once, every sibling a success."""

    def __init__(self, n: int) -> None:
        self.n, self.flying = n, []

    def now(self) -> float:
        return 0.0

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        self.flying.append(start.index)

    def next_finished(self) -> list[int]:
        back, self.flying = self.flying, []
        return back

    def measure(self, index: int) -> tuple[Verdict, list[float]]:
        return Verdict.ZERO_STD, [1.0] * self.n

    def measure_first_k(self, index: int) -> list[float | None]:
        raise AssertionError("the warm-up starts every group whole")

    def cancel(self, indices: tuple[int, ...]) -> None:
        """Nothing runs."""


def cases() -> list[Case]:
    out = []
    for selection in Selection:
        for seed in range(3):
            for waves in WaveMode:
                for staged in (False, True):
                    technical = 0.55 if seed == 2 else 0.12  # every third supply fails often enough to stop
                    out.append(Case(target=3 + seed, wave=6 + seed + (selection is Selection.SPREAD), n=4,
                                    waves=waves.value, staged=staged, limit=3 if seed == 2 else 8,
                                    seed=seed + 10 * list(Selection).index(selection), technical=technical,
                                    selection=selection.value))
    return out


CASES = cases()


@dataclass
class Outcome:
    """What a shell made of the supply (``None``: a field the shell does not report)."""

    decisions: list[tuple[int, str, str | None, int, int]] | None = field(default_factory=list)
    settled: dict[str, Any] | None = None  # kept, fallback, drops by reason, surplus, aborted
    stopped_early: int | None = 0  # staged groups decided after their first K
    stop: tuple[int, int] | None = None  # the consecutive-failure stop: (the trigger's index, the streak)
    contract_only: bool = False  # the shell checked the source's contract (it raises when broken), nothing else
    slime_view: dict[str, Any] | None = None  # slime's rollout function: what slime sees of ``settled`` (slime_view)

    def agrees_with(self, reference: Outcome) -> bool:
        if self.contract_only:
            return True
        if self.stop is not None or reference.stop is not None:
            return self.stop == reference.stop
        if self.slime_view is not None and (reference.settled is None or
                                            self.slime_view != slime_view(reference.settled)):
            return False
        return all(mine is None or mine == theirs for mine, theirs in (
            (self.decisions, reference.decisions), (self.settled, reference.settled),
            (self.stopped_early, reference.stopped_early)))


def settled(done: StepDone) -> dict[str, Any]:
    return {"kept": done.kept, "fallback": done.fallback, "surplus": done.surplus, "aborted": sorted(done.aborted),
            "dropped": {reason: ids for reason, ids in done.dropped.items() if ids}}


def settled_by(decisions: list[tuple[int, str, str | None, int, int]], aborted: list[int]) -> dict[str, Any]:
    """What a list of decisions settled, as :func:`settled` reads a step's outcome."""
    dropped: dict[str, list[int]] = {}
    for index, decision, reason, _remaining, _kept in decisions:
        if decision == "dropped":
            dropped.setdefault(str(reason), []).append(index)
    return {"kept": [d[0] for d in decisions if d[1] in ("accepted", "fallback")],
            "fallback": [d[0] for d in decisions if d[1] == "fallback"],
            "surplus": [d[0] for d in decisions if d[1] == "surplus"], "aborted": sorted(aborted), "dropped": dropped}


def stopped(exc: TooManyTechnicalFailures) -> Outcome:
    """A run the stop ended: its trigger and streak are what every shell must agree on."""
    return Outcome(stop=(exc.decisions[-1].index, exc.count))


def from_events(events: list[dict[str, Any]], stopped_early: int) -> Outcome:
    """An outcome from a step's event log (the driver's ``events.jsonl``, the simulator's events)."""
    decisions = [(e["index"], e["decision"], e["reason"], e["remaining"], e["kept"])
                 for e in events if e["event"] == "decision"]
    aborted = next((list(e["aborted"]) for e in events if e["event"] == "abort"), [])
    return Outcome(decisions, settled_by(decisions, aborted), stopped_early)


# -- the reference: the step pumped on the script's own clock ----------------------------------------------------
class Scripted(Hooks):
    """The reference shell: a job (siblings started together) ends at its start plus its slowest sibling; it keeps
    what a run's record holds (refills opened, batches in the order they were decided)."""

    def __init__(self, case: Case) -> None:
        self.case, self.t = case, 0.0
        self.heap: list[tuple[float, int]] = []
        self.outcome = Outcome()
        self.record: list[Opened | Finished] = []

    def now(self) -> float:
        return self.t

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        durations = self.case.play(start.index)[1]
        heapq.heappush(self.heap, (self.t + max(durations[s] for s in start.siblings), start.index))

    def next_finished(self) -> list[int]:
        self.t, index = heapq.heappop(self.heap)
        ended = [index]
        while self.heap and self.heap[0][0] == self.t:
            ended.append(heapq.heappop(self.heap)[1])
        self.record.append(Finished([(i, self.case.verdict(i)) for i in sorted(ended)]))
        return ended

    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        rewards = self.case.play(index)[0]
        return rewards_verdict(rewards), rewards

    def measure_first_k(self, index: int) -> list[float | None]:
        rewards = self.case.play(index)[0]
        return [None] * (self.case.n // 2) if rewards is None else list(rewards[: self.case.n // 2])

    def cancel(self, indices: tuple[int, ...]) -> None:
        self.heap = [job for job in self.heap if job[1] not in indices]

    def opened(self, wave: WaveOpened, t: float) -> None:
        self.record.append(Opened(len(wave.indices)))

    def decided(self, d: GroupDecision, t: float) -> None:
        assert self.outcome.decisions is not None
        self.outcome.decisions.append((d.index, d.decision.value, d.reason, d.remaining, d.kept))

    def stopped_early(self, index: int, t: float) -> None:
        assert self.outcome.stopped_early is not None
        self.outcome.stopped_early += 1


def run_reference(case: Case) -> tuple[Outcome, list[Opened | Finished]]:
    shell = Scripted(case)
    step = new_step(case.target, case.wave, case.n, source=case.source(), waves=case.waves, staging=case.staging(),
                    guard=ConsecutiveFailureGuard(case.limit))
    try:
        done = pump(step, shell)
    except TooManyTechnicalFailures as exc:
        return stopped(exc), shell.record
    shell.outcome.settled = settled(done)
    return shell.outcome, shell.record


# -- the shells, each through its public entry point ----------------------------------------------------------------
#: episodes take exactly the seconds their completion tokens say: one turn, no page, no env latency, no sharing
EXACT = TimeModel(env_latency_s=0.0, capacity=None)


def run_driver(case: Case, tmp_path: Any) -> Outcome:
    async def episode(spec: EpisodeSpec, meter: EpisodeMeter) -> EpisodeResult:
        rewards, durations = case.play(spec.group_index)
        reward = None if rewards is None else rewards[spec.sibling]
        return EpisodeResult(task_id=spec.task_id, rollout_id=spec.rollout_id, seed=spec.seed, policy="scripted",
                             scored=reward is not None, reward=reward, strict_reward=reward,
                             success=None if reward is None else float(reward == 1.0),
                             end_reason="purchase" if reward is not None else None,
                             error=None if reward is not None else {"type": "EnvError", "message": "scripted",
                                                                     "stage": "step"},
                             turns=1, env_steps=1, wall_seconds=0.0,
                             completion_tokens=round(durations[spec.sibling] * EXACT.decode_tokens_per_s))

    config = RolloutConfig(knobs=case.knobs(), steps=1, seed=case.seed, out=tmp_path, name="driver",
                           selection=Selection.parse(case.selection), waves=WaveMode.parse(case.waves),
                           siblings=Siblings.STAGED if case.staged else Siblings.ALL, clock=Clock.MODELLED,
                           time_model=EXACT)
    try:
        result = asyncio.run(run_rollout(config, episode, PROMPTS, source=case.source()))
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    step = result.paths.step(1)
    metrics = json.loads(step.metrics.read_text())
    return from_events(list(read_jsonl(step.root / "events.jsonl")),
                       int(metrics.get("rollout/shopsim/staged/groups_stopped_early", 0)))


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


def run_simulator(case: Case, tmp_path: Any) -> Outcome:
    try:
        record, events = simulate_step(1, ScriptedWorld(case), case.source(),  # type: ignore[arg-type]
                                       ConsecutiveFailureGuard(case.limit), case.knobs(), [],
                                       waves=WaveMode.parse(case.waves), staging=case.staging(), capacity=None)
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    return from_events(events, record.stopped_early)


def run_replay(case: Case, tmp_path: Any) -> Outcome:
    supply = [(case.verdict(i), max(case.play(i)[1])) for i in range(case.wave * 40)]
    try:
        result = replay(supply, rollout_batch_size=case.target, over_sampling_batch_size=case.wave,
                        max_consecutive_failed_groups=case.limit)
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    decisions = [(e.group.index, e.group.decision.value, e.group.reason, e.group.remaining, e.group.kept)
                 for e in result.events]
    return Outcome(decisions, settled_by(decisions, result.aborted), stopped_early=None)


def run_replay_recorded(case: Case, tmp_path: Any) -> Outcome:
    record = run_reference(case)[1]
    if case.waves == "fixed":
        record = [e for e in record if type(e) is Finished]  # slime's own loop: its waves open by its own rule
    try:
        done = replay_recorded(record, rollout_batch_size=case.target, over_sampling_batch_size=case.wave,
                               waves=case.waves, max_consecutive_failed_groups=case.limit)
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    return Outcome(decisions=None, settled=settled(done), stopped_early=None)


def run_check_selector(case: Case, tmp_path: Any) -> Outcome:
    """The contract the step relies on, on the case's source, fixed and adaptive (raises when it is broken); the
    check's own steps run made-up results, so it reports no decisions."""
    check_selector(case.source, seed=case.seed)
    return Outcome(decisions=None, settled=None, stopped_early=None, contract_only=True)


def run_slime(case: Case, tmp_path: Any) -> Outcome:
    """slime's rollout function through ``generate_rollout`` on the slime double (``sampling/slime_shell.py``): it
    reports what slime sees of the step, the batch by sample index and the drops by count (:func:`slime_view`)."""
    try:
        seen = slime_shell.run_slime(case.play, case.source(), PROMPTS, tmp_path, target=case.target, wave=case.wave,
                                     n=case.n, limit=case.limit, staged=case.staged)
    except TooManyTechnicalFailures as exc:
        return stopped(exc)
    return Outcome(decisions=None, settled=None, stopped_early=seen.pop("stopped_early"), slime_view=seen)


def slime_view(settled: dict[str, Any]) -> dict[str, Any]:
    """What slime sees of a step's outcome: the batch sorted by sample index, drops and surplus by count."""
    return {"kept": sorted(settled["kept"]), "fallback": sorted(settled["fallback"]),
            "dropped": {reason: len(ids) for reason, ids in settled["dropped"].items()},
            "surplus": len(settled["surplus"]), "aborted": sorted(settled["aborted"])}


@dataclass(frozen=True)
class ShellRow:
    run: Callable[[Case, Any], Outcome]
    runs: Callable[[Case], bool]  # the cases (wave modes, staging) the shell supports


#: Every shell around the step, and the cases it runs (slime's rollout function: adaptive waves; on fixed waves slime
#: runs its own loop).
SHELLS: dict[str, ShellRow] = {
    "slime": ShellRow(run_slime, lambda c: c.waves == "adaptive"),
    "driver": ShellRow(run_driver, lambda c: True),
    "simulator": ShellRow(run_simulator, lambda c: True),
    "replay": ShellRow(run_replay, lambda c: c.waves == "fixed" and not c.staged),
    "replay_recorded": ShellRow(run_replay_recorded, lambda c: not c.staged),
    "check_selector": ShellRow(run_check_selector, lambda c: c.waves == "fixed" and not c.staged),
}


def _id(case: Case) -> str:
    return f"{case.selection}-{case.waves}-{'staged' if case.staged else 'whole'}-{case.seed}"


@pytest.mark.parametrize(("shell", "case"), [pytest.param(name, case, id=f"{name}-{_id(case)}")
                                             for name, shell in SHELLS.items() for case in CASES if shell.runs(case)])
def test_every_shell_makes_the_reference_steps_decisions_drops_and_abort_point(shell, case, tmp_path):
    reference = run_reference(case)[0]
    assert reference.stop is not None or reference.decisions, "the step decided nothing"
    outcome = SHELLS[shell].run(case, tmp_path)
    assert outcome.agrees_with(reference), f"{shell} differs from the reference on {case}:\n{outcome}\n{reference}"


def test_the_scripted_supplies_cover_what_the_shells_must_agree_on():
    """The cases exercise every mode of every shell: the stop, decisions after K, fallbacks, surplus, drops and
    aborts, each selection rule, fixed and adaptive waves."""
    seen = {"stop": 0, "stopped_early": 0, "fallback": 0, "surplus": 0, "dropped": 0, "aborted": 0}
    for case in CASES:
        out = run_reference(case)[0]
        seen["stop"] += out.stop is not None
        seen["stopped_early"] += out.stopped_early or 0
        seen["aborted"] += bool(out.settled and out.settled["aborted"])
        for _i, decision, *_ in out.decisions or []:
            if decision in seen:
                seen[decision] += 1
    assert all(seen.values()), seen
    for name, shell in SHELLS.items():
        modes = {(c.selection, c.waves, c.staged) for c in CASES if shell.runs(c)}
        assert {s for s, _w, _k in modes} == {s.value for s in Selection}, name
    assert {(c.waves, c.staged) for c in CASES if SHELLS["replay_recorded"].runs(c)} == {("fixed", False),
                                                                                         ("adaptive", False)}


# -- check_selector names the promise a broken source breaks -------------------------------------------------
class HandsOutTwice:
    """A broken source: its batches ignore what is in flight."""

    def __init__(self) -> None:
        self.inner = new_selector("seed", PROMPTS[:40], 4, 0)

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


class RepeatsItsPick(HandsOutTwice):
    """Asked for one prompt again before its last pick came back, it hands out that pick again: every batch and a
    single pick look right, only a whole adaptive step shows it."""

    def __init__(self) -> None:
        super().__init__()
        self.pick: Any = None
        self.again = 0  # times the pick was handed out again: the inner source saw it once

    def next_prompts(self, k: int) -> list[Any]:
        return self.inner.next_prompts(k)

    def next_prompt(self) -> tuple[Any, float]:
        if self.pick is None:
            self.pick = self.inner.next_prompt()[0]
        else:
            self.again += 1
        return self.pick, 0.5

    def settle(self, prompt: Any, rewards: Any, *, surplus: bool = False) -> None:
        if self._first_back(prompt):
            self.inner.settle(prompt, rewards, surplus=surplus)

    def release(self, prompt: Any) -> None:
        if self._first_back(prompt):
            self.inner.release(prompt)

    def _first_back(self, prompt: Any) -> bool:
        if prompt != self.pick:
            return True
        if self.again:
            self.again -= 1
            return False
        self.pick = None
        return True


@pytest.mark.parametrize(("broken", "message"), [(HandsOutTwice, "already in flight"),
                                                  (ChanceAboveOne, "within \\[0, 1\\]"),
                                                  (WeighsBelowOne, "weight.*>= 1"),
                                                  (RepeatsItsPick, "adaptive-wave step started prompts twice")])
def test_check_selector_names_the_promise_a_broken_source_breaks(broken, message):
    with pytest.raises(SourceContractError, match=message):
        check_selector(broken)
