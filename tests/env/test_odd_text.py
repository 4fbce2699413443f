"""Any action string is an action: the env server never answers 500 for one, and its log holds no traceback.

Half a surrogate pair (``\\ud800``, a model's JSON escape for half an emoji) has no UTF-8 form: the env
reads it as U+FFFD, so the page that shows the query can be sent, and a retry of the same ``request_id``
gets that page again.  NUL and escape sequences are text like any other.  A ``timeout`` of NaN on
``/reset`` is refused as not a finite number.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.server import ServerThread

ODD = ["\ud800", "\udfff", "\udc00\ud800", "\x00", "\x1b[2J", "\x1b]0;t\x07", "]", "[", "search[", "click[", "\n", "\ufffd"]


@pytest.fixture(scope="module")
def served(small_db: Path) -> Iterator[tuple[ShopSimEnv, str]]:
    env = ShopSimEnv(small_db, slots=2, reset_timeout=2.0, action_limit=10_000)
    with ServerThread(env) as srv:
        yield env, srv.url
    env.close()


def _post(client: httpx.Client, path: str, payload: dict[str, object]) -> httpx.Response:
    # ensure_ascii: half a surrogate pair goes as its JSON escape, as a client in any language may send it
    return client.post(path, content=json.dumps(payload), headers={"content-type": "application/json"})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.one_of(st.text(st.characters(exclude_categories=()), max_size=12), st.sampled_from(ODD)),
                     max_size=6).map("".join),
       tool=st.sampled_from(["search[{}]", "click[{}]", "{}"]))
def test_no_action_string_gets_a_500_or_a_traceback(served: tuple[ShopSimEnv, str], text: str, tool: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    env, url = served
    caplog.clear()
    with caplog.at_level(logging.WARNING), httpx.Client(base_url=url, timeout=10) as client:
        start = _post(client, "/reset", {"task_id": env.list_tasks("train")[0]})
        assert start.status_code == 200, start.text
        lease = start.json()["lease_id"]
        try:
            for _ in range(2):  # the second step shows the page of the first (the query on a results page)
                reply = _post(client, "/step", {"lease_id": lease, "action": tool.format(text), "request_id": "r1"})
                assert reply.status_code == 200, reply.text
                assert json.loads(reply.content)["observation"]["text"]
            again = _post(client, "/step", {"lease_id": lease, "action": "click[back to search]"})
            assert again.status_code in (200, 409), again.text  # 409: the odd action was a purchase that ended it
        finally:
            _post(client, "/release", {"lease_id": lease})
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


async def test_half_a_surrogate_pair_is_read_as_a_replacement_character_and_retries_get_the_same_page(
        served: tuple[ShopSimEnv, str]) -> None:
    env, url = served
    async with HttpEnvClient(url, timeout=10, shards=1) as client:
        start = await client.reset(env.list_tasks("train")[0])
        try:
            first = await client.step(start.lease_id, "search[boots \ud800]")
            assert "boots \ufffd" in first.observation.text
            same = env.step(start.lease_id, "search[other]", request_id="fixed")
            assert env.step(start.lease_id, "search[\udfff]", request_id="fixed") == same  # a retry: the first reply
        finally:
            await client.release(start.lease_id)
    in_process = env.reset(env.list_tasks("train")[0])
    try:
        assert "\ufffd" in env.step(in_process.lease_id, "search[\ud800]").observation.text
    finally:
        env.release(in_process.lease_id)


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-Infinity"])
def test_a_reset_timeout_that_is_not_a_finite_number_is_refused_as_such(served: tuple[ShopSimEnv, str],
                                                                        timeout: str) -> None:
    env, url = served
    body = f'{{"task_id": "{env.list_tasks("train")[0]}", "timeout": {timeout}}}'
    reply = httpx.post(url + "/reset", content=body, headers={"content-type": "application/json"}, timeout=10)
    assert reply.status_code == 422 and "finite number" in reply.json()["error"]["message"], reply.text
