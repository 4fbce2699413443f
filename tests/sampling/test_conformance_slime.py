"""slime's rollout function makes the reference step's decisions (``test_conformance.py``), for now through stand-ins.

Until slime's rollout function runs on ``apump`` and can be driven through its public entry point, it is checked
here as before: slime's modules are stood in for and its generation runs on the script's clock (monkeypatched).
Once it is on the pump it becomes one more row of ``SHELLS`` in ``test_conformance.py``, and this file goes.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
import types
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from sampling.test_conformance import CASES, Case, Outcome, _id, run_reference, stopped

from shopsimrl.sampling import TooManyTechnicalFailures
from shopsimrl.sampling.step import Start


class Clock:
    """The script's clock: a job (siblings started together) ends at its start plus its slowest sibling."""

    def __init__(self, case: Case) -> None:
        self.case, self.now = case, 0.0
        self.heap: list[tuple[float, int]] = []

    def start(self, index: int, siblings: range) -> None:
        durations = self.case.play(index)[1]
        heapq.heappush(self.heap, (self.now + max(durations[s] for s in siblings), index))

    def next(self) -> list[int]:
        self.now, index = heapq.heappop(self.heap)
        ended = [index]
        while self.heap and self.heap[0][0] == self.now:
            ended.append(heapq.heappop(self.heap)[1])
        return ended


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
    return Outcome(decisions=seen.decisions, settled=None,
                   stopped_early=int(metrics.get("rollout/shopsim/staged/groups_stopped_early", 0)))


@pytest.mark.parametrize("case", [c for c in CASES if c.waves == "adaptive"], ids=_id)
def test_slimes_rollout_function_makes_the_reference_steps_decisions(case, monkeypatch, tmp_path):
    reference = run_reference(case)[0]
    outcome = run_slime(case, monkeypatch, tmp_path)
    assert outcome.agrees_with(reference), f"slime differs from the reference on {case}:\n{outcome}\n{reference}"




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
