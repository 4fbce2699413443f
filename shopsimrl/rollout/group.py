"""Siblings -> group: run ``n_samples_per_prompt`` episodes of one task, then triage them.

A group is the unit the filter judges, so it completes only when every sibling
has finished.  Its triage (classification, per-sibling rewards, end reasons,
errors, trace paths) is written here, *before* the driver hands the group to
the controller: an all-wrong group dropped as zero-std must still reach the
Failure Analyst.  The verdict comes from :func:`shopsimrl.sampling.group_verdict`
on slime-like samples, so the rule lives in one place.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.sampling import Verdict, group_verdict

CLASSIFICATIONS = ("technical", "all_wrong", "all_correct", "same_partial", "varied")


@dataclass(frozen=True, slots=True)
class EpisodeSpec:
    """Everything needed to start one sibling episode."""

    task_id: str
    rollout_id: str
    seed: int
    trace_path: Path | None  # None: no trace written (measurement)
    group_index: int
    sibling: int


@dataclass(slots=True)
class EpisodeMeter:
    """Live progress of one episode, updated by the runner: the only record an aborted episode leaves."""

    env_steps: int = 0
    started: float | None = None
    seconds: float = 0.0
    page_chars: list[int] = field(default_factory=list)  # each page read (reset first): the modelled prefill
    tokens: float = 0.0  # response tokens on the modelled clock (0 on the machine's)


EpisodeRunner = Callable[[EpisodeSpec, EpisodeMeter], Awaitable[EpisodeResult]]


class EpisodeSlots:
    """The global episode-concurrency limit (a semaphore) that also knows how many slots are in use."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"episode concurrency must be >= 1, got {limit}")
        self.limit = limit
        self.in_use = 0
        self._semaphore = asyncio.Semaphore(limit)

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()
        self.in_use += 1

    async def __aexit__(self, *exc_info: object) -> None:
        self.in_use -= 1
        self._semaphore.release()


def episode_seed(run_seed: int, step: int, group_index: int, sibling: int) -> int:
    """A stable 31-bit seed per sibling: siblings differ, reruns repeat."""
    digest = hashlib.blake2b(f"{run_seed}/{step}/{group_index}/{sibling}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


@dataclass(slots=True)
class GroupRun:
    """One submitted group: its siblings' meters while running, its results once finished."""

    index: int
    wave: int
    task_id: str
    specs: list[EpisodeSpec]
    meters: list[EpisodeMeter] = field(default_factory=list)
    episodes: list[EpisodeResult] = field(default_factory=list)
    verdict: Verdict | None = None
    classification: str | None = None
    triage_path: Path | None = None
    started: bool = False  # at least one sibling got an episode slot
    weight: float = 1.0  # the selector's importance weight of this hand-out (advantages are scaled by it)

    @property
    def env_steps(self) -> int:
        return sum(m.env_steps for m in self.meters)

    def episode_seconds(self, now: float | None = None) -> float:
        """Episode-seconds spent so far (an episode still running counts up to ``now``)."""
        now = time.perf_counter() if now is None else now
        total = 0.0
        for m in self.meters:
            if m.seconds:  # finished (or cancelled)
                total += m.seconds
            elif m.started is not None:  # still running
                total += max(0.0, now - m.started)
        return total

    def samples(self) -> list[dict[str, Any]]:
        """The siblings as slime-like samples (what ``group_verdict`` reads)."""
        n = len(self.specs)
        return [
            {
                "index": self.index * n + i,
                "rollout_id": ep.rollout_id,
                "reward": ep.reward,
                "metadata": {"shopsim_scored": bool(ep.scored)},
            }
            for i, ep in enumerate(self.episodes)
        ]


def classify(verdict: Verdict, episodes: Sequence[EpisodeResult]) -> str:
    """The group label, shared by triage and measurement: it refines the filter's verdict, never contradicts it.

    ``technical`` and ``varied`` are the verdict's own (rewards spread by more than 1e-6
    is varied, whatever the successes).  A zero-std group is ``all_correct`` when every
    sibling has ``r_success = 1``, ``all_wrong`` when the common reward is 0, else
    ``same_partial`` (the same reward strictly between 0 and 1, e.g. the right product
    with the same wrong colour).
    """
    if verdict is not Verdict.ZERO_STD:
        return verdict.value  # "technical" | "varied"
    if all(ep.success == 1 for ep in episodes):
        return "all_correct"
    return "all_wrong" if not episodes[0].reward else "same_partial"


def never_succeeded(episodes: Sequence[EpisodeResult]) -> bool:
    """Every sibling scored and none with ``r_success = 1``, whatever the label: the Failure Analyst's queue.

    These are the groups ``rollout/shopsim/all_wrong_group_rate`` counts; their label may
    be ``all_wrong``, ``same_partial`` or ``varied`` (differing partial rewards).
    """
    return bool(episodes) and all(ep.scored and not ep.success for ep in episodes)


def triage_record(group: GroupRun, *, step: int, finished_at: float) -> dict[str, Any]:
    """The triage JSON of a finished group (no decision: it is written before the filter)."""
    return {
        "step": step,
        "group_index": group.index,
        "wave": group.wave,
        "task_id": group.task_id,
        "classification": group.classification,
        "verdict": group.verdict.value if group.verdict else None,
        "finished_at": round(finished_at, 6),
        "siblings": [
            {
                "sibling": i,
                "rollout_id": ep.rollout_id,
                "seed": ep.seed,
                "scored": bool(ep.scored),
                "reward": ep.reward,
                "strict_reward": ep.strict_reward,
                "success": ep.success,
                "end_reason": ep.end_reason,
                "error": ep.error,
                "turns": ep.turns,
                "env_steps": ep.env_steps,
                "wall_seconds": ep.wall_seconds,
                "trace_path": str(ep.trace_path) if ep.trace_path else None,
            }
            for i, ep in enumerate(group.episodes)
        ],
    }


async def _run_sibling(
    runner: EpisodeRunner, spec: EpisodeSpec, meter: EpisodeMeter, slots: EpisodeSlots, group: GroupRun
) -> EpisodeResult:
    """One episode under the global concurrency limit; a runner exception becomes a technical sibling."""
    async with slots:
        group.started = True
        meter.started = time.perf_counter()
        try:
            return await runner(spec, meter)
        except Exception as exc:  # the runner's contract is "never raises"; a bug must not kill the step
            return EpisodeResult.failed(
                task_id=spec.task_id,
                rollout_id=spec.rollout_id,
                seed=spec.seed,
                error={"type": type(exc).__name__, "message": str(exc), "stage": "runner",
                       "traceback": traceback.format_exc(limit=5)},
                env_steps=meter.env_steps,
                wall_seconds=time.perf_counter() - meter.started,
            )
        finally:
            meter.seconds = max(time.perf_counter() - meter.started, 1e-9)


async def run_rest(
    group: GroupRun,
    rest: list[EpisodeSpec],
    runner: EpisodeRunner,
    slots: EpisodeSlots,
    *,
    on_finished: Callable[[GroupRun], None] | None = None,
) -> GroupRun:
    """Staged siblings: run the rest of a group whose first siblings are back, then judge the whole group.

    The rest joins the group (specs, meters, episodes, in sibling order) before the verdict, the
    classification and ``on_finished``: the filter and triage only ever see whole groups.
    """
    part = GroupRun(index=group.index, wave=group.wave, task_id=group.task_id, specs=rest)
    await run_group(part, runner, slots)
    return join_rest(group, part, on_finished=on_finished)


def join_rest(group: GroupRun, part: GroupRun, *, on_finished: Callable[[GroupRun], None] | None = None) -> GroupRun:
    """A staged group's finished rest (``part``) joins it; then the verdict of the whole group and ``on_finished``."""
    group.specs = [*group.specs, *part.specs]
    group.meters = [*group.meters, *part.meters]
    group.episodes = [*group.episodes, *part.episodes]
    group.verdict = group_verdict(group.samples(), label=f"group {group.index}")
    group.classification = classify(group.verdict, group.episodes)
    if on_finished is not None:
        on_finished(group)
    return group


async def run_group(
    group: GroupRun,
    runner: EpisodeRunner,
    slots: EpisodeSlots,
    *,
    on_finished: Callable[[GroupRun], None] | None = None,
) -> GroupRun:
    """Run every sibling concurrently; once all are back, set the verdict and call ``on_finished`` (triage).

    Cancelling this coroutine cancels every sibling and waits for them, so each
    releases its env session before the cancellation completes.
    """
    group.meters = [EpisodeMeter() for _ in group.specs]
    # gather, not TaskGroup (Python 3.10). return_exceptions=True matters: without it, gather
    # completes as soon as the first sibling is cancelled, while the others may still be releasing
    # their env sessions; with it, a cancelled run_group waits until every sibling has unwound.
    results = await asyncio.gather(
        *(_run_sibling(runner, s, m, slots, group) for s, m in zip(group.specs, group.meters)),
        return_exceptions=True,
    )
    for result in results:  # _run_sibling turns ordinary exceptions into technical siblings
        if isinstance(result, BaseException):
            raise result
    group.episodes = list(results)  # type: ignore[arg-type]
    group.verdict = group_verdict(group.samples(), label=f"group {group.index}")
    group.classification = classify(group.verdict, group.episodes)
    if on_finished is not None:
        on_finished(group)
    return group
