"""Token-exact multi-turn recording with the real Qwen3 and Qwen2.5 chat templates (tests/data/chat_templates).

The templates are the models' own (see the README there); the tokenizer is a byte-level
BPE trained here with Qwen's special tokens, so everything renders offline.  A whole
ShopSim episode runs through the generate hook against a scripted SGLang; the recorded
stream must be exactly what the model was conditioned on at every turn.

Qwen3 renders an assistant turn's ``<think>`` block only for turns after the last user
query, and an empty one only for the last turn: a re-render of the history drops the
empty ``<think>\\n\\n</think>\\n\\n`` that the generation prompt put before every turn
(``enable_thinking=False``).  The recorded stream keeps them, since the model saw them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent.fakes import TASK, WINNING_PAGES, FakeEnv, observation
from slime_hooks.model_text import WINNING, loss_mask_spans

from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT, first_user_message, with_turns_left
from shopsimrl.defaults import DEFAULT_MAX_TURNS
from shopsimrl.env.pages import all_tools
from shopsimrl.env.types import Observation
from shopsimrl.slime.harness.double.rollout import Sample, slime_args
from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving
from shopsimrl.slime.harness.workspace import write_tokenizer
from shopsimrl.slime.state import hook_state
from shopsimrl.slime_runtime import generate

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
QWEN25 = "Qwen-Qwen2.5-7B-Instruct.jinja"
EMPTY_THINK = "<think>\n\n</think>\n\n"
END = "<|im_end|>"


REASONING = ["The user wants boots.", "p1 is red.", "Size 9 it is.", "Buy."]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[Path, Any]]:
    """Per template: a saved tokenizer directory (what ``args.hf_checkpoint`` names) and the tokenizer."""
    from transformers import AutoTokenizer

    corpus = [DEFAULT_SYSTEM_PROMPT, TASK.instruction, *WINNING, *REASONING,
              *(observation(p).text for p in ("search", "results", "item"))]
    out = {}
    for name in (QWEN3, QWEN25):
        path = write_tokenizer(tmp_path_factory.mktemp("tok"), corpus, (TEMPLATES / name).read_text())
        out[name] = (path, AutoTokenizer.from_pretrained(path))
    return out


def scripted(tokenizer, replies: list[str]) -> ScriptedSGLang:
    def reply(body: dict[str, Any]) -> tuple[str, str]:
        turn = tokenizer.decode(body["input_ids"]).count("<|im_start|>assistant") - 1
        return replies[turn], "stop"

    return ScriptedSGLang(tokenizer, reply)


async def run_episode(tokenizer, tokenizer_dir, tmp_path, replies: list[str], **template_kwargs: Any):
    shop = FakeEnv()
    hook_state().env_client_factory = lambda args: shop
    server = scripted(tokenizer, replies)
    requests: list[list[int]] = []

    async def record(request) -> None:
        if request.url.path == "/generate":
            requests.append(json.loads(request.content)["input_ids"])

    hook_state().sglang_client().event_hooks["request"].append(record)
    with serving(server):
        args = slime_args(sglang_router_ip="127.0.0.1", sglang_router_port=server.port, hf_checkpoint=str(tokenizer_dir),
                          shopsim_trace_dir=str(tmp_path / "traces"), apply_chat_template_kwargs=template_kwargs)
        sample = Sample(group_index=0, index=0, prompt=TASK.task_id)
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 4000}
        await generate(args, sample, params)
    assert sample.metadata["shopsim_scored"] and sample.reward["reward"] == 1.0, sample.metadata
    return sample, requests


def shown(page: Observation, turns_spent: int) -> str:
    """A page as the episode offers it: with the turns left of the hook's default cap."""
    return with_turns_left(page, DEFAULT_MAX_TURNS - turns_spent).text


def history(replies: list[str]) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                {"role": "user", "content": first_user_message(TASK, with_turns_left(observation("search"),
                                                                                   DEFAULT_MAX_TURNS))}]
    for spent, (reply, page) in enumerate(zip(replies, [*WINNING_PAGES, None]), start=1):
        messages.append({"role": "assistant", "content": reply})
        if page is not None:
            messages.append({"role": "tool", "content": shown(page, spent)})
    return messages


def expected_stream(tokenizer, replies: list[str], header: str) -> str:
    """The conversation as the model saw it, written out in the template's own format (not re-rendered)."""
    messages = history(replies)
    text = tokenizer.apply_chat_template(messages[:2], tools=all_tools(), tokenize=False, add_generation_prompt=True,
                                         enable_thinking=header != EMPTY_THINK)
    for spent, (reply, page) in enumerate(zip(replies, [*WINNING_PAGES, None]), start=1):
        text += reply + END
        if page is not None:
            text += f"\n<|im_start|>user\n<tool_response>\n{shown(page, spent)}\n</tool_response>{END}\n"
            text += "<|im_start|>assistant\n" + header
    return text


def assert_token_exact(sample: Sample, tokenizer, requests: list[list[int]], expected: str) -> list[str]:
    """The stream decodes to ``expected``, each request was its prefix; returns the model turns' text."""
    assert tokenizer.decode(sample.tokens) == expected
    prompt_len = len(sample.tokens) - sample.response_length
    # every request fed exactly the recorded stream so far: the stream is what the model was conditioned on
    for ids in requests:
        assert sample.tokens[: len(ids)] == ids
    spans = loss_mask_spans(sample.loss_mask)
    assert [prompt_len + a for a, _ in spans] == [len(ids) for ids in requests]  # each model turn starts at its request
    model_text = [tokenizer.decode(sample.tokens[prompt_len + a: prompt_len + b]) for a, b in spans]
    return model_text


@pytest.mark.parametrize("template_name", [QWEN3, QWEN25])
async def test_multi_turn_recording_is_token_exact(template_name, checkpoints, tmp_path):
    tokenizer_dir, tokenizer = checkpoints[template_name]
    kwargs = {"enable_thinking": False} if template_name == QWEN3 else {}
    sample, requests = await run_episode(tokenizer, tokenizer_dir, tmp_path, WINNING, **kwargs)
    header = EMPTY_THINK if template_name == QWEN3 else ""
    model_text = assert_token_exact(sample, tokenizer, requests, expected_stream(tokenizer, WINNING, header))
    assert model_text == [reply + END for reply in WINNING]
    if template_name == QWEN25:  # no think handling: the re-render of the history is the stream itself
        rendered = tokenizer.apply_chat_template(history(WINNING), tools=all_tools(), tokenize=False)
        assert tokenizer.decode(sample.tokens) + "\n" == rendered


async def test_qwen3_empty_think_blocks_are_kept_in_the_stream_and_dropped_by_a_re_render(checkpoints, tmp_path):
    tokenizer_dir, tokenizer = checkpoints[QWEN3]
    sample, _ = await run_episode(tokenizer, tokenizer_dir, tmp_path, WINNING, enable_thinking=False)
    stream = tokenizer.decode(sample.tokens)
    rendered = tokenizer.apply_chat_template(history(WINNING), tools=all_tools(), tokenize=False, enable_thinking=False)
    assert stream.count("<|im_start|>assistant\n" + EMPTY_THINK) == 4  # before every model turn
    assert rendered.count("<|im_start|>assistant\n" + EMPTY_THINK) == 1  # only the last turn keeps one
    assert stream.replace(EMPTY_THINK, "") + "\n" == rendered.replace(EMPTY_THINK, "")  # the only difference


async def test_qwen3_thinking_turns_are_recorded_as_generated(checkpoints, tmp_path):
    tokenizer_dir, tokenizer = checkpoints[QWEN3]
    replies = [f"<think>\n{thought}\n</think>\n\n{move}" for thought, move in zip(REASONING, WINNING)]
    sample, requests = await run_episode(tokenizer, tokenizer_dir, tmp_path, replies)
    model_text = assert_token_exact(sample, tokenizer, requests, expected_stream(tokenizer, replies, ""))
    assert model_text == [reply + END for reply in replies]  # the thinking is trained, as generated
