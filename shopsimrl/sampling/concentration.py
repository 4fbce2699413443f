"""``Concentration``: how unevenly a run trains its prompts, per step, whatever the selection rule.

The main job's learner showed that a rule which trains a few prompts over and over trains a worse
policy (docs/selection.md, "Why the rule changed").  Three figures make that visible in
every run, under ``rollout/shopsim/concentration/``:

- ``distinct_prompts_epoch``: distinct prompts with a trained (kept) group in the current epoch
  pass.  The epoch pass is the selector's (:attr:`RuleSelector.epoch`): for the seed order and the
  skip rule, one walk through the seed's shuffle of the prompt set, begun when the previous
  one ran out; for the spread rule, which has no order, each ``len(prompts)`` hand-outs.  A group
  counts in the pass that is current when its step ends;
- ``max_trainings_per_prompt``: the most trained groups of one prompt since the run began;
- ``top10_share``: the share of all trained groups that went to the 10 most-trained prompts.

And ``seed_order_bound``: the most groups of one prompt the seed order could have trained with
as many hand-outs, ``ceil(hand-outs / prompts)`` (one per epoch pass).  A run *concentrates* when
``max_trainings_per_prompt > CONCENTRATED_FACTOR × seed_order_bound``; its summary says so.

Pure: no I/O.  Its state is part of the selector's, so a resumed run continues the counts.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: Key prefix of the concentration figures (under the project's rollout/shopsim/ namespace).
CONCENTRATION_PREFIX = "rollout/shopsim/concentration/"
DISTINCT_PROMPTS_EPOCH = CONCENTRATION_PREFIX + "distinct_prompts_epoch"
MAX_TRAININGS_PER_PROMPT = CONCENTRATION_PREFIX + "max_trainings_per_prompt"
TOP10_SHARE = CONCENTRATION_PREFIX + "top10_share"
SEED_ORDER_BOUND = CONCENTRATION_PREFIX + "seed_order_bound"
#: The most-trained prompts whose share ``top10_share`` reports.
TOP_PROMPTS = 10
#: A run concentrates when one prompt was trained more than this many times the seed order's bound: the issue's
#: target for the skip rule (the spread rule reached 24 trainings where the seed order's most was 6).
CONCENTRATED_FACTOR = 1.5


def concentration_line(metrics: Mapping[str, float | None], steps: int) -> str | None:
    """One line for the end-of-run summary when the figures of a run's last step say it concentrates
    (``max_trainings_per_prompt > CONCENTRATED_FACTOR × seed_order_bound``); ``None`` otherwise."""
    most, bound, top = (metrics.get(key) for key in (MAX_TRAININGS_PER_PROMPT, SEED_ORDER_BOUND, TOP10_SHARE))
    if most is None or bound is None or most <= CONCENTRATED_FACTOR * bound:
        return None
    share = "" if top is None else f"; the 10 most-trained prompts took {top:.0%} of trained groups"
    return f"concentrated: one prompt trained {most:.0f} times in {steps} steps (seed order bound: {bound:.0f}{share})"


class Concentration:
    """Trained groups per prompt, and the prompts trained in the current epoch pass (see the module docstring)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # prompt index -> trained groups over the run
        self.total = 0  # trained groups over the run
        self.handed_out = 0  # prompts handed out over the run (for the seed order's bound)
        self.epoch = 0  # the epoch pass of ``epoch_prompts``
        self.epoch_prompts: set[int] = set()

    def handed(self) -> None:
        """A prompt was handed out."""
        self.handed_out += 1

    def trained(self, prompts: Iterable[int], epoch: int) -> None:
        """A step's trained (kept) groups, by prompt index, and the epoch pass current at its end."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.epoch_prompts = set()
        for i in prompts:
            self.counts[i] = self.counts.get(i, 0) + 1
            self.total += 1
            self.epoch_prompts.add(i)

    def max_trainings(self) -> int:
        return max(self.counts.values(), default=0)

    def seed_order_bound(self, prompts: int) -> int:
        """The most groups of one prompt the seed order trains with as many hand-outs: one per epoch pass."""
        return math.ceil(self.handed_out / prompts) if prompts else 0

    def metrics(self, prompts: int) -> dict[str, float]:
        """The step's figures (``prompts``: the size of the prompt set)."""
        top = heapq.nlargest(TOP_PROMPTS, self.counts.values())
        return {
            DISTINCT_PROMPTS_EPOCH: float(len(self.epoch_prompts)),
            MAX_TRAININGS_PER_PROMPT: float(self.max_trainings()),
            TOP10_SHARE: sum(top) / self.total if self.total else 0.0,
            SEED_ORDER_BOUND: float(self.seed_order_bound(prompts)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"counts": sorted([i, c] for i, c in self.counts.items()), "handed_out": self.handed_out,
                "epoch": self.epoch, "epoch_prompts": sorted(self.epoch_prompts)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Concentration:
        c = cls()
        c.counts = {int(i): int(n) for i, n in state["counts"]}
        c.total = sum(c.counts.values())
        c.handed_out = int(state["handed_out"])
        c.epoch = int(state["epoch"])
        c.epoch_prompts = {int(i) for i in state["epoch_prompts"]}
        return c
