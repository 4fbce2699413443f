"""A real model end to end: SmolLM2-135M-Instruct on llama.cpp's ``llama-server`` (``make e2e``).

1. One ``shopsimrl rollout --policy openai`` step (the real CLI, in a subprocess) with small
   knobs: it must exit 0, every episode must be scored, no group may be technical, and the
   server's tool-call parsing must have produced tool calls the protocol checker judged.
2. The slime ``generate`` hook against the same server, through the SGLang ``/generate``
   adapter: the sample's tokens must be the prompt the chat template renders (tokenized as
   the server tokenizes it) followed by exactly the ids the model produced and the env's
   turns; the loss mask must cover exactly the model's ids, with the server's logprobs.

The measurements (tokens/s, wall time per step, prefix-cache reuse, how episodes ended)
are printed and, when ``SHOPSIMRL_E2E_REPORT`` names a file, written there as JSON.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn
from e2e.finishable_tasks import finishable, first_wave, seed_of_finishable_wave
from e2e.gguf_tokenizer import save_tokenizer
from e2e.llama_server import LlamaServer, server_metrics
from e2e.measure import rollout
from e2e.sglang_adapter import SGLangAdapter
from slime_hooks.model_text import loss_mask_spans

from shopsimrl.slime.harness.double.rollout import Sample

ROLLOUT_KNOBS = ["--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--over-sampling-batch-size", "2",
                 "--global-batch-size", "4", "--max-turns", "4", "--max-tokens", "96", "--products", "2000",
                 "--episode-concurrency", "2", "--steps", "1", "--seed", "0", "--send-seed",
                 "--max-context-tokens", "8192", "--temperature", "0.6"]
# Constrained actions, the query made of the instruction's words, sized for a 2-core CI machine: the whole filter on
# one kept group. A wave of 5 groups of 4 siblings, 6 turns each (search, open a product, up to 3 options, buy now):
# zero-spread groups are dropped while more are in flight, a group with reward spread is accepted and ends the step
# (the groups still running are cancelled), and if none has spread the last is kept by fallback. Sampled from the
# model's own distribution: temperature 1, top-p 1, no top-k or min-p cut (llama.cpp's defaults are top_k 40 and
# min_p 0.05). The wave's tasks are ones a small model can finish (finishable_tasks.py: goals without option values),
# chosen from the catalog by the seed. docs/real-model.md has the figures.
CONSTRAINED_GROUPS = 5


def constrained_knobs(seed: int) -> list[str]:
    return ["--action-format", "constrained-words", "--rollout-batch-size", "1", "--n-samples-per-prompt", "4",
            "--over-sampling-batch-size", str(CONSTRAINED_GROUPS), "--global-batch-size", "4",
            "--max-consecutive-failed-groups", "1", "--max-turns", "6", "--max-tokens", "96", "--products", "2000",
            "--episode-concurrency", "2", "--steps", "1", "--seed", str(seed), "--send-seed", "--max-context-tokens", "8192",
            "--temperature", "1.0", "--top-p", "1.0", "--extra-body", '{"top_k": 0, "min_p": 0.0}']


REPORT: dict[str, Any] = {}


def _write_report() -> None:
    print("\nreal-model report:\n" + json.dumps(REPORT, indent=2))
    target = os.environ.get("SHOPSIMRL_E2E_REPORT")
    if target:
        from shopsimrl.io import atomic_write_json

        atomic_write_json(Path(target), REPORT)


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_one_rollout_step_with_the_openai_policy(llama_server: LlamaServer, tmp_path: Path) -> None:
    done, result = rollout(llama_server, tmp_path, "e2e", ROLLOUT_KNOBS)
    assert done.returncode == 0, f"rollout failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    traces = [json.loads(p.read_text()) for p in sorted((tmp_path / "e2e" / "step-1" / "traces").glob("*.json"))]
    assert traces, "no episode traces were written"
    assert all(t["scored"] for t in traces), [t["error"] for t in traces if not t["scored"]]
    assert result["technical_groups"] == 0 and result["scored"] == result["episodes"] == len(traces)

    steps = [s for t in traces for s in t["steps"]]
    calls = [c for s in steps for c in s["output"]["tool_calls"]]
    assert calls, "the server parsed no tool call out of the model's replies"
    assert all(c["name"] for c in calls)
    for step in steps:  # every turn became an action, a protocol error or a length cut: never an exception
        assert step["action"] is not None or step["protocol_error"] is not None or step["end_reason"] == "generation_length"
    assert all(len(t["steps"]) <= 4 for t in traces)  # --max-turns 4, protocol-error turns included
    REPORT["rollout_step"] = result
    _write_report()


def test_a_constrained_rollout_step_trains_a_group_with_reward_spread(llama_server: LlamaServer, tmp_path: Path) -> None:
    """With the page's actions as a JSON schema, the small model's turns reach the env (about 0 % with tool calls),
    it opens products, chooses options and buys, and a group with reward spread is accepted and trained alone.

    A purchase scores above 0 only with the right kind of product, one of the goal's attributes, one of its option
    values and the budget; SmolLM2-135M takes the first value of every option, so on a random task about 5 % of its
    episodes score. The step's wave is tasks whose goals have no option values (``finishable_tasks``, from the
    catalog alone): there about 1 in 3 episodes score, and a wave of 5 such groups holds one with spread on nearly
    every run (docs/real-model.md has the rates and the arithmetic). The report carries the env-action share, the
    purchases, the reward distribution, each group's task, rewards, spread and decision, the informative groups kept
    for the trainer and the prefix-cache shares.
    """
    from shopsimrl.env.core import load_env

    with load_env(2000) as env:
        seed = seed_of_finishable_wave(env, CONSTRAINED_GROUPS)
        wave = first_wave(env.list_tasks("train"), seed, CONSTRAINED_GROUPS)
        assert all(finishable(env, task) for task in wave), wave
    done, result = rollout(llama_server, tmp_path, "constrained", constrained_knobs(seed))
    assert done.returncode == 0, f"rollout failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    REPORT["constrained_rollout_step"] = {"seed": seed, **result}
    _write_report()
    assert result["started_tasks"] == wave, result  # the seed order started the tasks chosen for it
    assert result["technical_groups"] == 0 and result["scored"] == result["episodes"] > 0
    assert result["env_action_share"] >= 0.95, result  # turns that became env actions
    assert result["purchases"] > 0, result  # the model reaches the end of the shop's flow
    assert result["trained_groups"] == 1, result
    if not result["groups_with_spread"]:  # estimated under 1 run in 100 (docs/real-model.md, "Measured")
        pytest.fail(f"no group of the wave had reward spread (every zero-spread group dropped, the last kept by "
                    f"fallback: {result['decisions']}); the issue's target is a group with spread accepted and "
                    f"trained. Report: {json.dumps(result)}", pytrace=False)
    # the target: a group with reward spread accepted, alone in the trained batch; the zero-spread groups
    # judged before it dropped, the rest cancelled
    assert result["kept_informative_groups"] == 1 and result["trained_decisions"] == {"accepted": 4}, result
    assert set(result["decisions"]) <= {"accepted", "dropped"} and result["decisions"]["accepted"] == 1, result
    # prefix reuse of the constrained conversation: test_the_server_reuses_the_previous_prompt_on_every_turn; of all the
    # step's prompt tokens, the cache serves what the episodes' shape allows (each distinct page is read once, so about
    # 70 %, not 90 %: docs/real-model.md), and of the tokens some cache could serve, the server serves ≥ 90 %
    assert result["prompt_cache_share"] >= result["prompt_cache_share_bound"] - 0.05, result
    assert result["prompt_cache_reusable_served"] >= 0.9, result


def test_what_llama_cpp_reports_as_the_logprob_of_a_constrained_token(llama_server: LlamaServer) -> None:
    """Measure it: the same constrained completion (same seed) with llama.cpp's default logprobs and its
    post-sampling ones; the schema forces most of the reply's tokens (the JSON's keys and punctuation)."""
    from shopsimrl.agent.constrained import action_schema
    from shopsimrl.env.pages import click_tool

    schema = action_schema([click_tool(["back to search", "next >", "B01ABCDEFG", "B02HIJKLMN"])], page="results")
    prompt = "<|im_start|>user\nClick a product.<|im_end|>\n<|im_start|>assistant\n"

    def complete(post_sampling: bool) -> dict[str, Any]:
        body = {"prompt": prompt, "n_predict": 48, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                "seed": 11, "n_probs": 1, "json_schema": schema, "post_sampling_probs": post_sampling,
                "cache_prompt": False}
        answer = httpx.post(f"{llama_server.url}/completion", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        return answer.json()

    raw, post = complete(False), complete(True)
    assert raw["content"] == post["content"]  # the same seed draws the same tokens
    json.loads(raw["content"])  # the schema held
    raw_lp = [float(p["logprob"]) for p in raw["completion_probabilities"]]
    post_p = [float(p["prob"]) for p in post["completion_probabilities"]]
    assert len(raw_lp) == len(post_p) > 0
    forced = [i for i, p in enumerate(post_p) if p >= 0.999999]
    REPORT["constrained_logprobs"] = {
        "reply": raw["content"],
        "tokens": len(raw_lp),
        "default_logprob_sum": round(sum(raw_lp), 3),
        "default_logprob_min": round(min(raw_lp), 3),
        "post_sampling_prob_1_tokens": len(forced),
        "post_sampling_logprob_sum": round(sum(math.log(max(p, 1e-300)) for p in post_p), 3),
        "default_logprob_of_those_tokens": [round(raw_lp[i], 3) for i in forced[:12]],
    }
    _write_report()
    # llama.cpp's default logprob is the model's raw distribution, unmasked: a token the grammar forces
    # (post-sampling probability 1) keeps its raw logprob, below 0 for some of them.
    assert forced and any(raw_lp[i] < -1e-3 for i in forced), REPORT["constrained_logprobs"]
    assert all(lp <= 0.0 for lp in raw_lp)


# -- the slime generate hook -----------------------------------------------------------------------


class _Thread:
    """A uvicorn app on 127.0.0.1 in a background thread (stopped by the test)."""

    def __init__(self, app: Any) -> None:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Thread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "server thread did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.mark.parametrize("action_format", ["tools", "constrained"])
def test_the_slime_generate_hook_is_token_exact_on_the_real_server(llama_server: LlamaServer, small_catalog: Path,
                                                                   tmp_path: Path, action_format: str) -> None:
    from transformers import AutoTokenizer

    from shopsimrl.agent.messages import default_system_prompt, first_user_message
    from shopsimrl.env.core import ShopSimEnv
    from shopsimrl.env.pages import all_tools
    from shopsimrl.env.server import ServerThread
    from shopsimrl.slime.state import reset_hook_state
    from shopsimrl.slime_runtime import generate

    tokenizer_dir = save_tokenizer(llama_server.model, llama_server.template.read_text(), tmp_path / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    adapter = SGLangAdapter(f"{llama_server.url}/completion")
    # the episode's response budget (model and env tokens): a tool-call reply of this model often runs to the limit;
    # constrained replies are short, so three turns with their pages (results pages of several hundred tokens) fit in 3,000
    budget = 400 if action_format == "tools" else 3000
    params = {"temperature": 0.6, "top_p": 1.0, "top_k": -1, "max_new_tokens": budget, "stop": None, "stop_token_ids": None,
              "skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False}
    with ShopSimEnv(small_catalog, slots=4) as shop, ServerThread(shop) as env_server, _Thread(adapter.app()) as router:
        task_ids = shop.list_tasks("train")[:2]
        args = SimpleNamespace(
            sglang_router_ip="127.0.0.1", sglang_router_port=router.port, hf_checkpoint=str(tokenizer_dir),
            shopsim_trace_dir=str(tmp_path / "traces"), shopsim_env_url=env_server.url, rollout_seed=7,
            reward_key="reward", partial_rollout=False, group_rm=False, rollout_max_context_len=8192,
            apply_chat_template_kwargs={}, shopsim_max_consecutive_failed_groups=8, shopsim_max_turns=3,
            shopsim_action_format=action_format,
        )
        reset_hook_state()
        samples = [Sample(group_index=0, index=i, prompt=task_id, metadata={"task_id": task_id})
                   for i, task_id in enumerate(task_ids)]
        started = time.monotonic()

        async def run_all() -> None:
            for sample in samples:  # one after the other: each exchange belongs to one sample, in order
                await generate(args, sample, dict(params))

        asyncio.run(run_all())
        wall = time.monotonic() - started
        reset_hook_state()

    exchanges = list(adapter.exchanges)
    for sample in samples:
        assert sample.metadata["shopsim_scored"] is True, sample.metadata["shopsim_error"]
        assert sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED) and not sample.remove_sample
        prompt_len = len(sample.tokens) - sample.response_length
        response = sample.tokens[prompt_len:]
        assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length == len(response)

        # the prompt is the chat template rendered once, tokenized exactly as the server tokenizes it
        trace = json.loads(Path(sample.metadata["shopsim_trace_path"]).read_text())
        task = SimpleNamespace(instruction=trace["task"]["instruction"])
        first_page = SimpleNamespace(text=trace["steps"][0]["observation"])
        prompt_text = tokenizer.apply_chat_template(
            [{"role": "system", "content": default_system_prompt(action_format)},
             {"role": "user", "content": first_user_message(task, first_page)}],  # type: ignore[arg-type]
            tools=all_tools() if action_format == "tools" else None, tokenize=False, add_generation_prompt=True)
        server_ids = httpx.post(f"{llama_server.url}/tokenize", json={"content": prompt_text, "parse_special": True},
                                timeout=30).json()["tokens"]
        assert sample.tokens[:prompt_len] == server_ids == tokenizer.encode(prompt_text, add_special_tokens=False)

        # the loss mask covers exactly the ids the model produced, with the server's logprobs
        spans = loss_mask_spans(sample.loss_mask)
        mine, exchanges = exchanges[:len(spans)], exchanges[len(spans):]
        assert [response[a:b] for a, b in spans] == [e.output_ids for e in mine]
        assert [sample.rollout_log_probs[a:b] for a, b in spans] == [e.logprobs for e in mine]
        assert all(math.isfinite(lp) and lp <= 0.0 for e in mine for lp in e.logprobs)
        assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask) if not m)
        # each request sent exactly the token stream so far
        for exchange, (a, _) in zip(mine, spans):
            assert exchange.input_ids == sample.tokens[: prompt_len + a]
        # the env's turns (mask 0) hold the pages the trace recorded
        decoded = tokenizer.decode(sample.tokens)
        shown = trace["steps"][1:]
        if sample.metadata["shopsim_end_reason"] == "generation_length":
            shown = shown[:-1]  # a last page that did not fit the response budget is not recorded (by design)
        for step in shown:
            assert step["observation"].split("\n(turns left")[0].strip()[-60:] in decoded
    assert exchanges == []  # every exchange belongs to a sample

    turns = [e for e in adapter.exchanges]
    later = [(e, prev) for prev, e in zip(turns, turns[1:]) if e.input_ids[: len(prev.input_ids)] == prev.input_ids]
    REPORT[f"slime_generate_hook_{action_format}"] = {
        "samples": len(samples),
        "requests": len(turns),
        "wall_seconds": round(wall, 1),
        "model_tokens": sum(len(e.output_ids) for e in turns),
        "prefix_reuse_of_previous_prompt": round(
            sum(min(e.tokens_cached or 0, len(prev.input_ids)) for e, prev in later)
            / max(1, sum(len(prev.input_ids) for _, prev in later)), 3) if later else None,
        "end_reasons": dict(collections.Counter(s.metadata["shopsim_end_reason"] for s in samples)),
        "turns_that_became_env_actions": [
            f"{sum(1 for st in steps if st['action'] is not None)}/{len(steps)}"
            for steps in (json.loads(Path(s.metadata["shopsim_trace_path"]).read_text())["steps"] for s in samples)],
    }
    _write_report()


@pytest.mark.parametrize("action_format", ["tools", "constrained-words"])
def test_the_server_reuses_the_previous_prompt_on_every_turn(llama_server: LlamaServer, small_catalog: Path,
                                                             action_format: str) -> None:
    """The fixed tool list and the append-only conversation let llama-server's prefix cache reuse each prompt.

    Episodes run one at a time, so the server's counters before and after each request
    give that request's prompt tokens and how many of them came from the cache (also for
    a turn the server refused because it could not parse the model's tool call).
    """
    from shopsimrl.agent import OpenAIPolicy, run_episode
    from shopsimrl.env import InProcessEnvClient
    from shopsimrl.env.core import ShopSimEnv

    class Recording(OpenAIPolicy):
        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self.prompts: list[tuple[int, int, int]] = []  # (episode number, prompt tokens, cached tokens)
            self.episode = 0

        async def complete(self, request: dict[str, Any]) -> Any:
            before = await asyncio.to_thread(server_metrics, llama_server.url)
            try:
                return await super().complete(request)
            finally:
                after = await asyncio.to_thread(server_metrics, llama_server.url)
                processed = _delta(after, before, "prompt_tokens_total")
                cached = _delta(after, before, "prompt_tokens_cached_total")
                self.prompts.append((self.episode, int(processed + cached), int(cached)))

    policy = Recording(base_url=f"{llama_server.url}/v1", model="smollm2", send_seed=True, timeout=300.0,
                       max_tokens=64 if action_format == "tools" else 96, action_format=action_format)

    def later_turns() -> list[float]:
        pairs = zip(policy.prompts, policy.prompts[1:])
        return [min(cached, previous) / previous for (ea, previous, _), (eb, current, cached) in pairs
                if ea == eb and previous and current]  # a request refused before any prompt work is no turn

    async def play() -> None:
        with ShopSimEnv(small_catalog, slots=1) as shop:
            env = InProcessEnvClient(shop)
            try:
                for number, task_id in enumerate(shop.list_tasks("train")[:8]):
                    policy.episode = number
                    await run_episode(env, policy, task_id, rollout_id=str(number), seed=number, max_turns=4)
                    if len(later_turns()) >= 3:
                        break
            finally:
                await policy.aclose()
                await env.aclose()

    asyncio.run(play())
    shares = later_turns()
    if not shares:
        pytest.fail(f"no episode lasted two turns: the prefix reuse could not be measured ({policy.prompts})",
                    pytrace=False)
    REPORT[f"openai_prefix_reuse_{action_format}"] = {"episodes": policy.episode + 1, "later_turns": len(shares),
                                     "min": round(min(shares), 3), "median": round(sorted(shares)[len(shares) // 2], 3)}
    _write_report()
    assert min(shares) >= 0.9, (shares, policy.prompts)
