"""slime's data source as a rollout step's prompt source: each prompt the step starts is a group of slime samples.

The adaptive rollout function (:mod:`shopsimrl.slime.rollout_fn`) hands this to
:class:`~shopsimrl.sampling.step.RolloutStep`, so the step picks from the
:class:`~shopsimrl.slime.data_source.SelectorDataSource` exactly as slime's loop would.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.slime.samples import sample_weight


class DataSourceGroups:
    """slime's data source as the step's prompt source: each pick is a group of slime samples, with the
    selector's predicted chance of spread for its prompt (0 for a partial group buffered before a resume).

    The results reach the selector through slime's all-samples hook (``record_groups``), as on slime's own
    path, so ``settle`` and ``release`` do nothing here.
    """

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    @property
    def skipped_turns(self) -> int:
        """The selector's skipped turns: adaptive waves count them against the step's budget, as in the main job."""
        return int(self.data_source.selector.skipped_turns)

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

    def weight(self, group: list[Any]) -> float:
        """The importance weight the group's samples carry (the reward post-process applies it)."""
        return sample_weight(group[0])

    def next_prompts(self, k: int) -> list[list[Any]]:
        return self.data_source.get_samples(k)

    def settle(self, prompt_id: Any, rewards: Any, *, surplus: bool = False) -> None:
        return None

    def release(self, prompt_id: Any, rewards: Any = None) -> None:
        return None
