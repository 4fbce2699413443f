"""slime's data source as a rollout step's selector: each prompt the step starts is a group of slime samples.

The adaptive rollout function (:mod:`shopsimrl.slime.rollout_fn`) hands this to
:class:`~shopsimrl.sampling.step.RolloutStep`, so the step picks from the
:class:`~shopsimrl.slime.data_source.SelectorDataSource` exactly as slime's loop would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shopsimrl.slime.samples import sample_weight, task_of


class DataSourceGroups:
    """slime's data source as the step's selector: each pick is a group of slime samples, with the
    selector's predicted chance of spread for its prompt (0 for a partial group buffered before a resume).

    The step's ``close()`` settles the data source through :meth:`settle` and :meth:`release`: every group it
    started, surplus included, before slime's all-samples hook runs.
    """

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    @property
    def skipped_turns(self) -> int:
        """The selector's skipped turns: adaptive waves count them against the step's budget, as in the main job."""
        return int(self.data_source.selector.skipped_turns)

    def next_prompt(self) -> tuple[list[Any], float]:
        (group,) = self.data_source.get_samples(1)
        task_id = task_of(group)
        selector = self.data_source.selector
        return group, 1.0 - selector.predicted_zero_spread(task_id) if task_id in selector.in_flight else 0.0

    def predicted_zero_spread(self, group: list[Any]) -> None:
        """No prediction for a fixed wave's group: with staged siblings it starts its first ``K`` (adaptive
        refills carry the selector's chance of spread in ``next_prompt``)."""
        return None

    def predicted_logit(self, group: list[Any]) -> tuple[float, float] | None:
        """Staged siblings: the selector's pass-rate logit for the group's prompt (``None``: not its pick)."""
        task_id = task_of(group)
        selector = self.data_source.selector
        return selector.predicted_logit(task_id) if task_id in selector.in_flight else None

    def weight(self, group: list[Any]) -> float:
        """The importance weight the group's samples carry (the reward post-process applies it)."""
        return sample_weight(group[0])

    def next_prompts(self, k: int) -> list[list[Any]]:
        return self.data_source.get_samples(k)

    def settle(self, group: Sequence[Any], rewards: Sequence[float] | None, *, surplus: bool = False) -> None:
        """A decided group at step end: recorded, or released (unscored; surplus, with its evidence)."""
        selector, task_id = self.data_source.selector, task_of(group)
        if task_id in selector.in_flight:  # else a buffered partial group handed out before a resume
            selector.settle(task_id, rewards, surplus=surplus)

    def release(self, group: Sequence[Any], rewards: Sequence[float] | None = None) -> None:
        """A group aborted at step end: its prompt out of flight."""
        selector, task_id = self.data_source.selector, task_of(group)
        if task_id in selector.in_flight:
            selector.release(task_id, rewards)
