"""``pump`` / ``apump``: every action carried out, the shell asked only for what it alone knows.

A scripted shell on a virtual clock (each group's siblings take seeded durations; groups ending at one instant come
back together, shuffled) records what the pump asked of it.  The property: whatever the supply, the wave mode,
staging and the stop, a pumped step ends with every group it started either measured or cancelled, never both, and
with the outcome ``close()`` gives.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import GroupDecision, TooManyTechnicalFailures, Verdict
from shopsimrl.sampling.pump import Hooks, apump, pump
from shopsimrl.sampling.source import new_selector
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import RolloutStep, Start, StepDone, WaveOpened, new_step
from shopsimrl.sampling.verdict import rewards_verdict

PROMPTS = [f"p{i:03d}" for i in range(300)]


class ScriptedShell(Hooks):
    """Groups on a virtual clock; records every request of the pump and every hook it heard."""

    def __init__(self, seed: int, n: int, technical: float, *, stop_after: int | None = None) -> None:
        self.seed, self.n, self.technical, self.stop_after = seed, n, technical, stop_after
        self.t = 0.0
        self.heap: list[tuple[float, int]] = []
        self.flying: dict[int, range] = {}  # group -> the siblings running now
        self.started: list[int] = []  # every group started (once per group)
        self.measured: list[int] = []  # whole groups measured
        self.first_k: list[int] = []  # staged groups whose first K were measured
        self.cancelled: list[int] = []
        self.heard: list[tuple[str, object]] = []
        self.batches = 0
        self.shuffle = random.Random(seed)

    def play(self, index: int) -> tuple[list[float] | None, list[float]]:
        rng = random.Random(f"{self.seed}:{index}")
        durations = [float(rng.randint(1, 4)) for _ in range(self.n)]
        kind = rng.random()
        if kind < self.technical:
            return None, durations
        if kind < self.technical + (1 - self.technical) / 2:
            return [float(rng.random() < 0.5)] * self.n, durations
        return [float(rng.random() < 0.5) for _ in range(self.n)], durations

    # -- what only the shell knows -----------------------------------------------------------------------------
    def now(self) -> float:
        return self.t

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        assert start.index not in self.flying, "a group started while it runs"
        if start.siblings.start == 0:
            self.started.append(start.index)
        self.flying[start.index] = start.siblings
        durations = self.play(start.index)[1]
        heapq.heappush(self.heap, (self.t + max(durations[s] for s in start.siblings), start.index))

    def next_finished(self) -> Sequence[int] | None:
        if self.stop_after is not None and self.batches >= self.stop_after:
            return None
        self.batches += 1
        self.t, index = heapq.heappop(self.heap)
        ended = [index]
        while self.heap and self.heap[0][0] == self.t:
            ended.append(heapq.heappop(self.heap)[1])
        self.shuffle.shuffle(ended)
        for i in ended:
            del self.flying[i]
        return ended

    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        self.measured.append(index)
        rewards = self.play(index)[0]
        return rewards_verdict(rewards), rewards

    def measure_first_k(self, index: int) -> list[float | None]:
        self.first_k.append(index)
        rewards = self.play(index)[0]
        return [None if rewards is None else rewards[s] for s in range(self.n // 2)]

    def cancel(self, indices: tuple[int, ...]) -> None:
        # every group still running, and those back but never decided (the batch that filled the step, or stopped
        # it, left them)
        assert set(self.flying) <= set(indices) <= set(self.started)
        self.cancelled.extend(indices)
        self.heap = [job for job in self.heap if job[1] not in indices]
        heapq.heapify(self.heap)
        self.flying.clear()

    # -- hooks ------------------------------------------------------------------------------------------------
    def opened(self, wave: WaveOpened, t: float) -> None:
        self.heard.append(("opened", wave.wave))

    def decided(self, decision: GroupDecision, t: float) -> None:
        self.heard.append(("decided", decision.index))

    def stopped_early(self, index: int, t: float) -> None:
        self.heard.append(("stopped_early", index))

    def stopping(self, error: TooManyTechnicalFailures, t: float) -> None:
        self.heard.append(("stopping", error.count))

    def failed(self, exc: BaseException) -> None:
        self.heard.append(("failed", type(exc).__name__))

    def closed(self, done: StepDone, t: float) -> None:
        self.heard.append(("closed", tuple(done.aborted)))


class AsyncScriptedShell(ScriptedShell):
    async def next_finished(self) -> Sequence[int] | None:  # type: ignore[override]
        await asyncio.sleep(0)
        return ScriptedShell.next_finished(self)

    async def cancel(self, indices: tuple[int, ...]) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        ScriptedShell.cancel(self, indices)


def step_of(waves: str, staged: bool, limit: int, n: int = 4, target: int = 3, wave: int = 6) -> RolloutStep:
    staging = StagedSiblings(n, n // 2, threshold=1.0, skip_q=1.0) if staged else None
    return new_step(target, wave, n, source=new_selector("skip", PROMPTS, n, 0), waves=waves,
                    staging=staging, max_consecutive_failed_groups=limit)


def outcome(step: RolloutStep, shell: ScriptedShell, run) -> tuple[StepDone | None, BaseException | None]:
    try:
        return run(step, shell), None
    except TooManyTechnicalFailures as exc:
        return None, exc


def assert_every_group_measured_or_cancelled(step: RolloutStep, shell: ScriptedShell) -> None:
    """Every group started is either measured and decided, or cancelled; never both; nothing left running."""
    started, measured, cancelled = set(shell.started), set(shell.measured), set(shell.cancelled)
    decided = [i for name, i in shell.heard if name == "decided"]
    stopped_early = {i for name, i in shell.heard if name == "stopped_early"}
    assert len(shell.started) == len(started) == step.controller.submitted
    assert len(shell.measured) == len(measured) and len(decided) == len(set(decided)), "measured or decided twice"
    assert len(shell.cancelled) == len(cancelled), "cancelled twice"
    assert started == set(decided) | cancelled and not set(decided) & cancelled
    assert set(decided) == (measured - cancelled) | stopped_early and stopped_early <= set(shell.first_k)
    assert set(shell.first_k) <= started and not shell.flying


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), waves=st.sampled_from(["fixed", "adaptive"]), staged=st.booleans(),
       technical=st.sampled_from([0.0, 0.15, 0.6]), limit=st.integers(2, 8),
       stop_after=st.one_of(st.none(), st.integers(0, 6)))
def test_a_pumped_step_ends_with_every_started_group_measured_or_cancelled(seed, waves, staged, technical, limit,
                                                                           stop_after):
    step, shell = step_of(waves, staged, limit), ScriptedShell(seed, 4, technical, stop_after=stop_after)
    done, stop = outcome(step, shell, pump)
    assert_every_group_measured_or_cancelled(step, shell)
    assert shell.heard[-1][0] == "closed"  # the step closed, stop or not
    assert step.close() is (done or step.close())  # idempotent: what the pump returned is close()'s outcome
    if stop is not None:
        assert ("stopping", stop.count) in shell.heard and ("failed", "TooManyTechnicalFailures") in shell.heard
    else:
        assert done is not None and sorted(done.aborted) == sorted(shell.cancelled)
        decided = [i for name, i in shell.heard if name == "decided"]
        assert sorted(decided) == sorted([*done.kept, *(i for ids in done.dropped.values() for i in ids),
                                          *done.surplus])


def test_a_full_batch_aborts_the_rest_through_the_shell_and_returns_closes_outcome():
    step, shell = step_of("fixed", False, 8), ScriptedShell(1, 4, 0.0)
    shell.play = lambda index: ([0.0, 1.0, 0.0, 1.0], [1.0 + index] * 4)  # type: ignore[method-assign]
    done = pump(step, shell)
    assert len(done.kept) == 3 and done.aborted and sorted(done.aborted) == sorted(shell.cancelled)
    assert done is step.close()
    decided = [i for name, i in shell.heard if name == "decided"]
    assert decided and set(done.kept) <= set(decided)
    assert ("closed", tuple(done.aborted)) == shell.heard[-1]
    assert shell.heard[0] == ("opened", 1)


def test_the_stop_is_heard_after_its_decisions_then_the_groups_in_flight_are_cancelled():
    step, shell = step_of("fixed", False, 2), ScriptedShell(3, 4, 1.0)  # every group technical
    with pytest.raises(TooManyTechnicalFailures) as info:
        pump(step, shell)
    names = [name for name, _ in shell.heard]
    assert names[-3:] == ["stopping", "failed", "closed"]
    assert names.count("decided") == 2 and info.value.count == 2
    assert_every_group_measured_or_cancelled(step, shell)
    assert shell.cancelled, "the wave's other groups were still in flight"


def test_a_shell_with_nothing_more_stops_the_step_as_an_interrupt():
    step, shell = step_of("adaptive", True, 8), ScriptedShell(5, 4, 0.1, stop_after=1)
    done = pump(step, shell)
    assert len(done.kept) < 3 and sorted(done.aborted) == sorted(shell.cancelled)
    assert_every_group_measured_or_cancelled(step, shell)


class Broken(ScriptedShell):
    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        raise OSError("the shell's own error")


def test_an_error_of_the_shell_is_heard_first_then_the_step_is_cancelled_and_closed():
    step, shell = step_of("fixed", False, 8), Broken(1, 4, 0.0)
    with pytest.raises(OSError, match="the shell's own error"):
        pump(step, shell)
    assert [name for name, _ in shell.heard][-2:] == ["failed", "closed"]
    assert set(shell.cancelled) == set(range(6)), "nothing was measured: every group of the wave is cancelled"


class Bare:
    """A shell without a single hook: the pump asks it only for what it must."""

    def __init__(self) -> None:
        self.inner = ScriptedShell(2, 4, 0.1)

    def now(self) -> float:
        return self.inner.now()

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        self.inner.start(start, first_stage=first_stage, t=t)

    def next_finished(self) -> Sequence[int] | None:
        return self.inner.next_finished()

    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        return self.inner.measure(index)

    def measure_first_k(self, index: int) -> list[float | None]:
        return self.inner.measure_first_k(index)

    def cancel(self, indices: tuple[int, ...]) -> None:
        self.inner.cancel(indices)


def test_hooks_are_optional():
    shell = Bare()
    done = pump(step_of("adaptive", True, 8), shell)
    assert len(done.kept) == 3 and shell.inner.heard == []


@pytest.mark.parametrize("waves", ["fixed", "adaptive"])
@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_apump_carries_out_the_same_actions_as_pump(waves, staged, seed):
    technical = 0.6 if seed % 3 == 2 else 0.1
    sync_step, sync_shell = step_of(waves, staged, 3), ScriptedShell(seed, 4, technical)
    async_step, async_shell = step_of(waves, staged, 3), AsyncScriptedShell(seed, 4, technical)
    sync_done, sync_stop = outcome(sync_step, sync_shell, pump)
    async_done, async_stop = outcome(async_step, async_shell, lambda s, sh: asyncio.run(apump(s, sh)))
    assert sync_shell.heard == async_shell.heard
    assert (sync_shell.measured, sync_shell.first_k, sync_shell.cancelled) == (
        async_shell.measured, async_shell.first_k, async_shell.cancelled)
    assert sync_done == async_done and (sync_stop is None) == (async_stop is None)


def test_in_order_decides_a_batch_in_the_order_the_shell_gave_it():
    class Reversed(ScriptedShell):
        def next_finished(self) -> Sequence[int] | None:
            ended = super().next_finished()
            return None if ended is None else sorted(ended, reverse=True)

    def first_batch(in_order: bool) -> list[int]:
        shell = Reversed(0, 4, 0.0)
        shell.play = lambda index: ([0.0, 1.0, 0.0, 1.0], [1.0] * 4)  # type: ignore[method-assign]
        pump(step_of("fixed", False, 8, target=6, wave=6), shell, in_order=in_order)
        return [i for name, i in shell.heard if name == "decided"]  # type: ignore[misc]

    assert first_batch(False) == [0, 1, 2, 3, 4, 5]
    assert first_batch(True) == [5, 4, 3, 2, 1, 0]


def test_a_surplus_group_is_measured_not_cancelled():
    """slime's rule: a group back with the batch that fills the step is decided (surplus), never aborted."""
    shell = ScriptedShell(0, 4, 0.0)
    shell.play = lambda index: ([0.0, 1.0, 0.0, 1.0], [1.0] * 4)  # type: ignore[method-assign]
    step = step_of("fixed", False, 8, target=2, wave=4)
    done = pump(step, shell)
    assert done.surplus == [2, 3] and done.aborted == [] and shell.cancelled == []
    assert sorted(shell.measured) == [0, 1, 2, 3]
