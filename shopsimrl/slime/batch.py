"""The batch a slime rollout step hands the trainer, assembled as slime's ``generate_rollout_async`` does.

Every finished group goes through slime's ``call_dynamic_filter`` (the filter hook, which also
raises the consecutive-failure stop); drops are counted in slime's ``MetricGatherer``; at step
end the kept groups, sorted by sample index, go through the sample filter and every generated
group through the all-samples hook.  slime is imported when used, never at import.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.sampling.controller import Decision, GroupDecision
from shopsimrl.sampling.filter import REASON_ZERO_STD, verdict_of
from shopsimrl.sampling.step import Completion
from shopsimrl.sampling.verdict import is_scored, sample_reward


def _index_of(group: list[Any]) -> int:
    """A group's first sample index: slime's order for the batch."""
    first = group[0][0] if isinstance(group[0], list) else group[0]
    return int(first.index)


class SlimeBatch:
    """Judges finished groups with slime's filter call, and collects the kept groups and slime's drop metrics."""

    def __init__(self, args: Any) -> None:
        # slime: only inside slime's process, never at import
        from slime.rollout.filter_hub.base_types import MetricGatherer, call_dynamic_filter
        from slime.utils.misc import load_function

        self.args = args
        path = getattr(args, "dynamic_sampling_filter_path", None)
        self._filter = load_function(path) if path is not None else None
        self._call_filter = call_dynamic_filter
        self.gatherer = MetricGatherer()
        self.reward_key = getattr(args, "reward_key", None)
        self.data: list[list[Any]] = []  # the kept groups, as they enter the batch
        self.all_data: list[list[Any]] = []  # every group generated (the all-samples hook's)
        self._reasons: dict[int, str | None] = {}
        self._finished: dict[int, list[Any]] = {}

    def judge(self, index: int, group: list[Any]) -> Completion:
        """A whole group back: slime's filter call, as the step's completion (its verdict, no rewards: the
        selector hears them through the all-samples hook)."""
        self.all_data.append(group)
        output = self._call_filter(self._filter, self.args, group)
        self._reasons[index], self._finished[index] = output.reason, group
        return index, verdict_of(output), None

    def first_stage_rewards(self, head: list[Any]) -> list[float | None]:
        """A staged group's first ``K`` rewards, as the step hears them (``None``: unscored)."""
        key = self.reward_key
        return [sample_reward(s, key) if is_scored(s, key) else None for s in head]

    def stopped_early(self, index: int, head: list[Any]) -> None:
        """Decided after ``K``: the all-samples hook hears what was generated, the drop counts as zero-std."""
        self.all_data.append(head)
        self._reasons[index] = REASON_ZERO_STD

    def decided(self, decision: GroupDecision) -> None:
        if decision.decision is Decision.DROPPED:
            self.gatherer.on_dynamic_filter_drop(reason=self._reasons[decision.index])
        elif decision.decision in (Decision.ACCEPTED, Decision.FALLBACK):
            self.data.append(self._finished[decision.index])

    def finish(self, data_source: Any) -> tuple[list[list[Any]], dict[str, Any]]:
        """Step end: (the kept groups sorted by sample index, through the sample filter; slime's drop metrics),
        after the all-samples hook has heard every generated group."""
        # slime: only inside slime's process, never at import
        from slime.utils.misc import load_function

        args, data = self.args, self.data
        data.sort(key=_index_of)
        all_samples = sorted(self.all_data, key=_index_of)
        if getattr(args, "rollout_sample_filter_path", None) is not None:
            load_function(args.rollout_sample_filter_path)(args, data)
        if getattr(args, "rollout_all_samples_process_path", None) is not None:
            load_function(args.rollout_all_samples_process_path)(args, all_samples, data_source)
        return data, self.gatherer.collect()
