"""slime's abort stops ShopSim episodes: driven through slime-shaped state (``shopsimrl.slime.harness.double.rollout``) and a scripted SGLang.

The cases slime's real ``abort()`` can run (episodes decoding and queued at the gate, abort
between turns) run against it in ``tests/slime_harness/test_episodes.py``; these are the
cases that need the fake env's control (a blocked env call) or run in process.

slime's ``abort()`` sets ``GenerateState.aborted``, aborts SGLang's running requests and
then waits for every pending group task.  Once it returns: no ``/generate`` was sent
after it started, no env slot is leased, no episode is still running, and every
sample that did not finish is slime's ABORTED, unrewarded, never trained.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agent.fakes import TASK, FakeEnv
from slime_hooks.model_text import WINNING

from shopsimrl.slime.abort import AbortWatch, EpisodeAborted
from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving
from shopsimrl.slime.state import hook_state

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
#: the test tokenizer's template (the ``tokenizer_dir`` fixture of conftest.py reads it)
CHAT_TEMPLATE = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()


def winning_reply(tokenizer):
    """The next move of the winning path, from how many assistant turns the input already holds."""

    def reply(body: dict[str, Any]) -> tuple[str, str]:
        turns = tokenizer.decode(body["input_ids"]).count("<|im_start|>assistant") - 1
        return WINNING[min(turns, len(WINNING) - 1)], "stop"

    return reply


@pytest.fixture
def slime(monkeypatch):
    return slime_double.install(monkeypatch)


def groups(n_groups: int, size: int) -> list[list[slime_double.Sample]]:
    return [[slime_double.Sample(group_index=g, index=g * size + i, prompt=TASK.task_id) for i in range(size)]
            for g in range(n_groups)]


def args_for(server: ScriptedSGLang, tokenizer_dir: Path, tmp_path: Path, **overrides: Any):
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 2000}
    return slime_double.slime_args(
        sglang_router_ip="127.0.0.1", sglang_router_port=server.port, hf_checkpoint=str(tokenizer_dir),
        shopsim_trace_dir=str(tmp_path / "traces"), sampling_params=params,
        apply_chat_template_kwargs={"enable_thinking": False}, **overrides)


def count_requests() -> list[str]:
    """Every request the hook's SGLang client sends, as it sends it (client side, so nothing is in transit)."""
    sent: list[str] = []

    async def record(request) -> None:
        sent.append(str(request.url))

    hook_state().sglang_client().event_hooks["request"].append(record)
    return sent


async def until(condition, what: str, seconds: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def bounded_abort(slime, args) -> None:
    """slime's abort() waits for every group task: bounded, so a hook that ignores it fails instead of hanging."""
    try:
        await asyncio.wait_for(slime.abort(args, rollout_id=0, retry_seconds=0.05), timeout=30)
    except asyncio.TimeoutError:
        pytest.fail("abort() did not return within 30 s: episodes went on after slime's abort")


def assert_idle_and_aborted(state, env: FakeEnv, all_groups, sent_at_abort: int, sent: list[str]) -> None:
    assert len(sent) == sent_at_abort, f"{len(sent) - sent_at_abort} /generate requests after abort started"
    assert env.leased == 0, "an env slot is still leased"
    assert not state.pendings
    watch = hook_state().abort_watch(None)
    assert not watch._running, "an episode is still running"
    for sample in (s for group in all_groups for s in group):
        assert sample.status is slime_double.Sample.Status.ABORTED, (sample.index, sample.status)
        assert sample.reward is None and sample.remove_sample is True
        assert sample.metadata["shopsim_aborted"] is True and sample.metadata["shopsim_scored"] is False
        assert sample.loss_mask in (None, [0] * sample.response_length)


async def test_abort_without_the_poll_reaches_decoding_and_queued_episodes(slime, env, tokenizer, tokenizer_dir, tmp_path):
    """6 episodes, 2 env slots: 2 are in a /generate that only an abort ends, 4 wait at the gate; no poll, so only
    the hook's synchronous checks and SGLang's abort answers act.  (With the poll, the same case runs against
    slime's real abort() in tests/slime_harness/test_episodes.py.)"""
    hook_state().abort_poll_seconds = 3600.0
    server = ScriptedSGLang(tokenizer, winning_reply(tokenizer), delay=None)
    with serving(server):
        args = args_for(server, tokenizer_dir, tmp_path, shopsim_env_slots=2)
        state = slime.GenerateState(args)
        sent = count_requests()
        all_groups = groups(2, 3)
        state.submit_generate_tasks(all_groups)
        await until(lambda: server.running == 2, "two episodes decoding")
        sent_at_abort = len(sent)
        await bounded_abort(slime, args)
        assert_idle_and_aborted(state, env, all_groups, sent_at_abort, sent)
        assert server.running == 0 and server.abort_calls == 1  # idle after the first abort: no retry needed
        assert [c for c in env.calls if c[0] == "reset"] == [("reset", TASK.task_id)] * 2  # the gate let none through


async def test_abort_while_an_env_call_is_blocked(slime, env, tokenizer, tokenizer_dir, tmp_path):
    env.block_on, env.gate = "step", asyncio.Event()  # the env never answers the step
    server = ScriptedSGLang(tokenizer, winning_reply(tokenizer), delay=0.0)
    with serving(server):
        args = args_for(server, tokenizer_dir, tmp_path, shopsim_env_slots=4)
        state = slime.GenerateState(args)
        sent = count_requests()
        all_groups = groups(1, 4)
        state.submit_generate_tasks(all_groups)
        await until(lambda: sum(c[0] == "step" for c in env.calls) == 4, "four steps in the env")
        sent_at_abort = len(sent)
        await bounded_abort(slime, args)
        assert_idle_and_aborted(state, env, all_groups, sent_at_abort, sent)
        traces = [json.loads(p.read_text()) for p in (tmp_path / "traces" / "group_0").glob("*.json")]
        assert len(traces) == 4 and all(t.get("cancelled") for t in traces)


async def test_a_sample_that_arrives_after_the_abort_does_nothing(slime, env, tokenizer, tokenizer_dir, tmp_path):
    server = ScriptedSGLang(tokenizer, winning_reply(tokenizer), delay=0.0)
    with serving(server):
        args = args_for(server, tokenizer_dir, tmp_path)
        state = slime.GenerateState(args)
        state.aborted = True
        sample = slime_double.Sample(group_index=0, index=0, prompt=TASK.task_id)
        out = await slime_double.generate_and_rm(args, sample, dict(args.sampling_params))  # slime's own check
        assert out.status is slime_double.Sample.Status.ABORTED and server.generate_calls == 0
        from shopsimrl.slime_runtime import generate

        direct = await generate(args, slime_double.Sample(group_index=0, index=1, prompt=TASK.task_id),
                                dict(args.sampling_params))  # the hook's own check
        assert direct.status is slime_double.Sample.Status.ABORTED and direct.reward is None
        assert server.generate_calls == 0 and env.calls == []


async def test_sglang_abort_without_slime_abort_is_a_technical_failure(slime, env, tokenizer, tokenizer_dir, tmp_path):
    """SGLang aborting on its own (slime did not abort): the group must be dropped as technical, so it stays scoreable."""
    server = ScriptedSGLang(tokenizer, winning_reply(tokenizer), delay=None)
    with serving(server):
        args = args_for(server, tokenizer_dir, tmp_path)
        slime.GenerateState(args)
        sample = slime_double.Sample(group_index=0, index=0, prompt=TASK.task_id)
        from shopsimrl.slime_runtime import generate

        episode = asyncio.ensure_future(generate(args, sample, dict(args.sampling_params)))
        await until(lambda: server.running == 1, "the request")
        import httpx

        async with httpx.AsyncClient() as http:
            await http.post(f"{server.url}/abort_request", json={"abort_all": True})
        await episode
        assert sample.status is slime_double.Sample.Status.ABORTED and sample.remove_sample is True
        assert sample.metadata["shopsim_scored"] is False and sample.metadata["shopsim_aborted"] is False
        assert sample.metadata["shopsim_error"]["type"] == "SGLangAborted"
        assert sample.reward == {"reward": 0.0} and env.leased == 0


async def test_the_watch_passes_the_callers_cancellation_on_and_waits_for_cleanup():
    flag = {"aborted": False}
    watch = AbortWatch(lambda: flag["aborted"], poll_seconds=0.001)
    cleaned = asyncio.Event()

    async def work():
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # cleanup that takes a while (an env release)
            cleaned.set()

    caller = asyncio.ensure_future(watch.run(work()))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert cleaned.is_set()

    flag["aborted"] = True
    with pytest.raises(EpisodeAborted):
        await watch.run(work())  # refused at once: the coroutine never starts


def test_outside_slime_nothing_aborts_and_inside_the_flag_is_slimes(monkeypatch):
    from shopsimrl.slime.abort import slime_abort_flag

    monkeypatch.delitem(sys.modules, "slime.rollout.sglang_rollout", raising=False)
    assert slime_abort_flag(object())() is False
    module = slime_double.install(monkeypatch)
    args = slime_double.slime_args(sampling_params={})
    flag = slime_abort_flag(args)
    assert flag() is False
    module.GenerateState(args).aborted = True
    assert flag() is True
    module.GenerateState(args).reset()  # slime's reset() at the end of the step
    assert flag() is False


def test_no_task_of_the_watch_outlives_the_last_episode():
    """The poller ends with the last episode: a loop closed right after has nothing pending to destroy."""
    loop = asyncio.new_event_loop()
    watch = AbortWatch(lambda: False, poll_seconds=3600.0)

    async def episodes() -> list[asyncio.Task]:
        await asyncio.gather(watch.run(asyncio.sleep(0.01)), watch.run(asyncio.sleep(0.02)))
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    try:
        assert loop.run_until_complete(episodes()) == []
    finally:
        loop.close()
