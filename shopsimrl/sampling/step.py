"""``RolloutStep``: one rollout step as a sans-I/O object, in the style of h11: events in, actions out.

It owns everything one step decides, and how a step is driven, written once for the main job's
driver, slime's rollout function, the simulator, ``replay`` and ``replay_recorded`` (each a shell
of the one pump, :mod:`shopsimrl.sampling.pump`, which carries out the actions and feeds back what finished):

- the :class:`~shopsimrl.sampling.controller.WaveController` (slime's drop rule, ``remaining``,
  the fallback, abort at ``target`` kept, the consecutive-failure stop: the one place it is decided);
- the selector (:class:`~shopsimrl.sampling.source.Selector`: the seed order or the
  informative selector);
- the wave sizer (:class:`FixedWaves`, slime's whole waves; or :class:`AdaptiveRefills`), chosen
  from the wave mode by :func:`new_step`, the one factory;
- staged siblings (opt-in): which groups run their first ``K``, and what happens when those are back;
- the feedback to the selector, held until the step ends, so a prompt finished early in a
  step stays out of the pool until then (a step never starts one prompt twice).

Events (methods) and the actions they return::

    start()                         -> [Start, ..., WaveOpened]          the first wave
    finished([Completion | FirstStage, ...])
                                    -> [GroupDecision, ..., Start, ..., WaveOpened]   still filling
                                    -> [..., StoppedEarly, GroupDecision, ...]        staged: decided after K
                                    -> [GroupDecision, ..., AbortRest]                target kept: done
                                    -> [GroupDecision, ..., StopRun]                  the consecutive-failure stop
    stop()                          -> AbortRest                 an interrupt: every group in flight
    close()                         -> StepDone                  the shell cancelled what AbortRest named

``finished`` takes everything that came back together: whole groups (:data:`Completion`) are decided
first, as one batch in submission order (``in_order=True``: in the order given, as slime's own loop
filters its done set), then each staged group back from its first ``K`` (:class:`FirstStage`), in index
order, until the batch is full.  A shell asks :meth:`RolloutStep.runs_first_k` of a finished group to
know which of the two it measured.  ``complete``, ``complete_batch`` and ``first_stage`` are the parts
``finished`` is made of, kept for the core's own tests.

A :class:`Start` names a group, its prompt and the siblings to start (``range(n)``; staged: ``range(K)``,
later ``range(K, n)``); a :class:`WaveOpened` follows the starts of new groups with ``remaining`` after
them.  Time, tasks, sockets and files are the shells'; nothing here blocks, sleeps or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from shopsimrl.defaults import DEFAULT_CUSHION
from shopsimrl.sampling.adaptive import AdaptiveWaves
from shopsimrl.sampling.controller import ControllerStateError, Decision, GroupDecision, State, WaveController
from shopsimrl.sampling.guard import ConsecutiveFailureGuard, TooManyTechnicalFailures
from shopsimrl.sampling.modes import DEFAULT_WAVE_MODE, WaveMode
from shopsimrl.sampling.source import Selector
from shopsimrl.sampling.staged import Next, StagedSiblings, after_first_stage
from shopsimrl.sampling.verdict import Verdict


class Start(NamedTuple):
    """Action: start ``siblings`` of group ``index`` on ``prompt``."""

    index: int  # the group's submission index in this step
    wave: int  # 1-based wave (or adaptive refill) it was opened in
    prompt: Any  # what the source handed out: a prompt id (slime's rollout function: a group of samples)
    siblings: range  # which of the group's n siblings to start now
    spread_chance: float | None  # adaptive waves: the predicted chance that the group has reward spread


class WaveOpened(NamedTuple):
    """Action, after the :class:`Start` of every new group of a wave (or adaptive refill): log it."""

    wave: int
    indices: range  # the groups it opened
    remaining: int  # the controller's remaining once they are submitted


class StoppedEarly(NamedTuple):
    """Action, just before its decision: staged group ``index`` is decided after its first ``K`` (a zero-std
    drop), so its rest never runs and its first ``K`` are all it generated."""

    index: int


class AbortRest(NamedTuple):
    """Action: cancel these groups, still in flight (never trained, never counted as completed); then ``close()``."""

    indices: tuple[int, ...]


class StopRun(NamedTuple):
    """Action, last: the consecutive-failure stop fired; carry out the actions before it, then raise ``error``
    (its ``decisions``: the batch's decisions up to the trigger, the same ones the actions carried)."""

    error: TooManyTechnicalFailures


class FirstStage(NamedTuple):
    """Event item: a staged group's first ``K`` siblings are back, with their rewards (``None``: unscored)."""

    index: int
    rewards: Sequence[float | None]


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
"""An event's item: a group back whole, as (submission index, verdict, the group's rewards per unique rollout;
``None``: not scored, or not the shell's to give — slime's data source hears its rewards through the all-samples
hook)."""

Action = GroupDecision | Start | WaveOpened | StoppedEarly | AbortRest | StopRun


class WaveSizer(Protocol):
    """How many groups to open now, on which prompts (the controller's bookkeeping included)."""

    #: Asked after every completion (adaptive refills); otherwise only when the controller needs a wave.
    after_every_completion: bool

    def open(self, controller: WaveController, source: Selector,
             spread_chance: dict[int, float]) -> list[Start]: ...


class FixedWaves:
    """slime's inner loop: whole waves of ``over_sampling_batch_size`` while ``remaining < target``."""

    after_every_completion = False

    def __init__(self, n_samples_per_prompt: int) -> None:
        self.siblings = range(n_samples_per_prompt)

    def open(self, controller: WaveController, source: Selector,
             spread_chance: dict[int, float]) -> list[Start]:
        if controller.state is not State.NEEDS_WAVE:  # slime's inner-loop condition (needs_wave)
            return []
        new = controller.submit()
        wave = controller.waves  # one wave: it adds over_sampling_batch_size >= target to remaining
        prompts = source.next_prompts(len(new))
        return [Start(index, wave, prompt, self.siblings, None) for index, prompt in zip(new, prompts)]


class AdaptiveRefills:
    """Adaptive waves: the refill rule of :class:`~shopsimrl.sampling.adaptive.AdaptiveWaves`, each prompt
    chosen (with its predicted chance of spread) as it is added; the turns the source skips count against the
    step's budget (the source's ``skipped_turns`` since the step's first refill)."""

    after_every_completion = True

    def __init__(self, rule: AdaptiveWaves, n_samples_per_prompt: int) -> None:
        self.rule = rule
        self.siblings = range(n_samples_per_prompt)
        self._skipped_before: int | None = None  # the source's skipped turns when the step began

    def open(self, controller: WaveController, source: Selector,
             spread_chance: dict[int, float]) -> list[Start]:
        if self._skipped_before is None:
            self._skipped_before = source.skipped_turns
        before = self._skipped_before
        picks = self.rule.choose(len(controller.kept), [spread_chance[i] for i in controller.in_flight],
                                 source.next_prompt, controller.submitted, lambda: source.skipped_turns - before)
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
    """One rollout step (see the module docstring).  Create one per step (:func:`new_step`); share the guard and
    the source."""

    def __init__(
        self,
        rollout_batch_size: int,
        over_sampling_batch_size: int,
        *,
        source: Selector,
        sizer: WaveSizer,
        guard: ConsecutiveFailureGuard | None = None,
        max_consecutive_failed_groups: int | None = None,
        staging: StagedSiblings | None = None,
        tell_source: bool = True,
        group_name: Callable[[Any], object] | None = None,
    ) -> None:
        """The consecutive-failure stop: ``guard`` (its streak shared across steps) or
        ``max_consecutive_failed_groups`` (a fresh guard, default 8), not both; ``group_name``: what its message
        calls a group, from the group's prompt (default: the group's index).  ``staging``: staged siblings
        (opt-in); ``None`` starts every group whole, as the seed.  ``tell_source=False``: the source learns
        nothing from results (``replay``'s supply), so none are held for it."""
        name = None if group_name is None else (lambda index: group_name(self.prompts[index]))
        self.controller = WaveController(rollout_batch_size, over_sampling_batch_size, max_consecutive_failed_groups,
                                         guard=guard, group_name=name)
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
        self._tell_source = tell_source
        self._done: StepDone | None = None

    # -- state (read only: what a live view shows) -------------------------------------------------
    @property
    def state(self) -> State:
        return self.controller.state

    @property
    def done(self) -> bool:
        """``target`` groups kept: what is in flight is to be aborted."""
        return self.controller.done

    @property
    def target(self) -> int:
        return self.controller.target

    @property
    def kept(self) -> int:
        """Groups kept so far."""
        return len(self.controller.kept)

    @property
    def remaining(self) -> int:
        return self.controller.remaining

    @property
    def in_flight(self) -> frozenset[int]:
        return self.controller.in_flight

    def wave_of(self, index: int) -> int:
        """1-based wave (or refill) group ``index`` was opened in."""
        return self.controller.wave_of(index)

    def runs_first_k(self, index: int) -> bool:
        """Staged siblings: group ``index`` runs its first ``K``, so what comes back is a :class:`FirstStage`,
        not a :data:`Completion` (a shell asks this of each finished group to know what to measure)."""
        return index in self._first_stage

    # -- events ----------------------------------------------------------------------------------
    def start(self) -> list[Action]:
        """The step begins: the groups to start first."""
        return self._open()

    def finished(self, items: Iterable[Completion | FirstStage], *, in_order: bool = False) -> list[Action]:
        """Groups that came back together (the one event a shell sends; module docstring).

        Whole groups first, as one batch (submission order; ``in_order``: the order given), then each staged
        group's first ``K`` in index order, until the batch is full (those left are aborted with the rest).
        The consecutive-failure stop ends the actions with :class:`StopRun`."""
        whole: list[Completion] = []
        heads: list[FirstStage] = []
        for item in items:
            if isinstance(item, FirstStage):
                heads.append(item)
            else:
                whole.append(item)
        for head in heads:  # refused before anything is decided
            if head.index not in self._first_stage:
                raise ControllerStateError(f"group {head.index} is not in its first stage (state {self.state})")
        actions: list[Action] = []
        try:
            if whole:
                actions += self.complete_batch(whole, in_order=in_order)
            else:
                self.controller.complete_batch([])  # nothing to decide; refused all the same once the step ended
            for head in sorted(heads, key=lambda h: h.index):
                if self.done:
                    break
                actions += self.first_stage(head.index, head.rewards)
        except TooManyTechnicalFailures as exc:
            return [*actions, *exc.decisions, StopRun(exc)]
        return actions

    def complete(self, index: int, verdict: Verdict, rewards: Sequence[float] | None = None) -> list[Action]:
        """One group finished on its own (a batch of one).  The stop raises ``TooManyTechnicalFailures``."""
        return self.complete_batch([(index, verdict, rewards)])

    def complete_batch(self, completions: Iterable[Completion], *, in_order: bool = False) -> list[Action]:
        """Groups that finished whole together: decided in submission order (``in_order``: the order given), then
        new groups or the abort.  The stop raises ``TooManyTechnicalFailures`` (its ``decisions``: the batch's)."""
        items = list(completions)
        rewards = {index: r for index, _verdict, r in items}
        for index in rewards:
            if index in self._first_stage:
                raise ControllerStateError(f"group {index} is in its first stage: report FirstStage before it is "
                                           "complete")
        decide = self.controller.complete_in_order if in_order else self.controller.complete_batch
        try:
            decided = decide([(i, v) for i, v, _r in items])
        except TooManyTechnicalFailures as exc:
            self._hold(exc.decisions, rewards)
            raise
        self._hold(decided, rewards)
        return [*decided, *self._next()]

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
        agreed = [float(r) for r in rewards if r is not None]  # after_first_stage stops only when all K are scored
        return [StoppedEarly(index), *self.complete(index, Verdict.ZERO_STD, agreed)]

    def stop(self) -> AbortRest:
        """The shell stops the step early (an interrupt): abort everything in flight."""
        return AbortRest(tuple(sorted(self.controller.in_flight)))

    def close(self) -> StepDone:
        """The groups in flight were cancelled: the step ends, and the selector hears every result.

        Aborted prompts go back first, then each decided group in the order it was decided
        (``settle``: recorded, or released when unscored or surplus).  Idempotent.
        """
        if self._done is not None:
            return self._done
        c = self.controller
        aborted = c.abort()
        if self._tell_source:
            for index in aborted:
                self.source.release(self.prompts[index])
            for index, decision, rewards in self._feedback:
                self.source.settle(self.prompts[index], rewards, surplus=decision is Decision.SURPLUS)
        self._feedback.clear()
        self._done = StepDone.of(c, aborted, self._stopped_early)
        return self._done

    # -- internals -------------------------------------------------------------------------------
    def _hold(self, decisions: Iterable[GroupDecision], rewards: dict[int, Sequence[float] | None]) -> None:
        """Keep each decided group's result for the selector, told at ``close()``."""
        if self._tell_source:
            self._feedback.extend((d.index, d.decision, rewards[d.index]) for d in decisions)

    def _next(self) -> list[Action]:
        """After a decision: the abort once the batch is full, else what the sizer opens."""
        if self.controller.done:
            return [self.stop()]
        if self.controller.state is not State.NEEDS_WAVE and not self.sizer.after_every_completion:
            return []  # fixed waves: nothing to open while the groups in flight cover the target
        return self._open()

    def _open(self) -> list[Action]:
        """The sizer's new groups (staged when staging is on), then the :class:`WaveOpened` that logs them."""
        starts = self.sizer.open(self.controller, self.source, self._spread_chance)
        if not starts:
            return []
        for start in starts:
            self.prompts[start.index] = start.prompt
        if self.staging is not None:
            starts = [self._stage(s) for s in starts]
        opened = WaveOpened(starts[0].wave, range(starts[0].index, starts[-1].index + 1), self.controller.remaining)
        return [*starts, opened]

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


def new_step(
    rollout_batch_size: int,
    over_sampling_batch_size: int,
    n_samples_per_prompt: int,
    *,
    source: Selector,
    waves: WaveMode | str = DEFAULT_WAVE_MODE,
    cushion: float = DEFAULT_CUSHION,
    staging: StagedSiblings | None = None,
    guard: ConsecutiveFailureGuard | None = None,
    max_consecutive_failed_groups: int | None = None,
    tell_source: bool = True,
    group_name: Callable[[Any], object] | None = None,
) -> RolloutStep:
    """The one factory: a step from the run's knobs, its wave mode (the one place it picks the sizer: slime's
    whole waves, or adaptive refills with ``cushion``), staging, selector and guard (or a fresh one of
    ``max_consecutive_failed_groups``, default 8; not both)."""
    sizer: WaveSizer
    if WaveMode.parse(waves) is WaveMode.ADAPTIVE:
        sizer = AdaptiveRefills(AdaptiveWaves(rollout_batch_size, over_sampling_batch_size, cushion),
                                n_samples_per_prompt)
    else:
        sizer = FixedWaves(n_samples_per_prompt)
    return RolloutStep(rollout_batch_size, over_sampling_batch_size, source=source, sizer=sizer, guard=guard,
                       max_consecutive_failed_groups=max_consecutive_failed_groups, staging=staging,
                       tell_source=tell_source, group_name=group_name)
