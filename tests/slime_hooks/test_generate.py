"""generate() plays a whole ShopSim episode against an SGLang-like /generate server, token-exactly.

The server (the scripted SGLang of ``shopsimrl.slime.harness``, on 127.0.0.1 in a thread) answers
scripted assistant replies: it tokenizes them with the test tokenizer and returns the ids with fake
logprobs as ``meta_info.output_token_logprobs`` triples, like SGLang's native API.
The tokenizer is built here (byte-level BPE + a Qwen-style chat template), saved,
and loaded by the hook from ``args.hf_checkpoint`` like a real checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from agent.fakes import TASK, WINNING_PAGES, observation
from slime_hooks.model_text import WINNING, loss_mask_spans

from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT, with_turns_left
from shopsimrl.env.pages import all_tools
from shopsimrl.sampling import REASON_TECHNICAL
from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime.harness.scripted_sglang import END, ENGINE_ERROR, ScriptedSGLang, serving
from shopsimrl.slime_runtime import UnsupportedSlimeSetting, fully_scored_group_filter, generate

# Qwen-style: <|im_start|>role\n...<|im_end|>\n, tools in the system turn, tool results as user turns.
# (transformers renders with trim_blocks: no literal newline may follow a block tag.)
# The test tokenizer's template (the ``tokenizer_dir`` fixture of conftest.py reads it).
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{{ messages[0].content }}\n\n# Tools\n<tools>"
    "{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}{{ '\\n</tools><|im_end|>\\n' }}"
    "{% else %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages[1:] %}"
    "{% if message.role == 'tool' %}"
    "{% if loop.first or loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{% if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def sglang(tokenizer):
    """Scripted replies (``reset``); every reply's ids, logprobs and the request that produced it are recorded."""
    with serving(ScriptedSGLang(tokenizer)) as server:
        yield server


def make_args(sglang, tokenizer_dir, tmp_path, **overrides):
    args = SimpleNamespace(
        sglang_router_ip="127.0.0.1", sglang_router_port=sglang.port, hf_checkpoint=str(tokenizer_dir),
        shopsim_trace_dir=str(tmp_path / "traces"), shopsim_env_url="http://unused", rollout_seed=42,
        reward_key="reward", partial_rollout=False, group_rm=False, rollout_max_context_len=None,
        apply_chat_template_kwargs={}, shopsim_max_consecutive_failed_groups=8,
    )
    vars(args).update(overrides)
    return args


def params(max_new_tokens=400, **overrides):
    base = {"temperature": 0.6, "top_p": 1.0, "top_k": -1, "max_new_tokens": max_new_tokens, "stop": None,
            "stop_token_ids": None, "skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False}
    base.update(overrides)
    return base


def new_sample(kit, index=17):
    return kit.Sample(group_index=2, index=index, prompt=TASK.task_id, metadata={"task_id": TASK.task_id, "split": "train"})


async def test_a_whole_episode_is_token_exact(kit, sglang, tokenizer, tokenizer_dir, tmp_path, env):
    sglang.reset([(text, "stop") for text in WINNING])
    sample = new_sample(kit)
    out = await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params())
    assert out is sample

    # outcome
    assert env.calls[1:5] == [("step", "search[red hiking boots]"), ("step", "click[p1]"), ("step", "click[size=9]"),
                              ("step", "click[buy now]")]
    assert sample.reward == {"r_strict": 1.0, "r_success": 1.0, "r_attr": 1.0, "reward": 1.0}
    assert sample.status is kit.Sample.Status.COMPLETED and not sample.remove_sample
    assert sample.metadata["shopsim_scored"] is True and sample.metadata["task_id"] == TASK.task_id
    assert sample.rollout_id == 17
    trace = json.loads(Path(sample.metadata["shopsim_trace_path"]).read_text())
    assert trace["scored"] is True and Path(sample.metadata["shopsim_trace_path"]).parent.name == "group_2"

    # the decoded tokens are the conversation, as the chat template renders it
    shown = [with_turns_left(page, 30 - turn).text for turn, page in enumerate([observation("search"), *WINNING_PAGES])]
    messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                {"role": "user", "content": f"Instruction: {TASK.instruction}\n\n{shown[0]}"}]
    for reply, page_text in zip(WINNING, [*shown[1:], None]):
        messages.append({"role": "assistant", "content": reply})
        if page_text is not None:
            messages.append({"role": "tool", "content": page_text})
    rendered = tokenizer.apply_chat_template(messages, tools=all_tools(), tokenize=False)
    # the prompt is rendered once: it must declare click too, not only the first page's search
    assert '"name": "click"' in rendered and '"name": "search"' in rendered
    assert tokenizer.decode(sample.tokens) + "\n" == rendered  # the model stops at <|im_end|>, before the "\n"
    prompt_len = len(sample.tokens) - sample.response_length
    prompt_text = tokenizer.apply_chat_template(messages[:2], tools=all_tools(), tokenize=False,
                                                add_generation_prompt=True)
    assert sample.tokens[:prompt_len] == tokenizer.encode(prompt_text, add_special_tokens=False)
    assert sample.response == tokenizer.decode(sample.tokens[prompt_len:])

    # loss mask = exactly the ids SGLang returned, in order; logprobs aligned; env tokens 0.0
    response = sample.tokens[prompt_len:]
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length == len(response)
    spans = loss_mask_spans(sample.loss_mask)
    assert [response[a:b] for a, b in spans] == [ids for ids, _ in sglang.replies]
    assert [sample.rollout_log_probs[a:b] for a, b in spans] == [lps for _, lps in sglang.replies]
    assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask) if not m)
    assert spans[-1][1] == sample.response_length  # the response ends with the model's last turn

    # each request fed exactly the tokens so far, with the remaining response budget
    for request, (a, _) in zip(sglang.requests, spans):
        assert request["input_ids"] == sample.tokens[: prompt_len + a]
        assert request["sampling_params"]["max_new_tokens"] == 400 - a
        assert request["return_logprob"] is True


async def test_protocol_error_is_fed_back_as_a_masked_user_turn(kit, sglang, tokenizer, tokenizer_dir, tmp_path, env):
    sglang.reset([("I will look for boots.", "stop"), *((t, "stop") for t in WINNING)])
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params(max_new_tokens=1000))
    assert sample.reward["reward"] == 1.0 and sample.metadata["shopsim_turns"] == 5
    text = tokenizer.decode(sample.tokens)
    assert "I will look for boots.<|im_end|>\n<|im_start|>user\nError: Your reply called no tool." in text
    masked = [t for t, m in zip(sample.tokens[-sample.response_length:], sample.loss_mask) if m]
    assert masked == [t for ids, _ in sglang.replies for t in ids]


async def test_length_cut_ends_the_episode_as_generation_length(kit, sglang, tokenizer_dir, tmp_path, env):
    sglang.reset([("<think>so many shoes", "length")])
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params())
    assert ("terminate", "generation_length") in env.calls
    assert sample.status is kit.Sample.Status.TRUNCATED
    assert sample.metadata["shopsim_scored"] is True and sample.reward["reward"] == 0.0
    assert sample.loss_mask == [1] * sample.response_length


async def test_spent_budget_ends_the_episode_without_another_request(kit, sglang, tokenizer, tokenizer_dir, tmp_path, env):
    first = len(tokenizer.encode(WINNING[0] + END, add_special_tokens=False))
    sglang.reset([(WINNING[0], "stop")])
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params(max_new_tokens=first + 3))
    assert len(sglang.requests) == 1  # the tool turn alone exceeds the 3 tokens left
    assert sample.metadata["shopsim_end_reason"] == "generation_length"
    assert sample.response_length == first  # the page that did not fit is not recorded
    assert sample.loss_mask == [1] * first


async def page_tokens(kit, sglang, tokenizer_dir, tmp_path) -> int:
    """Tokens recorded after the first model turn (the rest of its turn, the page with its turns-left line,
    the next header): the first masked run of an episode with room to spare."""
    sglang.reset([(text, "stop") for text in WINNING])
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path / "room-to-spare"), sample, params(max_new_tokens=4000))
    start = sample.loss_mask.index(0)
    return sample.loss_mask.index(1, start) - start


@pytest.mark.parametrize("slack", [-1, 0, 1, 2, 40])
async def test_the_response_never_exceeds_the_token_budget(kit, sglang, tokenizer, tokenizer_dir, tmp_path, env, slack):
    """Budgets around the first page's end: the page is recorded only if the model keeps a token after it."""
    first = len(tokenizer.encode(WINNING[0] + END, add_special_tokens=False))
    page = await page_tokens(kit, sglang, tokenizer_dir, tmp_path)
    budget = first + page + slack
    sglang.reset([(text, "stop") for text in WINNING])
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params(max_new_tokens=budget))
    assert sample.response_length <= budget
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
    if slack <= 0:  # no token left for the model after the page: the page is not recorded, the episode ends
        assert sample.response_length == first and len(sglang.requests) == 1
        assert sample.metadata["shopsim_end_reason"] == "generation_length"
        assert sample.status is kit.Sample.Status.TRUNCATED
    else:  # the model gets exactly the tokens left; the next page (if any) must fit in turn
        assert sglang.requests[1]["sampling_params"]["max_new_tokens"] == slack
        second = len(sglang.replies[1][0])
        assert sample.response_length == first + page + second
        if second == slack:  # cut by the budget
            assert sample.status is kit.Sample.Status.TRUNCATED and len(sglang.requests) == 2


@pytest.mark.parametrize("failure", ["env", "sglang"])
async def test_technical_failure_returns_a_zero_loss_placeholder(kit, sglang, tokenizer_dir, tmp_path, env, failure,
                                                                 monkeypatch):
    if failure == "env":
        env.fail_on = "step"
        sglang.reset([(WINNING[0], "stop")])
    else:
        sglang.reset([ENGINE_ERROR])
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params())
    assert sample.status is kit.Sample.Status.ABORTED and sample.remove_sample is True
    assert sample.metadata["shopsim_scored"] is False
    assert sample.metadata["shopsim_error"]["stage"] == ("step" if failure == "env" else "policy")
    assert sample.loss_mask == [0] * sample.response_length
    assert len(sample.rollout_log_probs) == sample.response_length
    assert env.leased == 0  # the lease was released
    siblings = [kit.scored(2, 18, 1.0), kit.scored(2, 19, 0.0)]
    slime_double.install(monkeypatch)  # slime filters the group: its filter runs inside slime
    out = fully_scored_group_filter(make_args(sglang, tokenizer_dir, tmp_path), [sample, *siblings])
    assert (out.keep, out.reason, out.keep_when_insufficient) == (False, REASON_TECHNICAL, False)


@pytest.mark.parametrize(
    ("overrides", "sampling", "word"),
    [({"partial_rollout": True}, {}, "--partial-rollout"), ({"group_rm": True}, {}, "--group-rm"),
     ({}, {"top_p": 0.9}, "--rollout-top-p"), ({}, {"top_k": 20}, "--rollout-top-k")],
)
async def test_settings_that_break_exact_tokens_are_refused(kit, sglang, tokenizer_dir, tmp_path, env, overrides, sampling, word):
    sglang.reset([])
    with pytest.raises(UnsupportedSlimeSetting, match=word):
        await generate(make_args(sglang, tokenizer_dir, tmp_path, **overrides), new_sample(kit), params(**sampling))
    assert sglang.requests == [] and env.calls == []


async def test_a_prompt_that_is_not_a_task_id_is_refused(kit, sglang, tokenizer_dir, tmp_path, env):
    sample = kit.Sample(group_index=0, index=0, prompt=[{"role": "user", "content": "t-1"}])
    with pytest.raises(ValueError, match="task id"):
        await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params())


async def test_episodes_at_once_stay_within_the_env_slots(kit, sglang, tokenizer_dir, tmp_path, env):
    """slime runs many more generate calls at once than the env has slots: the hook queues them."""
    most = 0
    reset = env.reset

    async def counting_reset(task_id):
        nonlocal most
        result = await reset(task_id)
        most = max(most, env.leased)
        await asyncio.sleep(0.05)  # hold the slot a while, as a model turn would
        return result

    env.reset = counting_reset
    sglang.reset([("thinking out loud", "length")] * 6)
    args = make_args(sglang, tokenizer_dir, tmp_path, shopsim_env_slots=2)
    samples = await asyncio.gather(*(generate(args, new_sample(kit, index=i), params()) for i in range(6)))
    assert most == 2
    assert all(s.metadata["shopsim_end_reason"] == "generation_length" for s in samples)
    assert env.leased == 0


@pytest.mark.parametrize("key", ["shopsim_max_turns", "shopsim_max_steps"])
async def test_the_turn_cap_from_the_custom_config_ends_the_episode(kit, sglang, tokenizer_dir, tmp_path, env, key):
    """shopsim_max_turns caps the turns; the old key shopsim_max_steps still does, with a FutureWarning naming the new."""
    sglang.reset([(text, "stop") for text in WINNING])
    sample = new_sample(kit)
    args = make_args(sglang, tokenizer_dir, tmp_path, **{key: 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await generate(args, sample, params(max_new_tokens=1000))
    assert sample.metadata["shopsim_turns"] == 2 and len(sglang.requests) == 2
    assert ("terminate", "action_limit") in env.calls
    assert sample.metadata["shopsim_scored"] is True and sample.reward["reward"] == 0.0
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    if key == "shopsim_max_steps":
        assert messages == ["the custom-config key shopsim_max_steps is deprecated and will be removed in the next "
                            "release: use shopsim_max_turns"]
    else:
        assert messages == []
