"""``SkipOrder``: the ``skip`` rule, the seed order with the prompts that teach nothing skipped.

The principle (docs/selection.md, from the main job's learner): select to skip
prompts whose groups would carry no gradient, never to train some prompts more often than
the data's own order would.  Under GRPO a zero-spread group contributes nothing, so skipping
such a prompt changes the expected gradient only where the prediction was wrong, while
training a prompt more often multiplies its weight in the objective.

- **The order** is the seed's: the same shuffled epoch passes as
  :class:`~shopsimrl.sampling.order.SeedOrder` (``epoch_order``), walked from where the previous
  call stopped.  A prompt met while in flight is deferred to the next call, within its pass.
- **The skip** (GRESO, arXiv 2506.02177): a prompt met in the order is skipped with probability
  ``min(1 − RETRY_FLOOR, 1 − RETRY_BASE ** run)``, where ``run`` is its run of consecutive *solved*
  groups (every sibling at the top reward) up to the last one observed (the evidence's
  ``solved_streak``); a prompt whose last group had spread, failed or agreed on a partial reward, or
  that was never observed, is never skipped; nor is one the skill model predicts to spread now
  (``q >= SKIP_Q``: the policy moved since the run began).  Only solved runs, because a policy that
  learns leaves a failed prompt behind and not a solved one: in the main job's learner (seed order, 15
  runs of ``products_2000``), 44-72% of the groups after an all-failed one had spread, against 11-29%
  after a solved one (GRESO too gives easy and hard prompts their own probabilities).  A skipped
  prompt is not lost: its next turn is the next epoch pass, where it is re-tried with probability at
  least ``RETRY_FLOOR``.
- **The weight** (importance sampling): a prompt handed out at a turn where it could have been
  skipped with probability ``p`` carries the weight ``1 / (1 − p)`` (at most ``1 / RETRY_FLOOR`` = 5),
  and its group's advantages are multiplied by it (``batch.jsonl``'s ``weight``; on slime, the
  samples' ``shopsim_weight`` metadata).  Each prompt's expected contribution per epoch pass is
  then the seed order's: where the skip's prediction was wrong (the prompt would have spread), the
  groups that do run make up for the turns skipped.  Without it the rule under-trains the prompts
  that spread only now and then (mostly ones the policy nearly solves): the learner's held-out
  success fell by up to 0.018 without it, and stays within 0.003 of the seed order's with it
  (docs/learning.md).  Every other hand-out weighs 1.
- **The bound**: a prompt is handed out at most once per epoch pass, as in the seed order.  A
  released prompt (aborted, surplus, technical) is consumed, as in the seed order and slime without
  ``--partial-rollout``: it comes back with its next pass, never twice in one.  A deferred turn that
  outlives its pass is dropped (the prompt is in flight with its previous turn).
- **The pace**: a pass skips at most ``max_skip_share`` of the prompt set (:func:`skip_share_for_waves`).
  Under fixed waves a step starts a whole wave however many turns it skips, so skipped turns speed
  the passes: ``MAX_SKIP_SHARE`` (1/3) keeps them at most 1.5× as fast as the seed order's, and no
  prompt is trained more than 1.5× as often per step as the seed order could train it.  Under
  adaptive waves a skipped turn counts against the step's budget of ``over_sampling_batch_size``
  as a started group does (:meth:`~shopsimrl.sampling.adaptive.AdaptiveWaves.refill_size`), so a
  skip saves the episodes instead of speeding the passes.  Only a step that has spent its budget and must
  still start the groups it misses walks past its wave (a start may pass skipped turns on its way).
  ``ADAPTIVE_MAX_SKIP_SHARE`` (3/4) lets the late passes, where most prompts are solved, skip what the rule
  predicts; at half the budget bound there.  No prompt is handed out twice in a pass either way; in the
  learner's judge the passes came about 1.2× as fast per step as the seed order's (7 begun in 30 steps
  against 6; at most 7 trainings of one prompt against 6; docs/learning.md).
- **When every free prompt would be skipped**: the pass runs out and the next pass begins; if a pass
  begun within one call hands out nothing, the prompts it skipped are handed out in their order (a
  re-try each), so a call never loops and always returns ``k`` prompts when ``k`` are free.

Adaptive waves work over the skipped order: :meth:`next_prompt` returns the prompt and its predicted
``q`` from the evidence.  Every random draw comes from one seeded ``random.Random`` in ``state_dict``.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from shopsimrl.sampling.modes import Selection, WaveMode
from shopsimrl.sampling.selector import RuleSelector, epoch_order, take_deferred

#: Each solved group in a row quarters a prompt's chance of a re-try (GRESO's ``1 − p ** run`` skip): one solved
#: group skips three turns in four.  GRESO's 0.5 skipped too little of what the learner wastes its episodes on (one
#: solved group is the most common run: a prompt near the top flips between spread and solved); 0.125 looked like more
#: informative groups per episode and a worse policy on five tuning seeds (docs/learning.md).
RETRY_BASE = 0.25
#: The least chance that a skipped prompt is re-tried at its next turn: a prompt the policy has learned costs at
#: most this share of a group per epoch pass, and one that became informative again is re-tried within
#: ``1 / RETRY_FLOOR`` = 5 passes on average.  GRESO saw about 20% of skipped prompts become informative again.  A
#: floor of 0.1 (weights up to 10) gave the same held-out success and informative groups per episode on 15 tuning
#: seeds (docs/learning.md): not worth weights twice as large.
RETRY_FLOOR = 0.2
#: A prompt the skill model predicts to have spread at least this often is never skipped, whatever its run.
SKIP_Q = 0.5
#: The most of the prompt set one epoch pass may skip under fixed waves: passes then come at most
#: ``1 / (1 − 1/3)`` = 1.5× as fast as the seed order's, the bound the issue sets on the most trainings of one prompt.
MAX_SKIP_SHARE = 1.0 / 3.0
#: Under adaptive waves, where skipped turns count against a step's budget (a skip saves episodes, it does not
#: speed the passes): three quarters.  Half bound the late passes, where most prompts are solved: on the learner's
#: tuning runs they used all 80 of their skips; at three quarters, 70-110 of 120.
ADAPTIVE_MAX_SKIP_SHARE = 0.75


def skip_share_for_waves(waves: WaveMode | str) -> float:
    """The most of the prompt set one epoch pass may skip under a wave mode (see "The pace")."""
    return ADAPTIVE_MAX_SKIP_SHARE if WaveMode.parse(waves) is WaveMode.ADAPTIVE else MAX_SKIP_SHARE


class SkipOrder(RuleSelector):
    """The seed's epoch passes, skipping prompts on a run of zero-spread groups (see the module docstring)."""

    selection = Selection.SKIP

    def __init__(
        self,
        *args: Any,
        retry_floor: float | None = None,
        retry_base: float | None = None,
        max_skip_share: float | None = None,
        **kwargs: Any,
    ) -> None:
        floor = RETRY_FLOOR if retry_floor is None else retry_floor
        base = RETRY_BASE if retry_base is None else retry_base
        share = MAX_SKIP_SHARE if max_skip_share is None else max_skip_share
        for name, value in (("retry_floor", floor), ("retry_base", base), ("max_skip_share", share)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value!r}")
        super().__init__(*args, **kwargs)
        self.retry_floor = float(floor)
        self.retry_base = float(base)
        self.max_skip_share = float(share)
        self._epoch = 0  # epoch passes begun; the first is drawn at the first pick
        self._order: deque[int] = deque()  # the rest of the current pass
        self._deferred: dict[int, None] = {}  # met in flight in the current pass: first in line next call
        self._skipped: dict[int, None] = {}  # skipped in the current pass, in order
        self._skips_left = 0  # skips the current pass may still make
        self.skipped_turns = 0
        self._rng = random.Random(f"shopsimrl-informative/{self.seed}")

    @property
    def epoch(self) -> int:
        return self._epoch

    def skip_probability(self, i: int) -> float:
        """The chance that prompt ``i`` is skipped at its turn (before the pass's skip budget)."""
        run = self.evidence.solved_streak[i]
        if run == 0 or 1.0 - self._predict(i) >= SKIP_Q:
            return 0.0
        return min(1.0 - self.retry_floor, 1.0 - self.retry_base ** run)

    def _pick(self, k: int) -> list[int]:
        out: list[int] = []
        in_flight = self.evidence.in_flight
        for i in take_deferred(self._deferred, in_flight, lambda: len(out) < k):
            self._turn(i, out)
        fresh = False  # a pass begun in this call has handed out nothing yet
        while len(out) < k:
            if not self._order:
                if fresh:  # every free prompt of a whole pass was skipped: re-try them, in order
                    i = next(iter(self._skipped))
                    del self._skipped[i]
                    self.evidence.stats["rechecked"] += 1
                    out.append(self._hand_out(i))
                    continue
                self._new_epoch()
                fresh = True
                continue
            i = self._order.popleft()
            if i in in_flight:
                self._deferred[i] = None
            elif self._turn(i, out):
                fresh = False
        return out

    def _turn(self, i: int, out: list[int]) -> bool:
        """Prompt ``i``'s turn in the current pass (out of flight): hand it out, or skip it.  True if handed out."""
        stats = self.evidence.stats
        p = self.skip_probability(i)
        if p > 0.0:
            if self._skips_left > 0 and self._rng.random() < p:
                self._skips_left -= 1
                self.skipped_turns += 1
                self._skipped[i] = None
                stats["skipped"] += 1
                return False
            stats["rechecked"] += 1  # on a run of zero-spread groups, tried again
            if self._skips_left > 0:  # it could have been skipped: handed out with chance 1 - p
                self._weights[i] = 1.0 / (1.0 - p)
        out.append(self._hand_out(i))
        return True

    def _hand_out(self, i: int) -> int:
        if not self.evidence.chosen[i]:
            self.evidence.stats["explored"] += 1  # the first time this prompt is started
        return self._take(i)

    def _new_epoch(self) -> None:
        """The next pass: the seed's shuffle; the last pass's deferred and skipped turns are over."""
        self._order = deque(epoch_order(len(self._ids), self.seed, self._epoch))
        self._epoch += 1
        self._deferred = {}
        self._skipped = {}
        self._skips_left = int(self.max_skip_share * len(self._ids))

    def _back_in_line(self, i: int, *, front: bool) -> None:
        """Consumed: a prompt comes back only with its turn in a later pass."""

    def position(self) -> dict[str, int]:
        """Where the order stands (for logs): passes begun, position in the current one, prompts deferred and
        skipped in it."""
        position = len(self._ids) - len(self._order) if self._epoch else 0
        return {"epoch": self._epoch, "position": position, "deferred": len(self._deferred),
                "skipped": len(self._skipped)}

    # -- checkpoint ------------------------------------------------------------------------------
    @classmethod
    def _options(cls, rule_state: dict[str, Any]) -> dict[str, Any]:
        return {"retry_floor": rule_state["retry_floor"], "retry_base": rule_state["retry_base"],
                "max_skip_share": rule_state["max_skip_share"]}

    def _rule_state(self) -> dict[str, Any]:
        version, internal, gauss = self._rng.getstate()
        return {
            "retry_floor": self.retry_floor,
            "retry_base": self.retry_base,
            "max_skip_share": self.max_skip_share,
            "epoch": self._epoch,
            "order": list(self._order),
            "deferred": list(self._deferred),
            "skipped": list(self._skipped),
            "skips_left": self._skips_left,
            "skipped_turns": self.skipped_turns,
            "rng": [version, list(internal), gauss],
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._epoch = int(state["epoch"])
        self._order = deque(int(i) for i in state["order"])
        self._deferred = dict.fromkeys(int(i) for i in state["deferred"])
        self._skipped = dict.fromkeys(int(i) for i in state["skipped"])
        self._skips_left = int(state["skips_left"])
        self.skipped_turns = int(state["skipped_turns"])
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
