"""A token-exact policy for slime: the agent's episode loop, driven through SGLang's native ``/generate``.

The episode loop, the tool-call protocol and the trace are the agent package's
(:func:`shopsimrl.agent.run_episode`, :func:`shopsimrl.agent.parse_turn`); this
module only supplies a :class:`~shopsimrl.agent.Policy` whose turns are token ids.
Training must see exactly the tokens the model was conditioned on and produced, so:

- the prompt is the chat template applied once (``add_generation_prompt``);
- each model turn appends the ids SGLang returned (``meta_info.output_token_logprobs``),
  never a re-tokenization of the text, with loss mask 1 and SGLang's logprobs;
- each tool turn appends the tokenized *delta* of the chat template (the rest of the
  assistant turn the model did not emit, the tool turn, the next assistant header),
  with loss mask 0 and logprob 0.0;
- the next request sends exactly the ids accumulated so far (``input_ids``).

So ``prompt_ids + response_ids`` is one token stream whose decoding is the
conversation, and ``loss_mask`` covers exactly the model's tokens.

With constrained actions (``action_format="constrained"``, custom-config key
``shopsim_action_format``) the prompt declares no tools, every ``/generate`` carries the current
page's action schema as SGLang's ``json_schema`` sampling parameter, the reply's JSON is the
action (agent/constrained.py) and the next page is a user turn. The logprobs SGLang returns are
then those of the grammar-masked distribution (docs/real-model.md, "Constrained actions and the
importance ratio").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from shopsimrl.agent.constrained import (
    DEFAULT_ACTION_FORMAT,
    ActionFormatChoice,
    check_action_format,
    schema_for,
    turn_from_reply,
)
from shopsimrl.agent.messages import first_user_message, observation_message
from shopsimrl.agent.policy import PolicyTurn, ToolCall, TurnFeedback
from shopsimrl.env.answers import json_or_none, read_capped_bytes
from shopsimrl.env.pages import all_tools
from shopsimrl.env.types import Observation, Task
from shopsimrl.errors import InfraFailure
from shopsimrl.slime.abort import AbortFlag, never_aborted

# Qwen3 / Hermes style: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_SENTINEL = "\u2063SHOPSIM_ASSISTANT_TURN\u2063"  # never produced by a model; only ever rendered, not tokenized


#: A /generate answer longer than this is read no further (an SGLangError): its logprobs are about 40 bytes a
#: token, so 32 MiB is some 800,000 tokens, far beyond any max_new_tokens.
MAX_GENERATE_BYTES = 32 << 20


class SGLangError(InfraFailure, RuntimeError):
    """SGLang answered, but not with a usable generation (no logprobs, more tokens than asked...)."""


class SGLangAborted(SGLangError):
    """The generation was aborted: SGLang answered ``finish_reason: abort``, or slime had started its abort."""


def parse_hermes_tool_calls(text: str) -> tuple[tuple[ToolCall, ...], str | None]:
    """The ``<tool_call>`` blocks of a reply, and the text outside them (a leading think block excluded).

    A block that is not valid JSON still becomes a call (with the name, if one can be
    read, and the raw block as arguments) so the protocol checker reports it to the model.
    """
    calls = []
    for index, match in enumerate(_TOOL_CALL.finditer(text)):
        raw = match.group(1)
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError:
            payload = None
        if isinstance(payload, dict):
            name = payload.get("name")
            arguments = payload.get("arguments", {})
            calls.append(
                ToolCall(
                    name=name if isinstance(name, str) else "",
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
                    id=f"call_{index}",
                )
            )
        else:
            found = _TOOL_NAME.search(raw)
            calls.append(ToolCall(name=found.group(1) if found else "", arguments=raw, id=f"call_{index}"))
    rest = _THINK.sub("", _TOOL_CALL.sub("", text)).strip()
    return tuple(calls), rest or None


class ChatTemplate:
    """The model's chat template, used for the prompt and for tool-turn deltas only."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        base = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
        self._base = [*base, {"role": "assistant", "content": _SENTINEL}]
        closing = self.render(self._base, add_generation_prompt=False)
        # what the template writes after an assistant turn's content (e.g. "<|im_end|>\n")
        self._closing = closing[closing.index(_SENTINEL) + len(_SENTINEL) :]

    def render(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False, **self.template_kwargs
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return self.render(messages, tools=tools, add_generation_prompt=True)

    def continuation(self, model_text: str, messages: list[dict[str, Any]]) -> str:
        """The text after a model turn that adds ``messages`` and opens the next assistant turn.

        The part of the assistant's closing the model already emitted (typically its
        end-of-turn token) is not repeated.
        """
        full = self.render([*self._base, *messages], add_generation_prompt=True)
        rest = full[full.index(_SENTINEL) + len(_SENTINEL) :]
        overlap = next(k for k in range(min(len(self._closing), len(model_text)), -1, -1) if model_text.endswith(rest[:k]))
        return rest[overlap:]


@dataclass
class TokenLedger:
    """The token stream of one episode: prompt, then response tokens with their mask and logprobs."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def add_model(self, ids: list[int], log_probs: list[float]) -> None:
        if len(ids) != len(log_probs):
            raise SGLangError(f"SGLang returned {len(ids)} token ids but {len(log_probs)} logprobs")
        self.response_ids += ids
        self.loss_mask += [1] * len(ids)
        self.log_probs += log_probs

    def add_env(self, ids: list[int]) -> None:
        self.response_ids += ids
        self.loss_mask += [0] * len(ids)
        self.log_probs += [0.0] * len(ids)


@dataclass(frozen=True)
class SGLangSettings(ActionFormatChoice):
    generate_url: str  # the router's native /generate
    sampling_params: dict[str, Any]  # slime's, per episode; max_new_tokens is the episode's response budget
    max_context_tokens: int | None = None
    system_prompt: str | None = None  # None: the built-in prompt of the action format
    action_format: str = DEFAULT_ACTION_FORMAT  # "tools" or "constrained" (a JSON schema per page)

    def __post_init__(self) -> None:
        check_action_format(self.action_format)

    @property
    def response_budget(self) -> int:
        """Response tokens of the whole episode, model and env alike (slime's ``rollout_max_response_len``)."""
        return int(self.sampling_params["max_new_tokens"])


class SGLangTokenPolicy:
    """A :class:`~shopsimrl.agent.Policy` for one slime sample: one episode.

    The HTTP client is the caller's (one per process and event loop, see
    :meth:`shopsimrl.slime.state.SlimeHookState.sglang_client`): building one per
    episode costs tens of milliseconds of blocking work (TLS context, pools).
    ``aborted`` is checked before every ``/generate``: once it returns True no new
    request is sent and the turn raises :class:`SGLangAborted`.
    """

    name = "slime-sglang"

    def __init__(
        self,
        settings: SGLangSettings,
        template: ChatTemplate,
        http: httpx.AsyncClient,
        aborted: AbortFlag = never_aborted,
    ) -> None:
        self.settings = settings
        self.template = template
        self.episode: SGLangTokenEpisode | None = None
        self.aborted = aborted
        self._http = http

    def describe(self) -> dict[str, Any]:
        params = self.settings.sampling_params
        return {"generate_url": self.settings.generate_url, "sampling_params": dict(params),
                "action_format": self.settings.action_format}

    def new_episode(self, task: Task, seed: int) -> SGLangTokenEpisode:
        self.episode = SGLangTokenEpisode(self, task)
        return self.episode

    async def aclose(self) -> None:
        """Nothing to close: the HTTP client belongs to the hook state."""

    async def generate(self, input_ids: list[int], max_new_tokens: int,
                       schema: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.aborted():
            raise SGLangAborted("slime started its abort: no new /generate request is sent")
        params = {**self.settings.sampling_params, "max_new_tokens": max_new_tokens}
        if schema is not None:  # SGLang takes the schema as a JSON string
            params["json_schema"] = json.dumps(schema)
        payload = {"input_ids": input_ids, "sampling_params": params, "return_logprob": True}
        # read up to a cap, as every answer from outside (env/answers.py): an endless answer cannot grow the hook
        request = self._http.build_request("POST", self.settings.generate_url, json=payload)
        response, data = await read_capped_bytes(self._http, request, MAX_GENERATE_BYTES, "an SGLang server",
                                                 SGLangError)
        response.raise_for_status()
        answer = json_or_none(data)
        if not isinstance(answer, dict):
            raise SGLangError(f"SGLang's /generate answer is not a JSON object ({len(data):,} bytes)")
        return answer


class SGLangTokenEpisode:
    """Conversation and token ledger of one episode (the agent loop calls :meth:`act` per turn)."""

    def __init__(self, policy: SGLangTokenPolicy, task: Task) -> None:
        self._policy = policy
        self._task = task
        self.ledger: TokenLedger | None = None
        self.messages: list[dict[str, Any]] = []  # the conversation, for traces and tests
        self._last_model_text = ""
        self._answer_as_tool = False
        self.dropped_env_tokens = 0  # tokens of a last page left out because it did not fit the budget

    async def act(self, observation: Observation, feedback: TurnFeedback | None) -> PolicyTurn:
        template = self._policy.template
        if self.ledger is None:
            self._start(observation)
        elif not self._append_observation(observation, feedback):
            # the page does not fit in the response budget: recording it would overshoot, so the
            # episode ends here as generation_length (the response stays within the budget)
            return self._budget_spent()
        ledger = self.ledger
        assert ledger is not None
        budget = self._room(0)
        if budget <= 0:  # the episode's token budget is spent: the loop ends it as generation_length
            return self._budget_spent()
        constrained = self._policy.settings.constrained
        schema = schema_for(self._policy.settings.action_format, observation, self._task.instruction)
        output = await self._policy.generate(ledger.all_ids, budget, schema)
        meta = output.get("meta_info") or {}
        finish = (meta.get("finish_reason") or {}).get("type")
        if finish == "abort":
            raise SGLangAborted(f"SGLang aborted the generation: {meta.get('finish_reason')}")
        triples = meta.get("output_token_logprobs")
        if triples is None:
            raise SGLangError("SGLang returned no meta_info.output_token_logprobs (was return_logprob dropped?)")
        if len(triples) > budget:
            raise SGLangError(f"SGLang returned {len(triples)} tokens for max_new_tokens={budget}")
        ids = [int(t[1]) for t in triples]
        prompt_tokens = len(ledger.all_ids)
        ledger.add_model(ids, [float(t[0]) for t in triples])
        self._last_model_text = template.decode(ids)
        self.messages.append({"role": "assistant", "content": self._last_model_text})
        if constrained:  # the reply's JSON is the action; the next page is a user turn
            self._answer_as_tool = False
            return turn_from_reply(template.decode(ids, skip_special_tokens=True), "length" if finish == "length" else "stop",
                                   prompt_tokens=prompt_tokens, completion_tokens=len(ids))
        calls, text = parse_hermes_tool_calls(template.decode(ids, skip_special_tokens=True))
        self._answer_as_tool = bool(calls)
        return PolicyTurn(
            text=text,
            tool_calls=calls,
            finish_reason="length" if finish == "length" else ("tool_calls" if calls else "stop"),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(ids),
        )

    def _room(self, extra: int) -> int:
        """Tokens the model may still generate once ``extra`` more env tokens are recorded."""
        ledger = self.ledger
        assert ledger is not None
        settings = self._policy.settings
        room = settings.response_budget - len(ledger.response_ids) - extra
        if settings.max_context_tokens is not None:
            room = min(room, settings.max_context_tokens - len(ledger.all_ids) - extra)
        return room

    def _budget_spent(self) -> PolicyTurn:
        ledger = self.ledger
        assert ledger is not None
        return PolicyTurn(text=None, finish_reason="length", prompt_tokens=len(ledger.all_ids), completion_tokens=0)

    def _start(self, observation: Observation) -> None:
        template = self._policy.template
        self.messages = [
            {"role": "system", "content": self._policy.settings.prompt},
            {"role": "user", "content": first_user_message(self._task, observation)},
        ]
        # The prompt is rendered once, so it declares every tool an episode may need (the
        # per-page enum of click values is in each observation's text); constrained: no tools.
        tools = [] if self._policy.settings.constrained else all_tools()
        self.ledger = TokenLedger(template.encode(template.prompt(self.messages, tools)))

    def _append_observation(self, observation: Observation, feedback: TurnFeedback | None) -> bool:
        """Record the env's turn (loss mask 0) if the model still has a token left after it; else record nothing."""
        template = self._policy.template
        assert self.ledger is not None
        content = observation_message(observation, feedback)
        message = {"role": "tool" if self._answer_as_tool else "user", "content": content}
        ids = template.encode(template.continuation(self._last_model_text, [message]))
        if self._room(len(ids)) <= 0:
            self.dropped_env_tokens = len(ids)
            return False
        self.messages.append(message)
        self.ledger.add_env(ids)
        return True
