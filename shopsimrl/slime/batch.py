"""The batch a slime rollout step hands the trainer, assembled as slime's ``generate_rollout_async`` does.

Every finished group is judged once, from its samples (``scored_rewards``: the verdict and the rewards the
step hears); drops are counted in slime's ``MetricGatherer`` under the filter's reasons; at step end the kept
groups, sorted by sample index, go through the sample filter and every generated group through the
all-samples hook.  The dynamic-sampling filter hook is slime's own loop's (:mod:`shopsimrl.slime.filter`): here
the step applies the same rule itself.  slime is imported when used, never at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shopsimrl.sampling.controller import Decision, GroupDecision
from shopsimrl.sampling.filter import REASON_ZERO_STD, filter_output
from shopsimrl.sampling.verdict import Verdict, is_scored, reward_spread_verdict, sample_reward
from shopsimrl.slime.samples import scored_rewards
from shopsimrl.slime.settings import slime_settings


def _index_of(group: list[Any]) -> int:
    """A group's first sample index: slime's order for the batch."""
    first = group[0][0] if isinstance(group[0], list) else group[0]
    return int(first.index)


class SlimeBatch:
    """Judges finished groups from their samples, and collects the kept groups and slime's drop metrics."""

    def __init__(self, args: Any) -> None:
        # slime: only inside slime's process, never at import
        from slime.rollout.filter_hub.base_types import MetricGatherer

        self.args = args
        self.gatherer = MetricGatherer()
        self.reward_key = slime_settings(args).reward_key
        self.data: list[list[Any]] = []  # the kept groups, as they enter the batch
        self.all_data: list[list[Any]] = []  # every group generated (the all-samples hook's)
        self._reasons: dict[int, str | None] = {}
        self._finished: dict[int, list[Any]] = {}

    def judge(self, index: int, group: list[Any]) -> tuple[Verdict, Sequence[float] | None]:
        """A whole group back: its verdict and its rewards per unique rollout (``None``: unscored), taken from its
        samples once; the drop reason is the filter's for that verdict."""
        self.all_data.append(group)
        rewards = scored_rewards(group, self.reward_key)
        verdict = Verdict.TECHNICAL if rewards is None else reward_spread_verdict(rewards)
        self._reasons[index], self._finished[index] = filter_output(verdict).reason, group
        return verdict, rewards

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
