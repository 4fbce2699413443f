"""The episode loop: one policy, one env session, one scored (or unscored) episode and its trace.

Rules (docs/agent.md explains them at length):

* at most ``max_turns`` turns; a turn is one policy reply, whether it became an env
  action or a protocol error (which is fed back to the policy).  The policy sees each
  page with its turns left (``messages.with_turns_left``) and the episode's fixed tool
  list (``messages.EPISODE_TOOLS``);
* a reply cut by the token limit before any tool call ends the episode as
  ``generation_length``, running out of turns ends it as ``action_limit`` (both via
  ``env.terminate``, both scored 0 by the env) unless the env ended it first;
* any exception from the env or the policy, or a missing / non-finite final reward,
  makes the episode *unscored*: the rollout must drop the whole group as technical
  rather than train on a made-up 0.  Those never raise out of :func:`run_episode`;
* ``asyncio.CancelledError`` propagates (the driver aborts in-flight episodes), but
  the env lease is always released first, shielded from the cancellation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.agent.messages import EPISODE_TOOLS, with_turns_left
from shopsimrl.agent.model_reply import clip_reply
from shopsimrl.agent.policy import Policy, PolicyEpisode, PolicyTurn, TurnFeedback
from shopsimrl.agent.protocol import GenerationCut, ProtocolError, parse_turn
from shopsimrl.agent.result import EpisodeResult
from shopsimrl.agent.trace import TraceRecorder, json_safe, write_trace
from shopsimrl.defaults import DEFAULT_MAX_TURNS
from shopsimrl.env.types import EnvClient, Observation, ResetResult, StepResult
from shopsimrl.errors import InfraFailure

log = logging.getLogger(__name__)


class _Technical(InfraFailure):
    """Internal: carries the error record of an unscored episode out of the turn loop."""

    def __init__(self, stage: str, exc: BaseException | None = None, *, type_: str = "", message: str = "") -> None:
        super().__init__(message)
        self.record: dict[str, Any] = {
            "stage": stage,
            "type": type(exc).__name__ if exc is not None else type_,
            "message": str(exc) if exc is not None else message,
        }
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            self.record["code"] = code


@dataclass
class _Tally:
    """Per-episode counters; a plain local object, so concurrent episodes never share it."""

    lease_id: str | None = None
    turns: int = 0
    env_steps: int = 0
    protocol_errors: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    last: StepResult | None = None

    def count_tokens(self, turn: PolicyTurn) -> None:
        # A total is only meaningful if every turn reported its usage (a whole number: any other is not known).
        self.prompt_tokens = _add(self.prompt_tokens, turn.prompt_tokens)
        self.completion_tokens = _add(self.completion_tokens, turn.completion_tokens)


def _add(total: int | None, count: object) -> int | None:
    if total is None or not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return None
    return total + count


async def run_episode(
    env: EnvClient,
    policy: Policy,
    task_id: str,
    *,
    rollout_id: str,
    seed: int,
    max_turns: int = DEFAULT_MAX_TURNS,
    trace_path: Path | None = None,
) -> EpisodeResult:
    """Play one episode of ``task_id``; never raises for env/policy failures (see module doc)."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    recorder = TraceRecorder(
        task_id=task_id,
        policy=policy.name,
        policy_options=_describe(policy),
        seed=seed,
        rollout_id=rollout_id,
        max_turns=max_turns,
    )
    tally = _Tally()
    error: dict[str, Any] | None = None
    release_error: dict[str, Any] | None = None
    cancelled = False
    try:
        await _play(env, policy, task_id, seed, max_turns, recorder, tally)
    except _Technical as failure:
        error = failure.record
    except asyncio.CancelledError:
        cancelled = True
        raise
    finally:
        try:
            if tally.lease_id is not None:
                release_error = await _release(env, tally.lease_id)
        except asyncio.CancelledError:  # cancelled while releasing: the episode's result is lost too
            cancelled = True
            raise
        finally:
            if cancelled and trace_path is not None:
                _write_cancelled_trace(trace_path, recorder, tally, release_error)

    last = tally.last
    info = last.info if last is not None else {}
    end_reason = info.get("end_reason") if last is not None and last.done else None
    reward_detail = info.get("reward_detail")
    reward: float | None = None
    if error is None:
        try:
            reward = _final_reward(last)
        except _Technical as failure:
            error = failure.record
    scored = error is None
    success = _detail_number(reward_detail, "r_success") if scored else None
    strict = _detail_number(reward_detail, "r_strict") if scored else None
    result_trace: str | None = None
    trace = recorder.build(
        scored=scored,
        reward=reward,
        reward_detail=reward_detail,
        end_reason=end_reason,
        error=error,
        prompt_tokens=tally.prompt_tokens,
        completion_tokens=tally.completion_tokens,
        release_error=release_error,
    )
    if trace_path is not None:
        try:
            result_trace = str(write_trace(trace_path, trace))
        except (OSError, ValueError, TypeError) as exc:  # a lost trace must not lose the episode
            log.warning("could not write trace %s: %s", trace_path, exc)
    return EpisodeResult(
        task_id=task_id,
        rollout_id=rollout_id,
        seed=seed,
        policy=policy.name,
        scored=scored,
        reward=reward,
        reward_detail=dict(reward_detail) if scored and isinstance(reward_detail, dict) else None,
        success=success,
        strict_reward=strict if strict is not None else reward,
        end_reason=end_reason,
        error=error,
        turns=tally.turns,
        env_steps=tally.env_steps,
        protocol_errors=tally.protocol_errors,
        wall_seconds=round(recorder.elapsed(), 6),
        prompt_tokens=tally.prompt_tokens,
        completion_tokens=tally.completion_tokens,
        trace_path=result_trace,
    )


async def _play(
    env: EnvClient,
    policy: Policy,
    task_id: str,
    seed: int,
    max_turns: int,
    recorder: TraceRecorder,
    tally: _Tally,
) -> None:
    """The turn loop; leaves its outcome in ``tally`` and raises :class:`_Technical` on failure."""
    reset = await _guard("reset", _reset, env, task_id, tally)
    recorder.task = reset.task
    try:
        episode: PolicyEpisode = policy.new_episode(reset.task, seed)
    except Exception as exc:
        raise _Technical("policy", exc) from exc
    observation = reset.observation
    recorder.final_observation = observation.text
    feedback: TurnFeedback | None = None
    for turn in range(max_turns):
        shown = _as_shown(observation, max_turns - turn)
        started = time.monotonic()
        reply = await _guard("policy", episode.act, shown, feedback)
        try:
            parsed = parse_turn(reply, EPISODE_TOOLS)
            output = _output_record(reply)
            tally.count_tokens(reply)
        except Exception as exc:  # a policy returning something that is not a PolicyTurn (or one of odd types)
            raise _Technical("policy", exc) from exc
        policy_seconds = time.monotonic() - started
        tally.turns += 1
        if isinstance(parsed, ProtocolError):
            tally.protocol_errors += 1
            recorder.add_step(
                observation=shown,
                output=output,
                action=None,
                protocol_error=parsed.as_dict(),
                result=None,
                policy_seconds=policy_seconds,
                env_seconds=0.0,
            )
            feedback = TurnFeedback("protocol", parsed.code, parsed.message)
            continue
        started = time.monotonic()
        if isinstance(parsed, GenerationCut):
            result = await _guard("terminate", env.terminate, reset.lease_id, "generation_length")
            action = None
        else:
            result = await _guard("step", env.step, reset.lease_id, parsed)
            tally.env_steps += 1
            action = parsed
        tally.last = result
        recorder.add_step(
            observation=shown,
            output=output,
            action=action,
            protocol_error=None,
            result=result,
            policy_seconds=policy_seconds,
            env_seconds=time.monotonic() - started,
        )
        observation = result.observation
        recorder.final_observation = observation.text
        if result.done:
            return
        feedback = _env_feedback(result)
    tally.last = await _guard("terminate", env.terminate, reset.lease_id, "action_limit")
    recorder.final_observation = tally.last.observation.text


def _as_shown(observation: Observation, turns_left: int) -> Observation:
    """The page as offered to the policy: the episode's fixed tools and its turns left.

    Turns left is this turn and the ones after it, capped by the env's own remaining
    steps when the env's action limit is the closer one.
    """
    env_left = observation.state.get("steps_left")
    if isinstance(env_left, int) and not isinstance(env_left, bool):
        turns_left = min(turns_left, env_left)
    return with_turns_left(dataclasses.replace(observation, tools=EPISODE_TOOLS), turns_left)


async def _guard(stage: str, method: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """Call and await, turning any ordinary exception into an unscored-episode record for ``stage``."""
    try:
        return await method(*args)
    except Exception as exc:
        raise _Technical(stage, exc) from exc


async def _reset(env: EnvClient, task_id: str, tally: _Tally) -> ResetResult:
    """Reset so that a cancellation arriving meanwhile cannot lose the lease it creates.

    A reset runs on (a worker thread or a server) even when its caller is cancelled;
    its lease would then belong to nobody.  So the reset is finished first and its
    lease recorded for ``run_episode``'s ``finally`` to release.
    """
    work = asyncio.ensure_future(_call(env.reset, task_id))
    try:
        result: ResetResult = await run_shielded(work)
    except asyncio.CancelledError:
        if work.done() and not work.cancelled() and work.exception() is None:
            tally.lease_id = work.result().lease_id
        raise
    tally.lease_id = result.lease_id
    return result


def _env_feedback(result: StepResult) -> TurnFeedback | None:
    feedback = result.info.get("feedback")
    if not feedback:
        return None
    return TurnFeedback("env", str(feedback.get("code", "")), str(feedback.get("message", "")))


def _final_reward(last: StepResult | None) -> float:
    """The scored reward of an ended episode; anything else is a technical failure."""
    if last is None or not last.done:
        raise _Technical("reward", type_="EpisodeNotEnded", message="the episode ended without a final step result")
    reward = last.reward
    if reward is None:
        raise _Technical("reward", type_="MissingReward", message="the env returned no final reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise _Technical("reward", type_="NonFiniteReward", message=f"the final reward is not a finite number: {reward!r}")
    detail = last.info.get("reward_detail")
    if isinstance(detail, dict):
        for key in ("r_success", "r_strict"):
            value = detail.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
                raise _Technical("reward", type_="NonFiniteReward", message=f"reward_detail[{key!r}] is not a finite number: {value!r}")
    return float(reward)


def _detail_number(detail: Any, key: str) -> float | None:
    if isinstance(detail, dict) and isinstance(detail.get(key), (int, float)):
        return float(detail[key])
    return None


def _output_record(reply: PolicyTurn) -> dict[str, Any]:
    """The reply as the trace keeps it: cut as in the conversation sent back (``clip_reply``), saying so."""
    text, calls, cut = clip_reply(reply.text, reply.tool_calls)
    return {
        "text": text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
        "finish_reason": reply.finish_reason,
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        **({"cut": cut} if cut is not None else {}),
    }


def _describe(policy: Policy) -> dict[str, Any]:
    describe = getattr(policy, "describe", None)
    return dict(describe()) if callable(describe) else {}


async def _release(env: EnvClient, lease_id: str) -> dict[str, Any] | None:
    """Release the lease even while being cancelled; a failing release is recorded, not raised."""
    try:
        await run_shielded(_call(env.release, lease_id))
    except Exception as exc:
        log.warning("releasing lease of an episode failed: %s: %s", type(exc).__name__, exc)
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


async def run_shielded(awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable`` to completion even if the caller is cancelled meanwhile.

    ``asyncio.shield`` alone lets the *caller* return early on cancellation while the
    inner task goes on, so a test (or the driver) could observe the lease still held.
    Here the caller keeps waiting until the work is done, then re-raises the
    cancellation it swallowed, so cancellation still propagates (and wins over any
    error of the work itself).
    """
    task = asyncio.ensure_future(awaitable)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
        raise asyncio.CancelledError
    return task.result()


async def _call(method: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return await method(*args)


def _write_cancelled_trace(
    trace_path: Path, recorder: TraceRecorder, tally: _Tally, release_error: dict[str, Any] | None
) -> None:
    """Cheap and synchronous, so it cannot itself be interrupted by the cancellation."""
    trace = recorder.build(
        scored=False,
        reward=None,
        reward_detail=None,
        end_reason=None,
        error=None,
        prompt_tokens=tally.prompt_tokens,
        completion_tokens=tally.completion_tokens,
        cancelled=True,
        release_error=release_error,
    )
    try:
        write_trace(trace_path, json_safe(trace))
    except (OSError, ValueError, TypeError) as exc:
        log.warning("could not write cancelled trace %s: %s", trace_path, exc)
