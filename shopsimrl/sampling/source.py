"""``Selector``: what a rollout step asks of its prompts, and the one place a selection becomes a source.

Every source is a :class:`~shopsimrl.sampling.selector.RuleSelector`: the shared evidence
(:class:`~shopsimrl.sampling.evidence.Evidence`) plus one rule, a class per selection (``SELECTION_RULES``):
the faithful :class:`~shopsimrl.sampling.order.SeedOrder`, the informative skip
:class:`~shopsimrl.sampling.skip.SkipOrder` and the spread rule
:class:`~shopsimrl.sampling.spread.SpreadSelector`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from shopsimrl.sampling.adaptive import horizon_for_waves
from shopsimrl.sampling.forecast_order import ForecastOrder
from shopsimrl.sampling.modes import DEFAULT_WAVE_MODE, Selection, WaveMode
from shopsimrl.sampling.order import SeedOrder
from shopsimrl.sampling.selector import RuleSelector
from shopsimrl.sampling.skip import SkipOrder, skip_share_for_waves
from shopsimrl.sampling.spread import SpreadSelector

#: The rule of each selection.
SELECTION_RULES: dict[Selection, type[RuleSelector]] = {
    Selection.SEED: SeedOrder,
    Selection.SKIP: SkipOrder,
    Selection.SPREAD: SpreadSelector,
    Selection.FORECAST: ForecastOrder,
}


class Selector(Protocol):
    """Hands out prompts to start and hears back what became of each (at step end)."""

    #: Turns of the prompt order skipped since the source began, never decreasing (0 for a rule that never skips):
    #: adaptive waves count the turns a step skips against its budget.
    skipped_turns: int

    def next_prompts(self, k: int) -> list[Hashable]:
        """``k`` distinct prompts, none in flight (a fixed wave)."""
        ...

    def next_prompt(self) -> tuple[Hashable, float]:
        """One prompt and its predicted chance of a group with spread (an adaptive refill)."""
        ...

    def weight(self, prompt_id: Hashable) -> float:
        """The importance weight (>= 1) of the prompt's hand-out now in flight: its group's advantages are
        multiplied by it.  1 unless the rule could have skipped the prompt at that turn."""
        ...

    def settle(self, prompt_id: Hashable, rewards: Sequence[float] | None, *, surplus: bool = False) -> None:
        """A decided group's result, told when its step ends (``RolloutStep.close``): the step settles its
        account with the source.  Recorded, or released (unscored, or surplus with its evidence)."""
        ...

    def release(self, prompt_id: Hashable, rewards: Sequence[float] | None = None) -> None:
        """A started prompt with no result (aborted): out of flight."""
        ...

    def predicted_zero_spread(self, prompt_id: Hashable) -> float | None:
        """Predicted chance that the prompt's next group has no reward spread (``None``: no prediction)."""
        ...

    def predicted_logit(self, prompt_id: Hashable) -> tuple[float, float] | None:
        """Mean and variance of the prompt's pass-rate logit (``None``: no prediction): staged siblings' rule."""
        ...


def new_selector(
    selection: Selection | str,
    prompt_ids: Iterable[Hashable],
    n_samples_per_prompt: int,
    seed: int = 0,
    *,
    waves: WaveMode | str = DEFAULT_WAVE_MODE,
    explore_horizon_epochs: float | None = None,
    clusters: Mapping[Hashable, Hashable] | Sequence[Hashable] | None = None,
    descriptions: Mapping[Hashable, Mapping[str, Any]] | None = None,
) -> RuleSelector:
    """The selector of ``selection`` (``ValueError`` naming the choices for an unknown one) for steps of the
    wave mode ``waves``: the skip rule's share of a pass it may skip is the wave mode's
    (``skip_share_for_waves``), and so is the spread rule's exploration horizon unless given.

    ``explore_horizon_epochs`` paces the spread rule's exploration (default ``horizon_for_waves(waves)``; the
    other rules walk the seed's order and need none).  ``clusters``: each prompt's cluster label, when known (the spread rule
    explores by cluster; every rule's evidence predicts never-seen prompts and reports coverage per cluster).
    ``descriptions``: each prompt's text and labels (``{"instruction": ..., "category": ...}``), read by the
    ``forecast`` rule alone."""
    rule = SELECTION_RULES[Selection.parse(selection)]
    if rule is SpreadSelector:
        horizon = horizon_for_waves(waves) if explore_horizon_epochs is None else explore_horizon_epochs
        return SpreadSelector(prompt_ids, n_samples_per_prompt, seed=seed, explore_horizon_epochs=horizon,
                            clusters=clusters)
    if rule is ForecastOrder:
        return ForecastOrder(prompt_ids, n_samples_per_prompt, seed=seed, clusters=clusters,
                             max_skip_share=skip_share_for_waves(waves), descriptions=descriptions)
    if rule is SkipOrder:
        return SkipOrder(prompt_ids, n_samples_per_prompt, seed=seed, clusters=clusters,
                                max_skip_share=skip_share_for_waves(waves))
    return rule(prompt_ids, n_samples_per_prompt, seed=seed, clusters=clusters)


def selector_from_state(state: dict[str, Any]) -> RuleSelector:
    """A source saved by ``state_dict()``, of the selection it was saved with."""
    return SELECTION_RULES[Selection.parse(state.get("strategy"))].from_state_dict(state)
