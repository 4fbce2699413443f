"""SGLang's native ``/generate`` (token ids in, ids and logprobs out) served by llama.cpp's ``/completion``.

The slime generate hook talks to SGLang's router.  The end-to-end suite has no GPU and no
SGLang, so this adapter (FastAPI on 127.0.0.1) translates each request for a real
``llama-server``: ``input_ids`` become the token prompt, ``sampling_params`` the sampler
settings (``top_k=-1`` is no top-k, ``min_p`` 0 so the whole distribution is sampled), and
the answer's ``tokens`` and ``completion_probabilities`` become
``meta_info.output_token_logprobs`` triples ``[logprob, id, None]``.  llama.cpp returns the
end-of-turn token it stopped on with its logprob, as SGLang does.  Every exchange is
recorded so the test can line the sample's tokens, loss mask and logprobs up with what
the model really produced.  SGLang's ``json_schema`` sampling parameter (a JSON string; constrained
actions) becomes llama.cpp's ``json_schema`` (the schema as an object).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


@dataclass
class Exchange:
    input_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    finish: str
    tokens_cached: int | None


@dataclass
class SGLangAdapter:
    completion_url: str  # llama-server's /completion
    exchanges: list[Exchange] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()
        client = httpx.AsyncClient(timeout=600.0)

        @app.post("/generate")
        async def generate(request: Request) -> JSONResponse:
            body = await request.json()
            params = body.get("sampling_params") or {}
            top_k = params.get("top_k", -1)
            payload: dict[str, Any] = {
                "prompt": list(body["input_ids"]),
                "n_predict": int(params["max_new_tokens"]),
                "temperature": float(params.get("temperature", 1.0)),
                "top_p": float(params.get("top_p", 1.0)),
                "top_k": 0 if top_k in (None, -1) else int(top_k),
                "min_p": float(params.get("min_p", 0.0)),
                "n_probs": 1,
                "return_tokens": True,
                "cache_prompt": True,
            }
            if params.get("sampling_seed") is not None:
                payload["seed"] = int(params["sampling_seed"])
            if params.get("stop"):
                payload["stop"] = list(params["stop"])
            if params.get("json_schema"):  # SGLang takes a JSON string; llama.cpp the schema itself
                payload["json_schema"] = json.loads(params["json_schema"])
            answer = await client.post(self.completion_url, json=payload)
            if answer.status_code != 200:
                return JSONResponse({"error": answer.text}, status_code=answer.status_code)
            data = answer.json()
            ids = [int(t) for t in data["tokens"]]
            probabilities = data["completion_probabilities"]
            if [int(p["id"]) for p in probabilities] != ids:
                return JSONResponse({"error": "llama-server's tokens and probabilities disagree"}, status_code=500)
            logprobs = [float(p["logprob"]) for p in probabilities]
            finish = "length" if data.get("stop_type") == "limit" else "stop"
            self.exchanges.append(Exchange(list(body["input_ids"]), ids, logprobs, finish, data.get("tokens_cached")))
            meta = {
                "finish_reason": {"type": finish},
                "output_token_logprobs": [[lp, tid, None] for lp, tid in zip(logprobs, ids)],
                "prompt_tokens": len(body["input_ids"]),
                "completion_tokens": len(ids),
                "cached_tokens": data.get("tokens_cached"),
            }
            return JSONResponse({"text": data.get("content", ""), "output_ids": ids, "meta_info": meta})

        return app
