"""Consecutive turns' prompts share their prefix, so a server's prefix cache reuses the previous prompt.

The ``openai`` policy plays a real in-process ShopSim episode against the scripted chat
server; each request is rendered the way Qwen-style chat templates render tools (in the
system turn, before the conversation).  With the episode's one fixed tool list every
prompt starts with the whole previous prompt (reuse 100 %, the goal is >= 90 %).  Offering
each page's own tools instead (what the policy did before) rewrites the system turn and
reuses only the few characters before the tool list.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jinja2
from agent.openai_fake import ScriptedServer, reply

from shopsimrl.agent import OpenAIPolicy, run_episode
from shopsimrl.env import InProcessEnvClient
from shopsimrl.env.core import ShopSimEnv

# Tools in the system turn, tool results as user turns, calls as <tool_call> JSON: Qwen2.5's layout.
QWEN_STYLE = jinja2.Environment().from_string(
    "<|im_start|>system\n{{ messages[0].content }}\n\n# Tools\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% for m in messages[1:] %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}<|im_start|>assistant\n"
)


def render(request: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> str:
    return QWEN_STYLE.render(messages=request["messages"], tools=tools if tools is not None else request["tools"])


def reuse(previous: str, current: str) -> float:
    """The share of the previous prompt that is a prefix of the current one."""
    return len(os.path.commonprefix([previous, current])) / len(previous)


async def test_each_prompt_starts_with_the_whole_previous_prompt(server: ScriptedServer, small_catalog: Path) -> None:
    with ShopSimEnv(small_catalog, slots=1) as shop:
        env = InProcessEnvClient(shop)
        task_id = shop.list_tasks("train")[0]
        search = reply(("search", '{"query": "boots"}'))
        server.load(search, reply(("click", '{"value": "next >"}')), reply(text="thinking"),
                    reply(("click", '{"value": "< prev"}')), reply(("click", '{"value": "back to search"}')), search)
        policy = OpenAIPolicy(base_url=server.base_url, model="m", timeout=10.0)
        pages = []
        real_step = env.step

        async def step(lease_id: str, action: str):  # keep each page's own tools for the comparison
            result = await real_step(lease_id, action)
            pages.append(result.observation.tools)
            return result

        env.step = step  # type: ignore[method-assign]
        try:
            result = await run_episode(env, policy, task_id, rollout_id="r", seed=1, max_turns=6)
        finally:
            await policy.aclose()
            await env.aclose()
    assert result.scored and result.turns == 6 and result.protocol_errors == 1
    prompts = [render(r) for r in server.requests]
    fixed = [reuse(a, b) for a, b in zip(prompts, prompts[1:])]
    assert fixed == [1.0] * 5  # every turn, the protocol-error turn included

    # the same conversation with each page's own tools (the search page's first): far less to reuse
    # (turn 4 saw the page of turn 3 again: turn 3 was the protocol error)
    offered = [search_only(server.requests[0]["tools"]), pages[0], pages[1], pages[1], pages[2], pages[3]]
    per_page = [render(r, tools) for r, tools in zip(server.requests, offered)]
    changing = [reuse(a, b) for a, b in zip(per_page, per_page[1:])]
    assert changing[2] == 1.0  # the same page twice: the same tools
    assert max(changing[i] for i in (0, 1, 3, 4)) < 0.5  # a new page's tools rewrite the system turn


def search_only(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in tools if t["function"]["name"] == "search"]
