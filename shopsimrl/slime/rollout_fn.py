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

Staged siblings (opt-in, docs/dynamic-sampling.md R29): ``shopsim_siblings: staged`` (and
``shopsim_stage_size``, default ``n_samples_per_prompt // 2``).  A staged group's siblings are
submitted one by one with slime's per-sample ``generate_and_rm`` (``K`` first, then the rest);
the filter judges the whole group, or the step decides it as a zero-std drop after ``K`` (the
all-samples hook then hears its ``K`` samples).  The metrics carry
``rollout/shopsim/staged/groups_stopped_early`` and ``.../episodes_saved``.  Not with ``--group-rm``
(a group reward model needs the whole group at once).
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

from shopsimrl.sampling import ConsecutiveFailureGuard, Decision, GroupDecision
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, AdaptiveWaves
from shopsimrl.sampling.filter import REASON_ZERO_STD, verdict_of
from shopsimrl.sampling.staged import Siblings, StagedSiblings, staged_step_metrics
from shopsimrl.sampling.step import AdaptiveRefills, RolloutStep, Start
from shopsimrl.sampling.verdict import is_scored, sample_reward


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

    def predicted_zero_spread(self, group: list[Any]) -> None:
        """No prediction for a fixed wave's group: with staged siblings it starts its first ``K`` (adaptive
        refills carry the selector's chance of spread in ``next_prompt``)."""
        return None

    def predicted_logit(self, group: list[Any]) -> tuple[float, float] | None:
        """Staged siblings: the selector's pass-rate logit for the group's prompt (``None``: not its pick)."""
        task_id = (group[0].metadata or {}).get("task_id", group[0].prompt)
        selector = self.data_source.selector
        return selector.predicted_logit(task_id) if task_id in selector.in_flight else None

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
    staging = staging_of(args)
    step = RolloutStep(target, wave, source=DataSourceGroups(data_source),
                       sizer=AdaptiveRefills(refills, int(args.n_samples_per_prompt)),
                       guard=ConsecutiveFailureGuard(sys.maxsize),  # the filter hook raises the stop, as on slime's path
                       staging=staging)
    first_stage: set[int] = set()  # staged groups running their first K
    parts: dict[int, list[Any]] = {}  # a staged group's samples back so far
    key = getattr(args, "reward_key", None)
    index_of: dict[asyncio.Task[Any], int] = {}
    reasons: dict[int, str | None] = {}
    finished: dict[int, list[Any]] = {}
    data: list[list[Any]] = []
    all_data: list[list[Any]] = []

    def act(actions: list[Any]) -> None:
        for action in actions:
            if type(action) is Start:
                if len(action.siblings) == len(action.prompt):
                    task = asyncio.create_task(sglang_rollout.generate_and_rm_group(
                        args, action.prompt, sampling_params=state.sampling_params.copy(), evaluation=False))
                else:  # staged siblings: these samples only, each with slime's per-sample generate_and_rm
                    if action.siblings.start == 0:
                        first_stage.add(action.index)
                    task = asyncio.create_task(_siblings(args, action.prompt, action.siblings, state.sampling_params))
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
        batch, firsts = [], []
        for task in done:
            index = index_of.pop(task)
            group = task.result()
            if index in first_stage:
                first_stage.discard(index)
                parts[index] = list(group)
                firsts.append(index)
                continue
            if index in parts:  # the rest of a staged group: judged whole
                group = [*parts.pop(index), *group]
            all_data.append(group)
            output = call_dynamic_filter(dynamic_filter, args, group)
            batch.append((index, verdict_of(output), None))
            reasons[index], finished[index] = output.reason, group
        act(step.complete_batch(batch))
        for index in sorted(firsts):
            if step.done:
                break  # the batch is full: aborted with the rest
            head = parts[index]
            actions = step.first_stage(index, [sample_reward(s, key) if is_scored(s, key) else None for s in head])
            if any(type(a) is GroupDecision and a.index == index for a in actions):
                all_data.append(parts.pop(index))  # decided after K: the all-samples hook hears what was generated
                reasons[index] = REASON_ZERO_STD
            act(actions)

    aborted = await sglang_rollout.abort(args, rollout_id)
    step.close()
    data.sort(key=_index_of)
    all_samples = sorted(all_data, key=_index_of)
    state.reset()
    if getattr(args, "rollout_sample_filter_path", None) is not None:
        load_function(args.rollout_sample_filter_path)(args, data)
    if getattr(args, "rollout_all_samples_process_path", None) is not None:
        load_function(args.rollout_all_samples_process_path)(args, all_samples, data_source)
    metrics = gatherer.collect()
    if staging is not None:
        metrics.update(staged_step_metrics(step.stage_counts))
    return data, metrics, aborted


def staging_of(args: Any) -> StagedSiblings | None:
    """``shopsim_siblings`` / ``shopsim_stage_size`` (custom config) as the step's staging, or ``None``."""
    if Siblings.parse(getattr(args, "shopsim_siblings", None) or Siblings.ALL) is not Siblings.STAGED:
        return None
    if getattr(args, "group_rm", False):
        raise ValueError("shopsim_siblings: staged submits siblings one by one; a group reward model (--group-rm) "
                         "needs the whole group at once: drop one of the two")
    return StagedSiblings.of(int(args.n_samples_per_prompt), getattr(args, "shopsim_stage_size", None))


async def _siblings(args: Any, group: list[Any], siblings: range, sampling_params: dict[str, Any]) -> list[Any]:
    """Some of a group's samples, each through slime's ``generate_and_rm`` (as ``generate_and_rm_group`` does
    for all of them: a session id per sample, a copy of the sampling parameters each)."""
    from slime.rollout import sglang_rollout

    samples = [group[s] for s in siblings]
    for sample in samples:
        if getattr(sample, "session_id", None) is None:
            sample.session_id = str(uuid.uuid4())
    return list(await asyncio.gather(*(sglang_rollout.generate_and_rm(args, sample, sampling_params.copy(),
                                                                      evaluation=False) for sample in samples)))
