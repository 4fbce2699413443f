"""The adaptive-waves rollout function against the slime double (``shopsimrl/slime/harness/double``).

slime is not installed here: the double stands in for every slime name the function imports
(``GenerateState``, ``generate_and_rm_group`` / ``generate_and_rm``, ``abort`` against the scripted
SGLang as slime's router, the filter hub's ``MetricGatherer``, ``RolloutFnTrainOutput``, ``run``,
``load_function``), each read from slime's source.  Episodes are :func:`scripted_generate`, slime's
``--custom-generate-function-path``: two prompts in three always solved, the others alternating.
"""

from __future__ import annotations

import asyncio
import json
import sys
from types import SimpleNamespace

import pytest

from shopsimrl.sampling.filter import REASON_ZERO_STD
from shopsimrl.slime import rollout_fn
from shopsimrl.slime.data_source import SelectorDataSource
from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving


def solved(task_id: str) -> bool:
    return int(task_id.split("-")[1]) % 3 != 0  # two prompts in three are always solved


async def scripted_generate(args, sample, sampling_params, evaluation=False):
    """One episode: a few milliseconds (per prompt), then the scripted reward; aborted once slime's abort began."""
    task_id = sample.metadata["task_id"]
    args.script.started.append((sample.group_index, task_id))
    await asyncio.sleep(0.001 * (1 + int(task_id.split("-")[1]) % 5))
    if slime_double.GenerateState(args).aborted:
        sample.status = slime_double.Sample.Status.ABORTED
        return sample
    reward = 1.0 if solved(task_id) else float(sample.index % 2)
    sample.rollout_id = sample.index
    sample.reward = {"reward": reward, "r_strict": reward, "r_success": reward}
    sample.metadata = {**sample.metadata, "shopsim_scored": True}
    sample.status = slime_double.Sample.Status.COMPLETED
    return sample


@pytest.fixture
def slime(monkeypatch):
    """The slime double, with slime's router (the scripted SGLang, for ``abort``) serving."""
    module = slime_double.install(monkeypatch)
    with serving(ScriptedSGLang()) as router:
        yield SimpleNamespace(module=module, router=router)


@pytest.fixture
def args(tmp_path, slime):
    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"task-{i}", "metadata": {"task_id": f"task-{i}"}}) + "\n"
                               for i in range(90)))
    return slime_double.slime_args(
        prompt_data=str(prompts), input_key="prompt", metadata_key="metadata", n_samples_per_prompt=4,
        save=None, load=None, shopsim_selection="spread",
        rollout_batch_size=4, over_sampling_batch_size=8, sampling_params={"temperature": 1.0},
        sglang_router_ip="127.0.0.1", sglang_router_port=slime.router.port,
        custom_generate_function_path=f"{__name__}.scripted_generate",
        dynamic_sampling_filter_path="shopsimrl.slime_runtime.fully_scored_group_filter",
        rollout_sample_filter_path=None,
        rollout_all_samples_process_path="shopsimrl.slime_metrics.record_generated_rollout_groups",
        shopsim_wave_cushion=0.5, shopsim_trace_dir=None, script=SimpleNamespace(started=[]),
    )


def groups_started(args) -> int:
    return len({group for group, _ in args.script.started})


def test_each_step_returns_the_target_in_slime_s_shape_and_learns(args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    informative_per_step = []
    for rollout_id in range(6):
        before = groups_started(args)
        out = rollout_fn.generate_rollout(args, rollout_id, source)
        started = groups_started(args) - before
        assert len(out.samples) == args.rollout_batch_size
        indices = [g[0].index for g in out.samples]
        assert indices == sorted(indices)  # sorted as slime sorts kept groups
        assert all(len(g) == args.n_samples_per_prompt for g in out.samples)
        informative_per_step.append(sum(not solved(g[0].metadata["task_id"]) for g in out.samples))
        drops = out.metrics.get(f"rollout/dynamic_filter/drop_{REASON_ZERO_STD}", 0)
        assert args.rollout_batch_size + drops <= started  # the rest: surplus or aborted
        assert started <= args.over_sampling_batch_size + drops  # one wave, refills past drops
        assert source.selector.in_flight == frozenset()  # the step's close() settled every group it started
    # the selector learns that two prompts in three are always solved: later steps train on the others,
    # though half of its picks still explore never-seen prompts (one in three informative)
    assert sum(informative_per_step[-3:]) >= 0.6 * 3 * args.rollout_batch_size


def test_the_step_settles_the_data_source_surplus_released_with_its_evidence(args, kit, monkeypatch):
    """The step's close() is the one feedback: kept and dropped groups recorded, surplus ones released with their
    rewards (never recorded), aborted ones released; the all-samples hook, after it, finds nothing in flight."""
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    steps, told = [], []
    real_step = rollout_fn.rollout_step
    monkeypatch.setattr(rollout_fn, "rollout_step", lambda *a: steps.append(real_step(*a)) or steps[-1])
    for name in ("record", "release"):
        real = getattr(source.selector, name)

        def heard(task, rewards=None, _name=name, _real=real):
            told.append((_name, task, rewards is not None))
            return _real(task, rewards)

        monkeypatch.setattr(source.selector, name, heard)
    surplus = 0
    for rollout_id in range(12):
        del told[:]
        rollout_fn.generate_rollout(args, rollout_id, source)
        done = steps[-1].close()
        prompt = {i: steps[-1].prompts[i][0].metadata["task_id"] for i in steps[-1].prompts}
        recorded = sorted(task for name, task, _ in told if name == "record")
        released = {task: with_rewards for name, task, with_rewards in told if name == "release"}
        dropped = [i for ids in done.dropped.values() for i in ids]
        assert recorded == sorted(prompt[i] for i in [*done.kept, *dropped])
        assert {prompt[i] for i in done.surplus} | {prompt[i] for i in done.aborted} == set(released)
        assert all(released[prompt[i]] for i in done.surplus), "a surplus group is released with its rewards"
        assert not any(released[prompt[i]] for i in done.aborted)
        surplus += len(done.surplus)
        if surplus and rollout_id >= 3:
            break
    assert surplus, "no step had a surplus group: the case went untested"


def test_evaluation_is_slime_s_and_a_plain_data_source_is_refused(args, kit, slime, monkeypatch):
    calls = []
    monkeypatch.setattr(slime.module, "generate_rollout", lambda *a, **k: calls.append(k) or "slime's eval output")
    assert rollout_fn.generate_rollout(args, 0, SelectorDataSource(args, sample_cls=kit.Sample),
                                       evaluation=True) == "slime's eval output"
    assert calls == [{"evaluation": True}]
    with pytest.raises(ValueError, match="--data-source-path shopsimrl.slime.data_source.SelectorDataSource"):
        rollout_fn.generate_rollout(args, 0, SimpleNamespace(get_samples=lambda n: []))


def test_a_foreign_filter_is_refused(args, kit):
    args.dynamic_sampling_filter_path = "my_project.filters.keep_long_answers"
    with pytest.raises(ValueError, match="--dynamic-sampling-filter-path my_project.filters.keep_long_answers"):
        rollout_fn.generate_rollout(args, 0, SelectorDataSource(args, sample_cls=kit.Sample))


def test_the_filter_hook_is_not_called_under_the_rollout_function(args, kit, monkeypatch):
    """The verdict is taken from the samples once, by the step's shell; the filter hook is slime's own loop's."""
    import shopsimrl.slime_runtime as runtime

    monkeypatch.setattr(runtime, "fully_scored_group_filter", lambda *a, **k: pytest.fail("the filter hook ran"))
    out = rollout_fn.generate_rollout(args, 0, SelectorDataSource(args, sample_cls=kit.Sample))
    assert len(out.samples) == args.rollout_batch_size
    assert "slime" in sys.modules
