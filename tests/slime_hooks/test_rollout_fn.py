"""The adaptive-waves rollout function against slime's rollout interface, as read from slime's source.

slime is not installed here, so a stand-in package provides exactly the names the function
imports, with slime's signatures and behaviour where it matters (``slime/rollout/sglang_rollout.py``:
``GenerateState`` is a singleton with ``pendings``, ``remaining_batch_size``, ``sampling_params``,
``reset()``; ``generate_and_rm_group(args, group, sampling_params, evaluation)``; ``abort(args,
rollout_id)`` awaits every pending group and returns partial groups only with partial rollout;
``filter_hub/base_types.py``: ``MetricGatherer``, ``call_dynamic_filter``; ``base_types.py``:
``RolloutFnTrainOutput``; ``utils/async_utils.py``: ``run``; ``utils/misc.py``: ``load_function``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import types
from collections import defaultdict
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from shopsimrl.sampling.filter import REASON_ZERO_STD
from shopsimrl.slime.data_source import SelectorDataSource
from shopsimrl.slime.state import reset_hook_state


def solved(task_id: str) -> bool:
    return int(task_id.split("-")[1]) % 3 != 0  # two prompts in three are always solved


@pytest.fixture
def fake_slime(monkeypatch, kit):
    calls = SimpleNamespace(generated=[], aborted=0, evaluated=0)

    @dataclass
    class DynamicFilterOutput:
        keep: bool
        reason: str | None = None
        keep_when_insufficient: bool = False

    class MetricGatherer:
        def __init__(self):
            self.counts = defaultdict(int)

        def on_dynamic_filter_drop(self, reason):
            if reason:
                self.counts[reason] += 1

        def collect(self):
            return {f"rollout/dynamic_filter/drop_{r}": c for r, c in self.counts.items()}

    def call_dynamic_filter(fn, *args, **kwargs):
        return DynamicFilterOutput(keep=True) if fn is None else fn(*args, **kwargs)

    class GenerateState:
        instance = None

        def __new__(cls, args):
            if cls.instance is None:
                cls.instance = super().__new__(cls)
                cls.instance.sampling_params = {"temperature": 1.0}
                cls.instance.reset()
            return cls.instance

        def __init__(self, args):
            pass

        def reset(self):
            self.remaining_batch_size = 0
            self.pendings = set()
            self.aborted = False

    async def generate_and_rm_group(args, group, sampling_params, evaluation=False):
        task_id = group[0].metadata["task_id"]
        calls.generated.append(task_id)
        await asyncio.sleep(0.001 * (1 + int(task_id.split("-")[1]) % 5))
        rewards = [1.0] * len(group) if solved(task_id) else [1.0, 0.0] * (len(group) // 2)
        return kit.scored_group(group, rewards, task_id)

    async def abort(args, rollout_id):
        state = GenerateState(args)
        assert not state.aborted
        state.aborted = True
        for task in state.pendings:
            task.cancel()
        if state.pendings:
            await asyncio.wait(state.pendings)
        calls.aborted += len(state.pendings)
        return []

    def generate_rollout(args, rollout_id, data_source, evaluation=False):
        calls.evaluated += 1
        return "slime's eval output"

    @dataclass
    class RolloutFnTrainOutput:
        samples: list
        metrics: dict | None = None

    def run(coro):
        return asyncio.run(coro)

    def load_function(path):
        module, _, attr = path.rpartition(".")
        return getattr(importlib.import_module(module), attr)

    modules = {
        "slime": types.ModuleType("slime"),
        "slime.rollout": types.ModuleType("slime.rollout"),
        "slime.rollout.sglang_rollout": types.SimpleNamespace(
            GenerateState=GenerateState, generate_and_rm_group=generate_and_rm_group, abort=abort,
            generate_rollout=generate_rollout),
        "slime.rollout.base_types": types.SimpleNamespace(RolloutFnTrainOutput=RolloutFnTrainOutput),
        "slime.rollout.filter_hub": types.ModuleType("slime.rollout.filter_hub"),
        "slime.rollout.filter_hub.base_types": types.SimpleNamespace(
            DynamicFilterOutput=DynamicFilterOutput, MetricGatherer=MetricGatherer,
            call_dynamic_filter=call_dynamic_filter),
        "slime.utils": types.ModuleType("slime.utils"),
        "slime.utils.async_utils": types.SimpleNamespace(run=run),
        "slime.utils.misc": types.SimpleNamespace(load_function=load_function),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    modules["slime.rollout"].sglang_rollout = modules["slime.rollout.sglang_rollout"]
    reset_hook_state()
    return calls


@pytest.fixture
def args(tmp_path):
    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"task-{i}", "metadata": {"task_id": f"task-{i}"}}) + "\n"
                               for i in range(90)))
    return SimpleNamespace(
        prompt_data=str(prompts), input_key="prompt", metadata_key="metadata", n_samples_per_prompt=4,
        rollout_seed=0, save=None, load=None, reward_key="reward", shopsim_selection="spread",
        rollout_batch_size=4, over_sampling_batch_size=8, shopsim_max_consecutive_failed_groups=8,
        dynamic_sampling_filter_path="shopsimrl.slime_runtime.fully_scored_group_filter",
        rollout_sample_filter_path=None,
        rollout_all_samples_process_path="shopsimrl.slime_metrics.record_generated_rollout_groups",
        shopsim_wave_cushion=0.5, shopsim_trace_dir=None,
    )


def test_each_step_returns_the_target_in_slime_s_shape_and_learns(fake_slime, args, kit):
    from shopsimrl.slime.rollout_fn import generate_rollout

    source = SelectorDataSource(args, sample_cls=kit.Sample)
    generated_per_step = []
    informative_per_step = []
    for rollout_id in range(6):
        before, aborted_before = len(fake_slime.generated), fake_slime.aborted
        out = generate_rollout(args, rollout_id, source)
        generated_per_step.append(len(fake_slime.generated) - before)
        aborted = fake_slime.aborted - aborted_before
        assert len(out.samples) == args.rollout_batch_size
        indices = [g[0].index for g in out.samples]
        assert indices == sorted(indices)  # sorted as slime sorts kept groups
        assert all(len(g) == args.n_samples_per_prompt for g in out.samples)
        informative_per_step.append(sum(not solved(g[0].metadata["task_id"]) for g in out.samples))
        drops = out.metrics.get(f"rollout/dynamic_filter/drop_{REASON_ZERO_STD}", 0)
        assert args.rollout_batch_size + drops + aborted <= generated_per_step[-1]  # the rest: surplus
        assert generated_per_step[-1] <= args.over_sampling_batch_size + drops  # one wave, refills past drops
        assert source.selector.in_flight == frozenset()  # the all-samples hook recorded / released everything
    # the selector learns that two prompts in three are always solved: later steps train on the others,
    # though half of its picks still explore never-seen prompts (one in three informative)
    assert sum(informative_per_step[-3:]) >= 0.6 * 3 * args.rollout_batch_size


def test_evaluation_is_slime_s_and_a_plain_data_source_is_refused(fake_slime, args, kit):
    from shopsimrl.slime.rollout_fn import generate_rollout

    assert generate_rollout(args, 0, SelectorDataSource(args, sample_cls=kit.Sample), evaluation=True) == \
        "slime's eval output"
    with pytest.raises(ValueError, match="--data-source-path shopsimrl.slime.data_source.SelectorDataSource"):
        generate_rollout(args, 0, SimpleNamespace(get_samples=lambda n: []))
