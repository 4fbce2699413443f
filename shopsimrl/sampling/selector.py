"""``RuleSelector``: a selector is the shared :class:`~shopsimrl.sampling.evidence.Evidence` plus one rule that picks.

This class is the :class:`~shopsimrl.sampling.source.Selector` contract done once
(``next_prompts`` / ``next_prompt`` / ``settle`` / ``record`` / ``release`` /
``release_in_flight`` / ``predicted_*`` / ``pop_stats`` / ``state_dict``), with the evidence
kept, the in-flight set checked and the step's concentration counted
(:class:`~shopsimrl.sampling.concentration.Concentration`) whatever the rule.  A rule is a
subclass that says three things:

- ``_pick(k)``: ``k`` prompts to hand out (each through ``self._take``);
- ``_back_in_line(i, front)``: what becomes of a prompt out of flight (the seed order and the
  skip rule consume it; the spread rule puts it back in its line);
- ``_rule_state()`` / ``_load_rule_state(state)``: its own part of the state.

The rules: :class:`~shopsimrl.sampling.order.SeedOrder` (``seed``),
:class:`~shopsimrl.sampling.skip.SkipOrder` (``informative``) and
:class:`~shopsimrl.sampling.spread.SpreadSelector` (``spread``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from shopsimrl.defaults import DEFAULT_N_SAMPLES_PER_PROMPT
from shopsimrl.sampling.concentration import Concentration
from shopsimrl.sampling.evidence import Evidence
from shopsimrl.sampling.modes import Selection

#: Version of every selector's ``state_dict`` (6: the evidence and the rule's state apart, the solved runs,
#: the concentration counts, the informative and spread rules, the skipped turns).
STATE_VERSION = 6


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    """The seed's shuffle of ``count`` prompts for epoch pass ``epoch`` (0 first), as slime's data buffer does."""
    order = list(range(count))
    random.Random(f"shopsimrl-tasks/{seed}/{epoch}").shuffle(order)
    return order


def take_deferred(deferred: dict[int, None], in_flight: set[int], wanted: Callable[[], bool]) -> Iterator[int]:
    """The deferred prompts (met while in flight, an ordered set) now out of flight, first in line, each removed
    from ``deferred`` as it is taken, while ``wanted()``: the orders serve them before their pass goes on."""
    for i in list(deferred):
        if not wanted():
            return
        if i not in in_flight:
            del deferred[i]
            yield i


class RuleSelector:
    """A selector: the evidence, one rule over it, the concentration counts (see the module docstring)."""

    selection: ClassVar[Selection | str]
    #: Turns of the order skipped since the source began (an adaptive step counts them against its budget).  0 for
    #: a rule that never skips.
    skipped_turns: int = 0

    def __init__(
        self,
        prompt_ids: Iterable[Hashable],
        n_samples_per_prompt: int = DEFAULT_N_SAMPLES_PER_PROMPT,
        selection: Selection | str | None = None,
        seed: int = 0,
        *,
        prior_sd: float | None = None,
        clusters: Mapping[Hashable, Hashable] | Sequence[Hashable] | None = None,
    ) -> None:
        if selection is not None and Selection.parse(selection) is not self.selection:
            raise ValueError(f"{type(self).__name__} is the {self.selection} selection, not {selection}: "
                             "build a selector with shopsimrl.sampling.source.new_selector(selection, ...)")
        ids = list(dict.fromkeys(prompt_ids))
        first = epoch_order(len(ids), seed, 0)
        self.evidence = Evidence(ids, n_samples_per_prompt, seed, prior_sd=prior_sd, clusters=clusters,
                                 first_order=first)
        self.concentration = Concentration()
        self.seed = seed
        self.n = self.evidence.n
        self._ids = self.evidence.ids
        self._weights: dict[int, float] = {}  # in flight: the weight of its hand-out, when not 1

    # -- the contract ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    @property
    def in_flight(self) -> frozenset[Hashable]:
        return frozenset(self._ids[i] for i in self.evidence.in_flight)

    @property
    def epoch(self) -> int:
        """Epoch passes begun (1 during the first): the rule's own (the seed's shuffled passes; for the spread
        rule, every ``len(prompts)`` hand-outs).  The concentration's ``distinct_prompts_epoch`` counts within it."""
        raise NotImplementedError

    def next_prompts(self, k: int) -> list[Hashable]:
        """``k`` distinct prompts to start now; none of them is already in flight."""
        self.evidence.require_free(k)
        return [self._ids[i] for i in self._pick(k)]

    def next_prompt(self) -> tuple[Hashable, float]:
        """One prompt to start now, and its predicted chance ``q`` of a group with spread (adaptive waves)."""
        (prompt_id,) = self.next_prompts(1)
        return prompt_id, 1.0 - self.predicted_zero_spread(prompt_id)

    def weight(self, prompt_id: Hashable) -> float:
        """The importance weight of ``prompt_id``'s hand-out now in flight: 1 / (the chance its turn handed it
        out), so that a group's expected gradient per epoch pass is the seed order's.  1 for a rule that never
        skips."""
        i = self.evidence.flying(prompt_id, "weight")
        return self._weights.get(i, 1.0)

    def settle(self, prompt_id: Hashable, rewards: Sequence[float] | None, *, surplus: bool = False) -> None:
        """A decided group back to the source at step end (the step settles its account with the source):
        unscored, it is released; scored but surplus, it is released with its evidence; otherwise (kept or
        dropped) it is recorded."""
        if rewards is None:
            self.release(prompt_id)
        elif surplus:
            self.release(prompt_id, rewards)
        else:
            self.record(prompt_id, rewards)

    def record(self, prompt_id: Hashable, rewards: Sequence[float]) -> None:
        """A finished group's scored rewards (one per unique rollout): evidence, and out of flight."""
        ev = self.evidence
        i = ev.flying(prompt_id, "record")
        ev.observe(i, rewards)
        ev.land(i)
        self._weights.pop(i, None)
        self._back_in_line(i, front=False)

    def release(self, prompt_id: Hashable, rewards: Sequence[float] | None = None) -> None:
        """A started prompt with no trained result (aborted, surplus, technical): out of flight.

        ``rewards`` (a surplus group was scored) are kept as evidence.  What becomes of the prompt is the
        rule's (``_back_in_line``).
        """
        ev = self.evidence
        i = ev.flying(prompt_id, "release")
        if rewards is not None:
            ev.observe(i, rewards)
        ev.land(i)
        self._weights.pop(i, None)
        ev.stats["released"] += 1
        self._back_in_line(i, front=True)

    def release_in_flight(self) -> list[Hashable]:
        """Release every prompt in flight (a resumed run cannot finish them)."""
        flying = sorted(self.evidence.in_flight)
        for i in flying:
            self.release(self._ids[i])
        return [self._ids[i] for i in flying]

    def trained(self, prompt_ids: Iterable[Hashable]) -> dict[str, float]:
        """The prompts whose groups a step trained (kept), told once per step at its end: counted, and the
        step's concentration figures returned (``rollout/shopsim/concentration/*``)."""
        self.concentration.trained([self.evidence.index(pid) for pid in prompt_ids], self.epoch)
        return self.concentration.metrics(len(self._ids))

    # -- predictions -----------------------------------------------------------------------------
    def predicted_zero_spread(self, prompt_id: Hashable) -> float:
        """The predicted probability that ``prompt_id``'s next group has zero reward spread."""
        return self._predict(self.evidence.index(prompt_id))

    def predicted_pass_rate(self, prompt_id: Hashable) -> float | None:
        """Predicted pass rate under the current policy, or ``None`` for a prompt never observed."""
        return self.evidence.pass_rate(self.evidence.index(prompt_id))

    def predicted_logit(self, prompt_id: Hashable) -> tuple[float, float]:
        """Mean and variance of the prompt's pass-rate logit now (see :meth:`Evidence.logit`)."""
        return self.evidence.logit(self.evidence.index(prompt_id))

    @property
    def skill(self) -> float:
        """The policy's estimated skill (logits, from 0 at the start): the evidence's view of training progress."""
        return self.evidence.model.skill_mean

    @property
    def cluster_labels(self) -> list[Hashable] | None:
        return self.evidence.cluster_labels

    def coverage(self) -> float:
        """Share of the prompts ever handed out."""
        return self.evidence.coverage()

    def ever_chosen(self) -> list[Hashable]:
        """Every prompt handed out at least once."""
        return [pid for pid, chosen in zip(self._ids, self.evidence.chosen) if chosen]

    def cluster_coverage(self) -> tuple[float, float] | None:
        """Coverage per cluster, its minimum and median over clusters (``None`` without labels)."""
        book = self.evidence.book
        return book.coverage() if book is not None else None

    def clusters_tried(self) -> int | None:
        """Clusters with at least one prompt handed out (``None`` without labels)."""
        book = self.evidence.book
        return book.tried() if book is not None else None

    def pop_stats(self) -> dict[str, float]:
        """Counters since the previous call, which reading resets (*pop*, as ``dict.pop``; once per step):
        chosen, explored (handed out for the first time), skipped, re-checked, released, the summed predicted
        zero-spread of the chosen prompts (what ``skipped`` and ``rechecked`` count is the rule's: see its
        class).  With labels, also the levels ``cluster_coverage_min`` / ``cluster_coverage_median`` and
        ``clusters_tried``."""
        stats = self.evidence.pop_stats()
        stats.update(self._rule_stats())
        stats["skipped"] = float(stats["skipped"])
        return stats

    # -- checkpoint ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain data (JSON-compatible when the prompt ids are str or int): the evidence, the rule's state and
        the concentration counts."""
        return {
            "version": STATE_VERSION,
            "strategy": str(self.selection),
            "evidence": self.evidence.state_dict(),
            "concentration": self.concentration.state_dict(),
            "rule": self._rule_state(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> RuleSelector:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"selector state version {state.get('version')!r} is not {STATE_VERSION}: it was saved by another "
                "version of shopsimrl; start the selector afresh (its estimates are rebuilt within an epoch)"
            )
        ev = state["evidence"]
        source = cls(ev["prompt_ids"], ev["n_samples_per_prompt"], state["strategy"], ev["seed"],
                     prior_sd=ev["prior_sd"], clusters=ev.get("clusters"), **cls._options(state["rule"]))
        source.evidence = Evidence.from_state_dict(ev)
        source._ids = source.evidence.ids
        source.concentration = Concentration.from_state_dict(state["concentration"])
        source._load_rule_state(state["rule"])
        return source

    # -- the rule's part -------------------------------------------------------------------------
    def _take(self, i: int, zero: float | None = None) -> int:
        """``i`` goes in flight (``zero``: its predicted zero spread, when the caller has it already)."""
        self.evidence.take(i, self._predict(i) if zero is None else zero)
        self.concentration.handed()
        return i

    def _predict(self, i: int) -> float:
        """Prompt ``i``'s predicted zero spread (the evidence's; the simulator's oracles read the truth)."""
        return self.evidence.predict(i)

    def _pick(self, k: int) -> list[int]:
        """``k`` prompts out of flight, each handed out with ``_take`` (the caller checked that ``k`` are free)."""
        raise NotImplementedError

    def _back_in_line(self, i: int, *, front: bool) -> None:
        """Prompt ``i`` came out of flight: recorded (``front=False``) or released (``front=True``)."""
        raise NotImplementedError

    def _rule_stats(self) -> dict[str, float]:
        """The rule's figures for ``pop_stats`` (levels, or counters it keeps itself)."""
        return {}

    @classmethod
    def _options(cls, rule_state: dict[str, Any]) -> dict[str, Any]:
        """The constructor's keyword arguments the rule's state carries."""
        return {}

    def _rule_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError
