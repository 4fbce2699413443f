"""The episode loop's rules, against the in-memory fake shop."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from agent.fakes import TASK, WINNING, FakeEnv, ScriptedPolicy, call, raw_call

from shopsimrl.agent import TRACE_SCHEMA, EpisodeResult, PolicyTurn, ToolCall, run_episode, run_shielded


async def play(env: FakeEnv, policy: ScriptedPolicy, tmp_path: Path | None = None, **kw) -> EpisodeResult:
    trace = tmp_path / "trace.json" if tmp_path is not None else None
    return await run_episode(env, policy, TASK.task_id, rollout_id="r-0", seed=7, trace_path=trace, **kw)


async def test_winning_episode_is_scored_released_and_traced(tmp_path: Path) -> None:
    env = FakeEnv()
    result = await play(env, ScriptedPolicy(WINNING), tmp_path)
    assert result.scored and result.error is None
    assert (result.reward, result.success, result.strict_reward) == (1.0, 1.0, 1.0)
    assert result.end_reason == "purchase"
    assert (result.turns, result.env_steps, result.protocol_errors) == (4, 4, 0)
    assert env.leased == 0 and len(env.released) == 1
    assert [c for c in env.calls if c[0] == "step"] == [
        ("step", "search[red hiking boots]"), ("step", "click[p1]"), ("step", "click[size=9]"), ("step", "click[buy now]")]
    json.dumps(result.as_dict(), allow_nan=False)

    trace = json.loads(Path(result.trace_path).read_text())
    assert trace["schema"] == TRACE_SCHEMA == "shopsimrl.trace/v2"
    assert trace["task"] == {"task_id": "t-1", "split": "train", "instruction": TASK.instruction, "goal": TASK.goal}
    assert (trace["policy"], trace["seed"], trace["rollout_id"]) == ("scripted", 7, "r-0")
    assert trace["scored"] is True and trace["cancelled"] is False and trace["error"] is None
    assert trace["final"]["reward"] == 1.0 and trace["final"]["reward_detail"]["r_success"] == 1.0
    first = trace["steps"][0]
    assert first["observation"].startswith("[search page]")
    assert first["tools"][0]["function"]["name"] == "search"
    assert first["output"]["tool_calls"] == [{"id": "c", "name": "search", "arguments": '{"query": "red hiking boots"}'}]
    assert first["action"] == "search[red hiking boots]" and first["protocol_error"] is None
    assert trace["steps"][-1]["terminated"] is True and trace["steps"][-1]["reward"] == 1.0
    assert len(trace["timings"]["per_step_seconds"]) == 4 and trace["timings"]["seconds"] >= 0
    assert trace["tokens"] == {"prompt": None, "completion": None}


def _malformed_turns() -> list[tuple[str, PolicyTurn]]:
    two_calls = PolicyTurn(text=None, tool_calls=(ToolCall("search", '{"query": "a"}', "a"), ToolCall("search", '{"query": "b"}', "b")),
                           finish_reason="tool_calls")
    return [
        ("no_tool_call", PolicyTurn(text="I would search for boots.", finish_reason="stop")),
        ("multiple_tool_calls", two_calls),
        ("text_with_tool_call", raw_call("search", '{"query": "boots"}', text="Let me search.")),
        ("unknown_tool", raw_call("buy", '{"product": "p1"}')),
        ("invalid_arguments", raw_call("search", '{"query": "boots"')),  # bad JSON
        ("invalid_arguments", raw_call("search", "{}")),  # missing query
        ("invalid_arguments", raw_call("search", '{"query": 42}')),  # wrong type
        ("invalid_arguments", raw_call("click", '{"value": "p1", "extra": 1}')),  # unexpected key
    ]


@pytest.mark.parametrize(("code", "bad"), _malformed_turns())
async def test_protocol_error_is_fed_back_and_uses_a_turn(code: str, bad: PolicyTurn) -> None:
    env = FakeEnv()
    policy = ScriptedPolicy([bad, *WINNING])
    result = await play(env, policy)
    assert result.scored and result.reward == 1.0
    assert (result.turns, result.env_steps, result.protocol_errors) == (5, 4, 1)
    feedback = policy.seen[1][1]
    assert feedback is not None and (feedback.source, feedback.code) == ("protocol", code)
    assert feedback.message
    before, after = policy.seen[0][0], policy.seen[1][0]
    assert before.endswith("(turns left: 30)\n") and after.endswith("(turns left: 29)\n")  # the turn was spent...
    assert after.replace("(turns left: 29)", "(turns left: 30)") == before  # ...and the page did not change
    assert [c for c in env.calls if c[0] == "step"][0] == ("step", "search[red hiking boots]")


async def test_unoffered_click_value_goes_to_the_env_not_the_protocol() -> None:
    env = FakeEnv()
    policy = ScriptedPolicy([WINNING[0], call("click", value="p9"), *WINNING[1:]])
    result = await play(env, policy)
    assert result.protocol_errors == 0 and result.env_steps == 5 and result.reward == 1.0
    assert ("step", "click[p9]") in env.calls
    feedback = policy.seen[2][1]
    assert (feedback.source, feedback.code) == ("env", "unavailable_action")


async def test_search_where_not_offered_and_empty_query_reach_the_env() -> None:
    env = FakeEnv()
    policy = ScriptedPolicy([WINNING[0], call("search", query=""), *WINNING[1:]])
    result = await play(env, policy)
    assert result.protocol_errors == 0 and ("step", "search[]") in env.calls
    assert policy.seen[2][1].code == "empty_argument"  # as the real env: the action is parsed before the page is checked


async def test_length_cut_without_tool_call_ends_as_generation_length(tmp_path: Path) -> None:
    env = FakeEnv()
    policy = ScriptedPolicy([WINNING[0], PolicyTurn(text="Let me think about the", finish_reason="length")])
    result = await play(env, policy, tmp_path)
    assert ("terminate", "generation_length") in env.calls
    assert result.scored and result.reward == 0.0 and result.end_reason == "generation_length"
    assert (result.turns, result.env_steps) == (2, 1)
    assert env.leased == 0
    trace = json.loads(Path(result.trace_path).read_text())
    assert trace["steps"][-1]["truncated"] is True and trace["steps"][-1]["action"] is None


async def test_length_cut_with_a_complete_tool_call_is_an_ordinary_turn() -> None:
    env = FakeEnv()
    cut = PolicyTurn(text=None, tool_calls=WINNING[0].tool_calls, finish_reason="length")
    result = await play(env, ScriptedPolicy([cut, *WINNING[1:]]))
    assert result.reward == 1.0 and ("terminate", "generation_length") not in env.calls


@pytest.mark.parametrize("max_turns", [1, 3, 30])
async def test_turn_limit_ends_as_action_limit(max_turns: int) -> None:
    env = FakeEnv()
    policy = ScriptedPolicy([WINNING[0], call("click", value="back to search")] * 20 + [PolicyTurn(text="hmm")])
    result = await play(env, policy, max_turns=max_turns)
    assert result.turns == max_turns and env.calls[-2] == ("terminate", "action_limit")
    assert result.scored and result.reward == 0.0 and result.end_reason == "action_limit"
    assert env.leased == 0


async def test_protocol_errors_alone_run_into_the_action_limit() -> None:
    env = FakeEnv()
    result = await play(env, ScriptedPolicy([PolicyTurn(text="no tools for me")]), max_turns=5)
    assert (result.turns, result.env_steps, result.protocol_errors) == (5, 0, 5)
    assert result.end_reason == "action_limit" and result.reward == 0.0


async def test_env_ending_on_the_last_turn_is_not_terminated_again() -> None:
    env = FakeEnv()
    result = await play(env, ScriptedPolicy(WINNING), max_turns=4)
    assert result.end_reason == "purchase" and not any(c[0] == "terminate" for c in env.calls)


@pytest.mark.parametrize("stage", ["reset", "step", "terminate"])
async def test_env_exception_makes_the_episode_unscored(stage: str, tmp_path: Path) -> None:
    env = FakeEnv(fail_on=stage)
    turns = [WINNING[0], PolicyTurn(text="...", finish_reason="length")]
    result = await play(env, ScriptedPolicy(turns), tmp_path)
    assert not result.scored
    assert result.reward is None and result.success is None and result.strict_reward is None
    assert result.error == {"stage": stage, "type": "EnvError", "message": f"injected {stage} failure", "code": "injected"}
    assert env.leased == 0
    assert len(env.released) == (0 if stage == "reset" else 1)
    trace = json.loads(Path(result.trace_path).read_text())
    assert trace["scored"] is False and trace["error"]["stage"] == stage


async def test_unknown_task_is_a_reset_failure() -> None:
    env = FakeEnv()
    result = await run_episode(env, ScriptedPolicy(WINNING), "nope", rollout_id="r", seed=0)
    assert not result.scored and result.error["stage"] == "reset" and result.error["code"] == "unknown_task"


async def test_policy_exception_makes_the_episode_unscored() -> None:
    env = FakeEnv()
    result = await play(env, ScriptedPolicy([WINNING[0], RuntimeError("model server exploded")]))
    assert not result.scored and result.error == {"stage": "policy", "type": "RuntimeError", "message": "model server exploded"}
    assert (result.turns, result.env_steps) == (1, 1) and env.leased == 0


async def test_policy_failing_to_start_an_episode_is_unscored() -> None:
    env = FakeEnv()
    result = await play(env, ScriptedPolicy(WINNING, fail_new_episode=True))
    assert not result.scored and result.error["stage"] == "policy" and env.leased == 0


async def test_policy_returning_garbage_is_unscored() -> None:
    env = FakeEnv()
    result = await play(env, ScriptedPolicy(["search[boots]"]))  # type: ignore[list-item]
    assert not result.scored and result.error["stage"] == "policy"


@pytest.mark.parametrize("bad_reward", [None, math.nan, math.inf, -math.inf, "1.0"])
async def test_missing_or_non_finite_reward_is_unscored(bad_reward: object, tmp_path: Path) -> None:
    env = FakeEnv(reward_override=bad_reward)
    result = await play(env, ScriptedPolicy(WINNING), tmp_path)
    assert not result.scored and result.error["stage"] == "reward"
    assert result.reward is None and result.reward_detail is None
    assert result.end_reason == "purchase"
    json.dumps(result.as_dict(), allow_nan=False)
    trace = json.loads(Path(result.trace_path).read_text())  # still strict JSON
    assert trace["error"]["stage"] == "reward"


async def test_release_failure_is_recorded_but_keeps_the_score(tmp_path: Path) -> None:
    env = FakeEnv(fail_on="release")
    result = await play(env, ScriptedPolicy(WINNING), tmp_path)
    assert result.scored and result.reward == 1.0
    trace = json.loads(Path(result.trace_path).read_text())
    assert trace["release_error"]["type"] == "EnvError"


async def test_cancellation_propagates_and_releases_the_lease(tmp_path: Path) -> None:
    gate = asyncio.Event()
    env = FakeEnv(block_on="step", gate=gate)
    task = asyncio.create_task(play(env, ScriptedPolicy(WINNING), tmp_path))
    while not any(c[0] == "step" for c in env.calls):
        await asyncio.sleep(0)
    assert env.leased == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.leased == 0 and len(env.released) == 1
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["cancelled"] is True and trace["scored"] is False


async def test_a_second_cancel_during_release_still_waits_for_the_release() -> None:
    gate = asyncio.Event()
    env = FakeEnv(block_on="release", gate=gate)
    task = asyncio.create_task(play(env, ScriptedPolicy(WINNING)))
    while not any(c[0] == "release" for c in env.calls):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and env.leased == 1  # still releasing, not abandoned
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.leased == 0


async def test_a_cancel_arriving_during_the_final_release_still_leaves_a_cancelled_trace(tmp_path: Path) -> None:
    gate = asyncio.Event()
    env = FakeEnv(block_on="release", gate=gate)
    task = asyncio.create_task(play(env, ScriptedPolicy(WINNING), tmp_path))
    while not any(c[0] == "release" for c in env.calls):  # the episode ended; its release is in flight
        await asyncio.sleep(0)
    task.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.leased == 0
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["cancelled"] is True


async def test_run_shielded_returns_the_value_when_not_cancelled() -> None:
    async def value() -> int:
        await asyncio.sleep(0)
        return 3

    assert await run_shielded(value()) == 3


async def test_concurrent_episodes_do_not_share_state() -> None:
    env = FakeEnv()
    results = await asyncio.gather(*(
        run_episode(env, ScriptedPolicy(WINNING if i % 2 else WINNING[:1]), TASK.task_id, rollout_id=f"r{i}", seed=i, max_turns=6)
        for i in range(8)))
    assert [r.reward for r in results] == [0.0, 1.0] * 4
    assert [r.rollout_id for r in results] == [f"r{i}" for i in range(8)]
    assert env.leased == 0


async def test_max_turns_must_be_positive() -> None:
    with pytest.raises(ValueError):
        await play(FakeEnv(), ScriptedPolicy(WINNING), max_turns=0)


async def test_unwritable_trace_path_does_not_lose_the_episode(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = await run_episode(FakeEnv(), ScriptedPolicy(WINNING), TASK.task_id, rollout_id="r", seed=0,
                               trace_path=blocker / "trace.json")
    assert result.scored and result.trace_path is None


async def test_cancel_during_reset_still_releases_the_lease_the_reset_creates() -> None:
    gate = asyncio.Event()
    env = FakeEnv(block_on="reset", gate=gate)
    task = asyncio.create_task(play(env, ScriptedPolicy(WINNING)))
    while not env.calls:
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()  # waits for the reset instead of orphaning its lease
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.leased == 0 and len(env.released) == 1 and not any(c[0] == "step" for c in env.calls)


async def test_cancel_during_a_failing_reset_still_propagates_the_cancellation() -> None:
    gate = asyncio.Event()
    env = FakeEnv(block_on="reset", gate=gate, fail_on="reset")
    task = asyncio.create_task(play(env, ScriptedPolicy(WINNING)))
    while not env.calls:
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.released == []
