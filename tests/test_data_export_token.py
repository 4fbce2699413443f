"""``data export --env URL`` on a server that wants a token: it sends the token, and a refusal is one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shopsimrl.cli import main
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.server import ServerThread

TOKEN = "export-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def guarded(small_catalog: Path) -> Iterator[str]:
    env = ShopSimEnv(small_catalog, slots=2, reset_timeout=0.5)
    with ServerThread(env, token=TOKEN) as srv:
        yield srv.url
    env.close()


@pytest.fixture(autouse=True)
def no_ambient_token(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SHOPSIM_ENV_TOKEN", "SHOPSIM_ENV_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_the_token_file_is_sent(guarded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "env.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    out = tmp_path / "prompts.jsonl"
    assert main(["data", "export", "--env", guarded, "--env-token-file", str(token), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 160 and all(row["metadata"]["split"] == "train" for row in rows)  # 2,000 products
    assert f"to {out}" in capsys.readouterr().out


def test_the_token_from_the_environment_is_sent(guarded: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOPSIM_ENV_TOKEN", TOKEN)
    assert main(["data", "export", "--env", guarded, "--out", str(tmp_path / "p.jsonl")]) == 0


def test_no_token_is_one_line_and_exit_2(guarded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "export", "--env", guarded, "--out", str(tmp_path / "p.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"shopsimrl data export: refused: the env server at {guarded} answers: [unauthorized]")
    assert not (tmp_path / "p.jsonl").exists()
