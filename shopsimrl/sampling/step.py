"""``RolloutStep``: one rollout step as a sans-I/O object, in the style of h11: events in, actions out.

It owns everything one step decides, written once for the main job's driver, slime's
rollout function, the simulator and ``replay`` (each an I/O shell around it):

- the :class:`~shopsimrl.sampling.controller.WaveController` (slime's drop rule, ``remaining``,
  the fallback, abort at ``target`` kept, the consecutive-failure stop);
- the prompt source (:class:`~shopsimrl.sampling.source.PromptSource`: the seed order or the
  informative selector);
- the wave sizer (:class:`FixedWaves`, slime's whole waves; or :class:`AdaptiveRefills`);
- the feedback to the prompt source, held until the step ends, so a prompt finished early in a
  step stays out of the pool until then (a step never starts one prompt twice).

Events (methods) and the actions they return::

    start()                        -> [Start, ...]              the first wave
    complete(index, verdict, rewards)
    complete_batch([(index, verdict, rewards), ...])
                                   -> [GroupDecision, ..., Start, ...]         still filling
                                   -> [GroupDecision, ..., AbortRest]          target kept
                                      (TooManyTechnicalFailures: its .decisions are the batch's)
    stop()                         -> AbortRest                 interrupt, guard stop: every group in flight
    close()                        -> StepDone                  the shell cancelled what AbortRest named

A :class:`Start` names a group, its prompt and the siblings to start (``range(n)`` by default).
Staged siblings (opt-in, ``staging=``, :mod:`~shopsimrl.sampling.staged`) start ``K`` of ``n``; one
more event tells the step that a staged group's first ``K`` are back::

    first_stage(index, rewards)    -> [Start(the rest)]                          the rest may still spread
                                   -> [GroupDecision (zero-std drop), ...]       decided after K (as complete())

Time, tasks, sockets and files are the shells'; nothing here blocks, sleeps or reads a clock.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

from shopsimrl.sampling.adaptive import AdaptiveWaves
from shopsimrl.sampling.controller import ControllerStateError, Decision, GroupDecision, State, WaveController
from shopsimrl.sampling.guard import ConsecutiveFailureGuard, TooManyTechnicalFailures
from shopsimrl.sampling.source import PromptSource
from shopsimrl.sampling.staged import Next, StagedSiblings, after_first_stage
from shopsimrl.sampling.verdict import Verdict


class Start(NamedTuple):
    """Action: start ``siblings`` of group ``index`` on ``prompt``."""

    index: int  # the group's submission index in this step
    wave: int  # 1-based wave (or adaptive refill) it was opened in
    prompt: Any  # what the source handed out: a prompt id (slime's rollout function: a group of samples)
    siblings: range  # which of the group's n siblings to start now
    spread_chance: float | None  # adaptive waves: the predicted chance that the group has reward spread


def _ignore(_result: object) -> None:
    return None


_new_start = partial(tuple.__new__, Start)
_index_of, _prompt_of = itemgetter(0), itemgetter(2)


class AbortRest(NamedTuple):
    """Action: cancel these groups, still in flight (never trained, never counted as completed); then ``close()``."""

    indices: tuple[int, ...]


@dataclass(frozen=True)
class StepDone:
    """Action: the step's outcome (submission indices); ``kept`` is the batch, in the order groups entered it."""

    kept: list[int]
    fallback: list[int]  # the kept groups without spread (keep_when_insufficient)
    dropped: dict[str, list[int]]
    surplus: list[int]
    aborted: list[int]
    waves: int
    submitted: int
    completed: int
    remaining: int
    stopped_early: list[int] = field(default_factory=list)  # staged: decided as zero-std drops after K siblings

    @classmethod
    def of(cls, controller: WaveController, aborted: list[int], stopped_early: Sequence[int] = ()) -> StepDone:
        """The outcome an ended step's controller holds (``aborted``: what its ``abort()`` returned)."""
        c = controller
        return cls(kept=list(c.kept), fallback=list(c.fallback),
                   dropped={reason: list(ids) for reason, ids in c.dropped.items()}, surplus=list(c.surplus),
                   aborted=aborted, waves=c.waves, submitted=c.submitted, completed=c.completed,
                   remaining=c.remaining, stopped_early=list(stopped_early))

    @property
    def informative(self) -> list[int]:
        """The kept groups with reward spread: the ones that carry a gradient."""
        fallback = set(self.fallback)
        return [i for i in self.kept if i not in fallback]


Completion = tuple[int, Verdict, Sequence[float] | None]
"""An event's item: (submission index, verdict, the group's rewards per unique rollout; ``None``: not
scored, or not the shell's to give — slime's data source hears its rewards through the all-samples hook)."""

Action = GroupDecision | Start | AbortRest


class WaveSizer(Protocol):
    """How many groups to open now, on which prompts (the controller's bookkeeping included)."""

    #: Asked after every completion (adaptive refills); otherwise only when the controller needs a wave.
    after_every_completion: bool

    def open(self, controller: WaveController, source: PromptSource,
             spread_chance: dict[int, float]) -> list[Start]: ...


class FixedWaves:
    """slime's inner loop: whole waves of ``over_sampling_batch_size`` while ``remaining < target``."""

    after_every_completion = False

    def __init__(self, n_samples_per_prompt: int) -> None:
        self.siblings = range(n_samples_per_prompt)

    def open(self, controller: WaveController, source: PromptSource,
             spread_chance: dict[int, float]) -> list[Start]:
        if controller.state is not State.NEEDS_WAVE:  # slime's inner-loop condition (needs_wave)
            return []
        new = controller.submit()
        wave = controller.waves  # one wave: it adds over_sampling_batch_size >= target to remaining
        # Start(index, wave, prompt, siblings, None) per group, built in C: a wave can be a million groups (replay)
        return list(map(_new_start, zip(new, repeat(wave), source.next_prompts(len(new)), repeat(self.siblings),
                                         repeat(None))))


class AdaptiveRefills:
    """Adaptive waves: the refill rule of :class:`~shopsimrl.sampling.adaptive.AdaptiveWaves`, each prompt
    chosen (with its predicted chance of spread) as it is added."""

    after_every_completion = True

    def __init__(self, rule: AdaptiveWaves, n_samples_per_prompt: int) -> None:
        self.rule = rule
        self.siblings = range(n_samples_per_prompt)

    def open(self, controller: WaveController, source: PromptSource,
             spread_chance: dict[int, float]) -> list[Start]:
        picks = self.rule.choose(len(controller.kept), [spread_chance[i] for i in controller.in_flight],
                                 source.next_prompt, controller.submitted)
        if not picks:
            return []
        new = controller.refill(len(picks))
        wave = controller.waves
        starts = []
        for index, (prompt, chance) in zip(new, picks):
            spread_chance[index] = chance
            starts.append(Start(index, wave, prompt, self.siblings, chance))
        return starts


class RolloutStep:
    """One rollout step (see the module docstring).  Create one per step; share the guard and the source."""

    def __init__(
        self,
        rollout_batch_size: int,
        over_sampling_batch_size: int,
        *,
        source: PromptSource,
        sizer: WaveSizer,
        guard: ConsecutiveFailureGuard | None = None,
        max_consecutive_failed_groups: int | None = None,
        staging: StagedSiblings | None = None,
        tell_source: bool = True,
    ) -> None:
        """The consecutive-failure stop: ``guard`` (its streak shared across steps) or
        ``max_consecutive_failed_groups`` (a fresh guard, default 8), not both.  ``staging``: staged siblings
        (opt-in); ``None`` starts every group whole, as the seed.  ``tell_source=False``: the source learns
        nothing from results (``replay``'s supply), so none are held for it."""
        self.controller = WaveController(rollout_batch_size, over_sampling_batch_size, max_consecutive_failed_groups,
                                         guard=guard)
        self.source = source
        self.sizer = sizer
        self.staging = staging
        self._first_stage: set[int] = set()  # staged groups whose first K siblings are not back yet
        self._stopped_early: list[int] = []
        #: staged siblings: groups started staged / whole (predicted to spread), rests started, groups decided
        #: after K and the episodes that saved
        self.stage_counts = {"staged": 0, "whole": 0, "rest_started": 0, "stopped_early": 0, "episodes_saved": 0}
        self.prompts: dict[int, Hashable] = {}  # submission index -> prompt
        self._spread_chance: dict[int, float] = {}  # adaptive: each group's predicted chance of spread
        self._feedback: list[tuple[int, Decision, Sequence[float] | None]] = []  # (index, ...): told at close()
        self._hold_one = self._feedback.append if tell_source else _ignore
        self._tell_source = tell_source
        self._ask_sizer_always = sizer.after_every_completion
        self._done: StepDone | None = None

    # -- state -----------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self.controller.state

    @property
    def done(self) -> bool:
        """``target`` groups kept: what is in flight is to be aborted."""
        return self.controller.done

    @property
    def in_flight(self) -> frozenset[int]:
        return self.controller.in_flight

    def stopped_early(self, index: int) -> bool:
        """Staged siblings: group ``index`` was decided after its first ``K`` (a zero-std drop), so its rest never
        runs and its first ``K`` are all it generated."""
        return index in self._stopped_early

    def in_first_stage(self, index: int) -> bool:
        """Staged siblings: group ``index`` runs its first ``K``, so its return is ``first_stage()``, not a
        completion (every shell asks this of a finished group; the step already keeps the set)."""
        return index in self._first_stage

    # -- events ----------------------------------------------------------------------------------
    def start(self) -> list[Start]:
        """The step begins: the groups to start first."""
        return self._open()

    def complete(self, index: int, verdict: Verdict, rewards: Sequence[float] | None = None) -> list[Action]:
        """One group finished on its own (a batch of one)."""
        if self._first_stage:
            self._whole(index)
        controller = self.controller
        try:
            decision = controller.complete(index, verdict)
        except TooManyTechnicalFailures as exc:
            self._hold(exc.decisions, {index: rewards})
            raise
        self._hold_one((index, decision.decision, rewards))
        state = controller.state
        if state is State.DONE:
            return [decision, self.stop()]
        if state is not State.NEEDS_WAVE and not self._ask_sizer_always:  # the hot path: nothing to start
            return [decision]
        starts = self._open()
        return [decision, *starts] if starts else [decision]

    def complete_batch(self, completions: Iterable[Completion]) -> list[Action]:
        """Groups that finished together: decided in submission order, then new groups or the abort."""
        items = list(completions)
        rewards = {index: r for index, _verdict, r in items}
        if self._first_stage:
            for index in rewards:
                self._whole(index)
        try:
            decided = self.controller.complete_batch([(i, v) for i, v, _r in items])
        except TooManyTechnicalFailures as exc:
            self._hold(exc.decisions, rewards)
            raise
        self._hold(decided, rewards)
        actions: list[Action] = list(decided)
        actions.extend(self._next())
        return actions

    def first_stage(self, index: int, rewards: Sequence[float | None]) -> list[Action]:
        """A staged group's first ``K`` siblings are back (``rewards``: theirs, ``None`` unscored): the rest
        start, or the group is decided as a zero-std drop after ``K`` (the rule: ``after_first_stage``)."""
        staging = self.staging
        if staging is None or index not in self._first_stage or index not in self.controller.in_flight:
            raise ControllerStateError(f"group {index} is not in its first stage (staging "
                                       f"{'off' if staging is None else 'on'}; state {self.state})")
        if len(rewards) != staging.stage_size:
            raise ValueError(f"group {index}: {len(rewards)} first-stage rewards for a stage of {staging.stage_size}")
        self._first_stage.discard(index)
        c, prompt = self.controller, self.prompts[index]
        nxt, _chance = after_first_stage(rewards, n=staging.n, remaining=c.remaining, target=c.target,
                                         logit=self.source.predicted_logit(prompt), threshold=staging.threshold)
        if nxt is Next.REST:
            self.stage_counts["rest_started"] += 1
            return [Start(index, c.wave_of(index), prompt, staging.rest, self._spread_chance.get(index))]
        self.stage_counts["stopped_early"] += 1
        self.stage_counts["episodes_saved"] += staging.n - staging.stage_size
        self._stopped_early.append(index)
        return self.complete(index, Verdict.ZERO_STD, [float(r) for r in rewards])  # type: ignore[arg-type]

    def stop(self) -> AbortRest:
        """The shell stops the step early (interrupted, or the consecutive-failure stop): abort everything."""
        return AbortRest(tuple(sorted(self.controller.in_flight)))

    def close(self) -> StepDone:
        """The groups in flight were cancelled: the step ends, and the prompt source hears every result.

        Aborted prompts go back first, then each decided group in the order it was decided
        (``settle``: recorded, or released when unscored or surplus).  Idempotent.
        """
        if self._done is not None:
            return self._done
        c = self.controller
        aborted = c.abort()
        source, prompts = self.source, self.prompts
        for index in aborted if self._tell_source else ():
            source.release(prompts[index])
        for index, decision, rewards in self._feedback:
            source.settle(prompts[index], rewards, surplus=decision is Decision.SURPLUS)
        self._feedback.clear()  # the same list: _hold_one appends to it
        self._done = StepDone.of(c, aborted, self._stopped_early)
        return self._done

    # -- internals -------------------------------------------------------------------------------
    def _hold(self, decisions: Iterable[GroupDecision], rewards: dict[int, Sequence[float] | None]) -> None:
        """Keep each decided group's result for the prompt source, told at ``close()``."""
        if not self._tell_source:
            return
        feedback = self._feedback
        for d in decisions:
            feedback.append((d.index, d.decision, rewards[d.index]))

    def _next(self) -> list[Start] | list[AbortRest]:
        if self.controller.done:
            return [self.stop()]
        return self._open()

    def _open(self) -> list[Start]:
        starts = self.sizer.open(self.controller, self.source, self._spread_chance)
        if starts:
            self.prompts.update(zip(map(_index_of, starts), map(_prompt_of, starts)))
        if self.staging is not None:
            starts = [self._stage(s) for s in starts]
        return starts

    def _stage(self, start: Start) -> Start:
        """Staged siblings: the first ``K``, unless the prompt is predicted to spread (``q >= skip_q``)."""
        staging = self.staging
        assert staging is not None
        q = start.spread_chance
        if q is None:
            zero = self.source.predicted_zero_spread(start.prompt)
            q = 0.0 if zero is None else 1.0 - zero
        if q >= staging.skip_q:
            self.stage_counts["whole"] += 1
            return start
        self.stage_counts["staged"] += 1
        self._first_stage.add(start.index)
        return start._replace(siblings=staging.first)

    def _whole(self, index: int) -> None:
        """A group completes whole: refused while its first stage is still out."""
        if index in self._first_stage:
            raise ControllerStateError(f"group {index} is in its first stage: report first_stage() before complete()")
