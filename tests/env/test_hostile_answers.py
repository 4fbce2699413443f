"""Env-server answers are bounded and typed: a tiny hostile server on 127.0.0.1 (started by each test, stopped by
its context) answers with endless bodies, lists, wrong types and garbage; every client call turns that into one
:class:`BadResponseError` line, the commands exit 2, and an episode that meets it mid-way is unscored (technical)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from shopsimrl.agent.episode import run_episode
from shopsimrl.agent.heuristic import HeuristicPolicy
from shopsimrl.cli import main
from shopsimrl.env import wire
from shopsimrl.env.answers import BadResponseError
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.pool import EnvPool
from shopsimrl.env.types import EnvUnavailableError

pytestmark = pytest.mark.slow  # real hostile servers: with -n this file starts first

ENDLESS = object()  # an answer that never ends
DRIP = object()  # an answer that sends a byte now and then, forever
GOOD_HEALTH = {"ready": True, "slots": 4, "free_slots": 4, "leased": 0,
               "fingerprint": {"catalog_seed": 7, "products": 2000}}


class _Hostile(BaseHTTPRequestHandler):
    answers: dict[str, Any] = {}

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        answer = self.answers.get(path, self.answers.get("*", {"error": {"code": "not_found", "message": path}}))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if answer is ENDLESS or answer is DRIP:
            self.end_headers()  # no length: the body ends when the connection does (never)
            try:
                self.wfile.write(b'{"task_ids": [')
                while True:
                    self.wfile.write(b'"x",' * (8192 if answer is ENDLESS else 1))
                    if answer is DRIP:
                        time.sleep(0.2)
            except OSError:  # the client stopped reading and closed
                return
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@contextmanager
def hostile_server(answers: dict[str, Any]) -> Iterator[str]:
    handler = type("Handler", (_Hostile,), {"answers": answers})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


BAD_HEALTH = {
    "a-list": [1, 2, 3],
    "slots-a-string": GOOD_HEALTH | {"slots": "many"},
    "slots-negative": GOOD_HEALTH | {"slots": -4},
    "slots-a-boolean": GOOD_HEALTH | {"slots": True},
    "slots-a-fraction": GOOD_HEALTH | {"slots": 2.5},
    "slots-missing": {k: v for k, v in GOOD_HEALTH.items() if k != "slots"},
    "free-slots-null-is-fine-but-leased-a-list": GOOD_HEALTH | {"leased": [0]},
    "ready-a-string": GOOD_HEALTH | {"ready": "yes"},
    "fingerprint-a-list": GOOD_HEALTH | {"fingerprint": [7, 2000]},
    "huge-number": b'{"slots": 1e999}',
    "not-json": b"<html>hello</html>",
    "null": None,
}


@pytest.mark.parametrize("answer", BAD_HEALTH.values(), ids=BAD_HEALTH.keys())
async def test_a_malformed_healthz_is_one_bad_response_error(answer: Any) -> None:
    with hostile_server({"/healthz": answer}) as url:
        async with HttpEnvClient(url, shards=1, connect_retries=0) as client:
            with pytest.raises(BadResponseError) as refused:
                await client.healthz()
    assert "\n" not in str(refused.value) and refused.value.code == "bad_response"
    assert isinstance(refused.value, EnvUnavailableError)  # a technical failure of the env


async def test_an_endless_answer_stops_at_the_cap_with_one_error() -> None:
    with hostile_server({"*": ENDLESS}) as url:
        async with HttpEnvClient(url, shards=1, connect_retries=0, max_response_bytes=1 << 20) as client:
            started = time.monotonic()
            with pytest.raises(BadResponseError, match=r"goes on past 1,048,576 bytes.*stopped reading"):
                await client.list_tasks("train")
    assert time.monotonic() - started < 10


async def test_an_answer_that_drips_forever_ends_at_the_request_deadline() -> None:
    with hostile_server({"*": DRIP}) as url:
        async with HttpEnvClient(url, shards=1, connect_retries=0, timeout=0.5) as client:
            started = time.monotonic()
            with pytest.raises(EnvUnavailableError, match="no whole answer within 2s"):
                await client.list_tasks("train")
    assert time.monotonic() - started < 10


async def test_an_announced_length_over_the_cap_is_not_read() -> None:
    big = json.dumps({"task_ids": ["t"] * 100_000}).encode()
    with hostile_server({"/tasks": big}) as url:
        async with HttpEnvClient(url, shards=1, connect_retries=0, max_response_bytes=4096) as client:
            with pytest.raises(BadResponseError, match="announces .* bytes, more than the 4,096"):
                await client.list_tasks("train")


@pytest.mark.parametrize("answer", [[1, 2], {"task_ids": "train-00000"}, {"task_ids": [1, 2]}, {"ids": []}],
                         ids=["a-list", "ids-a-string", "ids-numbers", "no-ids"])
async def test_a_malformed_task_list_is_one_bad_response_error(answer: Any) -> None:
    with hostile_server({"/tasks": answer}) as url:
        async with HttpEnvClient(url, shards=1, connect_retries=0) as client:
            with pytest.raises(BadResponseError, match="GET /tasks"):
                await client.list_tasks("train")


async def test_a_pool_refuses_a_server_whose_healthz_is_malformed_and_names_it() -> None:
    with hostile_server({"/healthz": GOOD_HEALTH}) as good, hostile_server({"/healthz": [1, 2]}) as bad:
        pool = EnvPool([good, bad])
        try:
            with pytest.raises(EnvUnavailableError, match=f"{bad} .*GET /healthz: the answer is a list"):
                await pool.start()
        finally:
            await pool.aclose()


def _shopsimrl(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The command in this process (the hostile server runs on a thread of it): exit code and stderr."""
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("answer", [[1, 2], GOOD_HEALTH | {"slots": "many"}, ENDLESS],
                         ids=["healthz-a-list", "slots-a-string", "endless"])
def test_rollout_refuses_a_malformed_healthz_in_one_line(tmp_path: Path, capsys, answer: Any) -> None:
    with hostile_server({"/healthz": answer}) as url:
        code, err = _shopsimrl("rollout", "--env", url, "--steps", "1", "--out", str(tmp_path / "runs"), "--view",
                               "plain", capsys=capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("shopsimrl rollout: refused: ") and "GET /healthz" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("answer", [[1, 2], {"task_ids": [1, 2]}, ENDLESS],
                         ids=["tasks-a-list", "ids-numbers", "endless"])
def test_data_export_refuses_a_malformed_answer_in_one_line(tmp_path: Path, capsys, answer: Any) -> None:
    with hostile_server({"/healthz": [1, 2], "/tasks": answer}) as url:
        code, err = _shopsimrl("data", "export", "--env", url, "--out", str(tmp_path / "p.jsonl"), capsys=capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "[bad_response]" in err and not (tmp_path / "p.jsonl").exists()


async def test_a_malformed_step_answer_mid_episode_is_a_technical_failure(env: ShopSimEnv) -> None:
    task_id = env.store.task_ids("train")[0]
    real = wire.reset_to_json(env.reset(task_id))
    env.release(real["lease_id"])
    broken_step = {"observation": real["observation"], "reward": "1.0", "terminated": "yes", "truncated": False,
                   "info": {}}
    with hostile_server({"/reset": real, "/step": broken_step, "/terminate": broken_step, "/release": {}}) as url:
        async with HttpEnvClient(url, shards=1, connect_retries=0) as client:
            result = await run_episode(client, HeuristicPolicy(), task_id, rollout_id="r", seed=0)
    assert not result.scored and result.reward is None
    assert result.error is not None and result.error["stage"] == "step"
    assert result.error["type"] == "BadResponseError" and "POST /step" in result.error["message"]
