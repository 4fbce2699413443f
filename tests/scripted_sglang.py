"""A scripted SGLang server on 127.0.0.1 (FastAPI + uvicorn in a thread) and an offline Qwen-style tokenizer.

The server speaks the parts of SGLang's HTTP API that slime and the generate hook use:

- ``POST /generate`` (``input_ids``, ``sampling_params``, ``return_logprob``) answers with
  ``meta_info.output_token_logprobs`` triples and ``meta_info.finish_reason.type``; each
  request "decodes" for ``delay`` seconds (None: until aborted) and then answers
  ``reply(body)``, or ``finish_reason: abort`` if an abort reached it first;
- ``POST /abort_request {"abort_all": true}`` aborts every request running at that moment
  (later requests run normally, as in SGLang);
- ``GET /v1/loads`` reports the running requests as ``num_reqs``; ``GET /workers`` (the
  router's) lists this server as the only worker.

Counters are read from the test's thread: ``generate_calls`` (requests received) and
``running`` (requests not yet answered).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

END = "<|im_end|>"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

def tool_call(name: str, **arguments: Any) -> str:
    """A tool call as a Qwen-style model writes it in its reply."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


#: The model's four replies that buy the fake shop's goal product (tests/agent/fakes.py), as text.
WINNING = [tool_call("search", query="red hiking boots"), tool_call("click", value="p1"),
           tool_call("click", value="size=9"), tool_call("click", value="buy now")]

#: A minimal chat template (role headers, no tool rendering) for tests that only need a tokenizer.
PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


#: (text, finish type); "stop" appends the end-of-turn token, as a model stopping there would emit it.
Reply = tuple[str, str]


def build_tokenizer(path: Path, corpus: Sequence[str], chat_template: str, vocab_size: int = 800) -> Path:
    """A byte-level BPE tokenizer with Qwen's special tokens and ``chat_template``, saved like a checkpoint."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(
        list(corpus),
        trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=END, pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL[1:])
    tokenizer.add_tokens(ADDED)
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(path)
    return path


class ScriptedSGLang:
    def __init__(self, tokenizer: Any, reply: Callable[[dict[str, Any]], Reply], delay: float | None = 0.0) -> None:
        self.tokenizer = tokenizer
        self.reply = reply
        self.delay = delay
        self.generate_calls = 0
        self.abort_calls = 0
        self.aborted_requests = 0
        self._running: set[asyncio.Future[None]] = set()
        self.port = 0
        self.app = FastAPI()
        self.app.post("/generate")(self.generate)
        self.app.post("/abort_request")(self.abort_request)
        self.app.get("/v1/loads")(self.loads)
        self.app.get("/workers")(self.workers)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def generate(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ClientDisconnect:  # the client gave up on the request while sending it (an abort)
            return Response(status_code=499)
        self.generate_calls += 1
        aborted = asyncio.get_running_loop().create_future()
        self._running.add(aborted)
        try:
            await asyncio.wait_for(asyncio.shield(aborted), timeout=self.delay)
        except asyncio.TimeoutError:
            pass
        finally:
            self._running.discard(aborted)
        if aborted.done():
            self.aborted_requests += 1
            meta = {"output_token_logprobs": [], "finish_reason": {"type": "abort", "message": "Abort request"}}
            return JSONResponse({"text": "", "meta_info": meta})
        text, finish = self.reply(body)
        if finish == "stop":
            text += END
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: body["sampling_params"]["max_new_tokens"]]
        meta = {"output_token_logprobs": [[-0.001 * (i + 1), t, None] for i, t in enumerate(ids)],
                "finish_reason": {"type": finish}, "completion_tokens": len(ids)}
        return JSONResponse({"text": self.tokenizer.decode(ids), "meta_info": meta})

    async def abort_request(self, request: Request) -> JSONResponse:
        body = await request.json()
        assert body.get("abort_all") is True, body
        self.abort_calls += 1
        for future in list(self._running):
            self._running.discard(future)  # aborted: no longer running, as SGLang's load reports at once
            if not future.done():
                future.set_result(None)
        return JSONResponse({})

    async def loads(self) -> JSONResponse:
        return JSONResponse({"num_reqs": self.running})

    async def workers(self) -> JSONResponse:
        return JSONResponse({"workers": [{"url": self.url}]})


def loss_mask_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous runs of loss-mask-1 positions in a response: one per model turn."""
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


@contextmanager
def serving(app: FastAPI) -> Iterator[int]:
    """Run ``app`` on a free 127.0.0.1 port in a thread; stop it (bounded) on exit, also on failure."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the scripted SGLang server did not start")
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
