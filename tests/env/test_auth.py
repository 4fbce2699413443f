"""The shared bearer token: loading it, the bind rule, the constant-time check, a real server's 401s."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shopsimrl.env import auth
from shopsimrl.env.auth import (
    BearerTokenMiddleware,
    TokenError,
    bind_refusal,
    is_loopback,
    load_token,
    read_token_file,
    token_matches,
)
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.server import ServerThread
from shopsimrl.env.types import EnvError

TOKEN = "s3cret-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def guarded(small_db: Path) -> Iterator[tuple[ShopSimEnv, str]]:
    env = ShopSimEnv(small_db, slots=2, reset_timeout=0.5)
    with ServerThread(env, token=TOKEN) as srv:
        yield env, srv.url
    env.close()


def test_token_matches_only_the_exact_bearer_token() -> None:
    assert token_matches(TOKEN, f"Bearer {TOKEN}".encode())
    assert token_matches(TOKEN, f"bearer {TOKEN}".encode())  # the scheme is case-insensitive (RFC 7235)
    assert not token_matches(TOKEN, None)
    assert not token_matches(TOKEN, b"")
    assert not token_matches(TOKEN, f"Basic {TOKEN}".encode())
    assert not token_matches(TOKEN, f"Bearer {TOKEN[:-1]}".encode())
    assert not token_matches(TOKEN, f"Bearer {TOKEN}x".encode())
    assert not token_matches(TOKEN, b"Bearer ")


def test_the_comparison_is_hmac_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constant time: the token is compared by hmac.compare_digest, never by ==."""
    calls: list[tuple[bytes, bytes]] = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert not token_matches(TOKEN, b"Bearer wrong-token-of-some-length")
    assert token_matches(TOKEN, f"Bearer {TOKEN}".encode())
    assert calls == [(b"wrong-token-of-some-length", TOKEN.encode()), (TOKEN.encode(), TOKEN.encode())]


def test_token_files_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text(f"  {TOKEN}\n")
    assert read_token_file(good) == TOKEN
    for content, fragment in (("", "is empty"), ("short", "at least 16"), ("two words here, long enough", "whitespace")):
        bad = tmp_path / "bad"
        bad.write_text(content)
        with pytest.raises(TokenError, match=fragment):
            read_token_file(bad)
    with pytest.raises(TokenError, match="cannot read"):
        read_token_file(tmp_path / "missing")


def test_load_token_precedence(tmp_path: Path) -> None:
    file = tmp_path / "t"
    file.write_text("from-the-file-0123456789")
    assert load_token(None, {}) is None
    assert load_token(None, {auth.TOKEN_ENV: "from-the-variable-0123"}) == "from-the-variable-0123"
    assert load_token(None, {auth.TOKEN_FILE_ENV: str(file)}) == "from-the-file-0123456789"
    assert load_token(file, {auth.TOKEN_ENV: "from-the-variable-0123"}) == "from-the-file-0123456789"
    with pytest.raises(TokenError, match="SHOPSIM_ENV_TOKEN"):
        load_token(None, {auth.TOKEN_ENV: "short"})


def test_loopback_binds_need_no_token_others_do() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert is_loopback(host), host
        assert bind_refusal(host, None, insecure=False) is None
    for host in ("0.0.0.0", "10.1.2.3", "::"):
        assert not is_loopback(host), host
        refusal = bind_refusal(host, None, insecure=False)
        assert refusal is not None and "--token-file" in refusal and "--insecure" in refusal
        assert bind_refusal(host, TOKEN, insecure=False) is None
        assert bind_refusal(host, None, insecure=True) is None


def test_the_middleware_refuses_a_short_token() -> None:
    with pytest.raises(TokenError):
        BearerTokenMiddleware(lambda *a: None, "short")  # type: ignore[arg-type,return-value]


def test_requests_without_the_token_get_401_json(guarded: tuple[ShopSimEnv, str]) -> None:
    env, url = guarded
    task_id = env.list_tasks("train")[0]
    calls = [("POST", "/reset", {"task_id": task_id}), ("POST", "/step", {"lease_id": "x", "action": "search[a]"}),
             ("POST", "/release", {"lease_id": "x"}), ("GET", "/tasks", None), ("GET", "/counters", None),
             ("GET", f"/tasks/{task_id}", None), ("GET", "/docs", None)]
    with httpx.Client(base_url=url, timeout=5) as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": f"Basic {TOKEN}"}):
            for method, path, body in calls:
                response = http.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (method, path, headers)
                assert response.headers["www-authenticate"] == "Bearer"
                assert response.json()["error"]["code"] == "unauthorized"
        assert env.counters()["resets"] == 0  # nothing reached the env
        ok = http.get("/tasks", params={"split": "val"}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["task_ids"] == env.list_tasks("val")


def test_healthz_stays_open_without_session_details(guarded: tuple[ShopSimEnv, str]) -> None:
    env, url = guarded
    start = env.reset(env.list_tasks("train")[0])
    try:
        response = httpx.get(f"{url}/healthz", timeout=5)
        assert response.status_code == 200
        body = response.json()
        assert body["leased"] == 1 and body["fingerprint"]["products"] == env.store.product_count
        assert start.lease_id not in response.text  # counts only: no lease ids, no tasks of sessions
        assert start.task.task_id not in response.text
    finally:
        env.release(start.lease_id)


async def test_the_http_client_sends_the_token(guarded: tuple[ShopSimEnv, str]) -> None:
    env, url = guarded
    task_id = env.list_tasks("train")[0]
    async with HttpEnvClient(url, timeout=5, token=TOKEN) as client:
        start = await client.reset(task_id)
        result = await client.step(start.lease_id, f"search[{start.task.instruction}]")
        assert result.observation.state["page"] == "results"
        await client.release(start.lease_id)
    async with HttpEnvClient(url, timeout=5) as anonymous:
        with pytest.raises(EnvError) as info:
            await anonymous.reset(task_id)
        assert info.value.code == "unauthorized"


def _serve(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHOPSIM_ENV_TOKEN")}
    return subprocess.run([sys.executable, "-m", "shopsimrl.cli", "env", "serve", *args], capture_output=True,
                          text=True, timeout=60, env={**base, **env})


def test_serve_refuses_a_non_loopback_bind_without_a_token(tmp_path: Path) -> None:
    done = _serve("--host", "0.0.0.0", "--port", "1")
    assert done.returncode == 2
    assert "refused" in done.stderr and "--token-file" in done.stderr and "--insecure" in done.stderr
    short = tmp_path / "short"
    short.write_text("abc")
    done = _serve("--host", "0.0.0.0", "--token-file", str(short))
    assert done.returncode == 2 and "at least 16" in done.stderr
    done = _serve("--host", "0.0.0.0", **{auth.TOKEN_ENV: "abc"})
    assert done.returncode == 2 and "SHOPSIM_ENV_TOKEN" in done.stderr


def test_a_loopback_server_without_a_token_needs_no_header(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=1, reset_timeout=0.5) as env, ServerThread(env) as srv:
        with httpx.Client(base_url=srv.url, timeout=5) as http:
            started = http.post("/reset", json={"task_id": env.list_tasks("train")[0]})
            assert started.status_code == 200
            assert http.post("/release", json={"lease_id": started.json()["lease_id"]}).status_code == 200
            assert http.get("/counters").status_code == 200


NON_ASCII = "jeton-secret-très-long-ünïcode"


def test_a_token_that_cannot_travel_in_a_header_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    file = tmp_path / "token"
    for token in (NON_ASCII, "control\x7fcharacter-0123456789"):
        file.write_text(token, encoding="utf-8")
        with pytest.raises(TokenError, match="cannot travel in an HTTP header"):
            read_token_file(file)
        with pytest.raises(TokenError, match="cannot travel in an HTTP header"):
            load_token(None, {auth.TOKEN_ENV: token})


def test_tokens_are_compared_as_the_header_s_bytes() -> None:
    assert token_matches(TOKEN, f"Bearer {TOKEN}".encode())
    assert not token_matches(TOKEN, b"Bearer " + TOKEN.encode() + b"\xff")
    assert not token_matches(TOKEN, b"Bearer " + NON_ASCII.encode("utf-8"))  # never decoded, never a crash


def test_rollout_with_a_non_ascii_token_file_is_refused_in_one_line(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text(NON_ASCII, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "rollout", "--env", "http://127.0.0.1:9",
                           "--env-token-file", str(file), "--out", str(tmp_path / "runs"), "--view", "plain"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "cannot travel in an HTTP header" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_serve_refuses_a_non_ascii_token() -> None:
    done = _serve("--host", "0.0.0.0", "--port", "1", **{auth.TOKEN_ENV: NON_ASCII})
    assert done.returncode == 2 and "cannot travel in an HTTP header" in done.stderr


def test_a_wrong_token_is_refused_before_the_body_is_read(guarded: tuple[ShopSimEnv, str]) -> None:
    """401 as soon as the head is in: a 1 MiB body announced but never sent is not waited for."""
    _env, url = guarded
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000\r\n\r\n")
        conn.settimeout(3)  # the body timeout is 10 s: a 401 after the body would not come in time
        reply = conn.recv(4096)
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
        assert b"connection: close" in reply.lower()
