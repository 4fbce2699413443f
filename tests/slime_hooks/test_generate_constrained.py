"""generate() with constrained actions (``shopsim_action_format: constrained``), against a scripted SGLang.

Each ``/generate`` must carry the current page's action schema as SGLang's ``json_schema`` sampling
parameter (a JSON string); the prompt declares no tools and uses the constrained system prompt; the
reply's JSON is the action; the token ledger stays exact (loss mask 1 on exactly the returned ids).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agent.fakes import TASK, observation
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from slime_hooks.model_text import loss_mask_spans

from shopsimrl.agent.constrained import page_action_schema
from shopsimrl.agent.messages import CONSTRAINED_SYSTEM_PROMPT
from shopsimrl.slime.harness.scripted_sglang import END, serving
from shopsimrl.slime.harness.workspace import PLAIN_CHAT_TEMPLATE, write_tokenizer
from shopsimrl.slime_runtime import UnsupportedSlimeSetting, generate

ACTIONS = [{"name": "search", "arguments": {"query": "red hiking boots"}}, {"name": "click", "arguments": {"value": "p1"}},
           {"name": "click", "arguments": {"value": "size=9"}}, {"name": "click", "arguments": {"value": "buy now"}}]
REPLIES = [json.dumps(a) for a in ACTIONS]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    corpus = [CONSTRAINED_SYSTEM_PROMPT, TASK.instruction, *REPLIES, *(observation(p).text for p in ("search", "results", "item"))]
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"), corpus, PLAIN_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


class SchemaSGLang:
    """Answers each request with the next scripted text (plus the end-of-turn token); records requests and ids."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.script: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.replies: list[list[int]] = []
        self.port = 0
        self.app = FastAPI()
        self.app.post("/generate")(self.generate)

    async def generate(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        text = self.script.pop(0)
        if text.startswith("HTTP400"):  # a server that refuses the schema
            return JSONResponse({"error": {"message": text[8:]}}, status_code=400)
        ids = self.tokenizer.encode(text + END, add_special_tokens=False)
        self.replies.append(ids)
        meta = {"output_token_logprobs": [[-0.5, tid, None] for tid in ids], "finish_reason": {"type": "stop"},
                "completion_tokens": len(ids)}
        return JSONResponse({"text": text, "meta_info": meta})


@pytest.fixture(scope="module")
def sglang(tokenizer):
    with serving(SchemaSGLang(tokenizer)) as fake:  # type: ignore[arg-type]  # serves its .app, sets its .port
        yield fake


def make_args(sglang, tokenizer_dir, tmp_path, **overrides) -> SimpleNamespace:
    args = SimpleNamespace(
        sglang_router_ip="127.0.0.1", sglang_router_port=sglang.port, hf_checkpoint=str(tokenizer_dir),
        shopsim_trace_dir=str(tmp_path / "traces"), shopsim_env_url="http://unused", rollout_seed=42,
        reward_key="reward", partial_rollout=False, group_rm=False, rollout_max_context_len=None,
        apply_chat_template_kwargs={}, shopsim_max_consecutive_failed_groups=8, shopsim_action_format="constrained")
    vars(args).update(overrides)
    return args


def params() -> dict[str, Any]:
    return {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 2000, "stop": None}


def new_sample(kit):
    return kit.Sample(group_index=0, index=3, prompt=TASK.task_id, metadata={"task_id": TASK.task_id, "split": "train"})


async def test_each_generate_carries_the_page_schema_and_the_reply_json_is_the_action(kit, sglang, tokenizer,
                                                                                       tokenizer_dir, tmp_path, env):
    sglang.script, sglang.requests, sglang.replies = list(REPLIES), [], []
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params())
    assert [c for c in env.calls if c[0] == "step"] == [("step", "search[red hiking boots]"), ("step", "click[p1]"),
                                                        ("step", "click[size=9]"), ("step", "click[buy now]")]
    assert sample.reward["reward"] == 1.0 and sample.metadata["shopsim_scored"] is True
    pages = [observation("search"), observation("results"), observation("item", size_chosen=False), observation("item")]
    sent = [json.loads(r["sampling_params"]["json_schema"]) for r in sglang.requests]
    assert sent == [page_action_schema(page) for page in pages]  # the page's own actions, turn by turn
    assert "buy now" not in json.dumps(sent[2]) and "buy now" in json.dumps(sent[3])
    # the prompt: constrained system prompt, no tools; the model's ids are exactly the loss-mask-1 spans
    prompt_len = len(sample.tokens) - sample.response_length
    assert tokenizer.decode(sample.tokens[:prompt_len]).startswith(f"<|im_start|>system\n{CONSTRAINED_SYSTEM_PROMPT}<|im_end|>")
    response = sample.tokens[prompt_len:]
    assert [response[a:b] for a, b in loss_mask_spans(sample.loss_mask)] == sglang.replies
    assert "<|im_start|>user\n" in tokenizer.decode(response)  # the next page is a user turn, not a tool result


async def test_the_default_sends_no_schema(kit, sglang, tokenizer_dir, tmp_path, env):
    sglang.script, sglang.requests, sglang.replies = ["I will shop."], [], []
    args = make_args(sglang, tokenizer_dir, tmp_path, shopsim_action_format=None, shopsim_max_turns=1)
    await generate(args, new_sample(kit), params())
    assert "json_schema" not in sglang.requests[0]["sampling_params"]


async def test_an_unknown_action_format_is_refused_in_one_line(kit, sglang, tokenizer_dir, tmp_path, env):
    with pytest.raises(UnsupportedSlimeSetting, match="shopsim_action_format: unknown action format 'regex'"):
        await generate(make_args(sglang, tokenizer_dir, tmp_path, shopsim_action_format="regex"), new_sample(kit), params())


async def test_a_server_that_refuses_the_schema_leaves_the_episode_unscored(kit, sglang, tokenizer_dir, tmp_path, env):
    sglang.script, sglang.requests, sglang.replies = ["HTTP400 json_schema: unsupported keyword"], [], []
    sample = new_sample(kit)
    await generate(make_args(sglang, tokenizer_dir, tmp_path), sample, params())
    assert sample.metadata["shopsim_scored"] is False and sample.remove_sample  # technical: the group is dropped
    assert "400" in json.dumps(sample.metadata["shopsim_error"])
