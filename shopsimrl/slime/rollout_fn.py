"""An optional ``--rollout-function-path`` for slime: adaptive waves, a shell around ``RolloutStep``.

slime calls ``generate_rollout(args, rollout_id, data_source, evaluation=False)``
(``slime/ray/rollout.py`` via ``call_rollout_fn``) and expects a
``RolloutFnTrainOutput(samples, metrics)`` with ``rollout_batch_size`` groups.  This
function does what slime's ``generate_rollout_async`` does (same generation
primitives: ``GenerateState``, ``generate_and_rm_group``, ``abort``; the same
filter call, drop metrics, sample filter and all-samples hook) with one change:
instead of whole waves of ``over_sampling_batch_size`` it submits the groups the
:class:`~shopsimrl.sampling.adaptive.AdaptiveWaves` rule asks for, one prompt at a
time from the :class:`~shopsimrl.slime.data_source.SelectorDataSource`, and
:class:`~shopsimrl.sampling.step.RolloutStep` (its ``WaveController``) applies slime's drop
rule, the fallback and ``remaining``.  When the batch is full it calls slime's ``abort``
(servers aborted until idle, every pending group awaited); partial groups slime
hands back go to the data source, as slime's ``generate_rollout`` does.

Evaluation is slime's own ``generate_rollout``.  The consecutive-failure stop stays
in the filter hook (``fully_scored_group_filter``), which raises it, as on slime's
path; the controller here only applies the wave rules.  Setting (custom config):
``shopsim_wave_cushion`` (default ``DEFAULT_CUSHION`` expected informative groups).  Requires ``--data-source-path
shopsimrl.slime.data_source.SelectorDataSource``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from shopsimrl.sampling import ConsecutiveFailureGuard, Decision, GroupDecision
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, AdaptiveWaves
from shopsimrl.sampling.filter import verdict_of
from shopsimrl.sampling.step import AdaptiveRefills, RolloutStep, Start


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    from slime.rollout import sglang_rollout
    from slime.rollout.base_types import RolloutFnTrainOutput
    from slime.utils.async_utils import run

    if evaluation:
        return sglang_rollout.generate_rollout(args, rollout_id, data_source, evaluation=True)
    if getattr(data_source, "selector", None) is None:
        raise ValueError(
            "shopsimrl.slime.rollout_fn.generate_rollout sizes waves from the prompt selector's predictions: "
            "set --data-source-path shopsimrl.slime.data_source.SelectorDataSource"
        )
    samples, metrics, aborted = run(adaptive_rollout_async(args, rollout_id, data_source))
    if aborted:
        data_source.add_samples(aborted)
    return RolloutFnTrainOutput(samples=samples, metrics=metrics)


def _index_of(group: list[Any]) -> int:
    first = group[0][0] if isinstance(group[0], list) else group[0]
    return int(first.index)


class DataSourceGroups:
    """slime's data source as the step's prompt source: each pick is a group of slime samples, with the
    selector's predicted chance of spread for its prompt (0 for a partial group buffered before a resume).

    The results reach the selector through slime's all-samples hook (``record_groups``), as on slime's own
    path, so ``settle`` and ``release`` do nothing here.
    """

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def next_prompt(self) -> tuple[list[Any], float]:
        (group,) = self.data_source.get_samples(1)
        task_id = (group[0].metadata or {}).get("task_id", group[0].prompt)
        selector = self.data_source.selector
        return group, 1.0 - selector.predicted_zero_spread(task_id) if task_id in selector.in_flight else 0.0

    def next_prompts(self, k: int) -> list[list[Any]]:
        return self.data_source.get_samples(k)

    def settle(self, prompt_id: Any, rewards: Any, *, surplus: bool = False) -> None:
        return None

    def release(self, prompt_id: Any, rewards: Any = None) -> None:
        return None


async def adaptive_rollout_async(args: Any, rollout_id: int, data_source: Any) -> tuple[list, dict, list]:
    """(kept groups sorted by sample index, slime's drop metrics, aborted partial groups)."""
    from slime.rollout import sglang_rollout
    from slime.rollout.filter_hub.base_types import MetricGatherer, call_dynamic_filter
    from slime.utils.misc import load_function

    state = sglang_rollout.GenerateState(args)
    path = getattr(args, "dynamic_sampling_filter_path", None)
    dynamic_filter = load_function(path) if path is not None else None
    gatherer = MetricGatherer()
    target, wave = int(args.rollout_batch_size), int(args.over_sampling_batch_size)
    cushion = getattr(args, "shopsim_wave_cushion", None)  # 0 is a valid cushion: no `or` default
    refills = AdaptiveWaves(target, wave, DEFAULT_CUSHION if cushion is None else float(cushion))
    step = RolloutStep(target, wave, source=DataSourceGroups(data_source),
                       sizer=AdaptiveRefills(refills, int(args.n_samples_per_prompt)),
                       guard=ConsecutiveFailureGuard(sys.maxsize))  # the filter hook raises the stop, as on slime's path
    index_of: dict[asyncio.Task[Any], int] = {}
    reasons: dict[int, str | None] = {}
    finished: dict[int, list[Any]] = {}
    data: list[list[Any]] = []
    all_data: list[list[Any]] = []

    def act(actions: list[Any]) -> None:
        for action in actions:
            if type(action) is Start:
                task = asyncio.create_task(sglang_rollout.generate_and_rm_group(
                    args, action.prompt, sampling_params=state.sampling_params.copy(), evaluation=False))
                state.pendings.add(task)
                index_of[task] = action.index
            elif type(action) is GroupDecision:
                if action.decision is Decision.DROPPED:
                    gatherer.on_dynamic_filter_drop(reason=reasons[action.index])
                elif action.decision in (Decision.ACCEPTED, Decision.FALLBACK):
                    data.append(finished[action.index])
        state.remaining_batch_size = step.controller.remaining

    act(step.start())
    while not step.done:
        done, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
        batch = []
        for task in done:
            index = index_of.pop(task)
            group = task.result()
            all_data.append(group)
            output = call_dynamic_filter(dynamic_filter, args, group)
            batch.append((index, verdict_of(output), None))
            reasons[index], finished[index] = output.reason, group
        act(step.complete_batch(batch))

    aborted = await sglang_rollout.abort(args, rollout_id)
    step.close()
    data.sort(key=_index_of)
    all_samples = sorted(all_data, key=_index_of)
    state.reset()
    if getattr(args, "rollout_sample_filter_path", None) is not None:
        load_function(args.rollout_sample_filter_path)(args, data)
    if getattr(args, "rollout_all_samples_process_path", None) is not None:
        load_function(args.rollout_all_samples_process_path)(args, all_samples, data_source)
    return data, gatherer.collect(), aborted
