"""The openai policy's request options on ``shopsimrl rollout``: parsed into policy options, bad values refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl.agent import OpenAIPolicy
from shopsimrl.cli import build_parser
from shopsimrl.cli import main as shopsimrl_main
from shopsimrl.commands.rollout_options import policy_options


def options(*argv: str) -> dict:
    return policy_options(build_parser().parse_args(["rollout", "--policy", "openai", *argv]))


def test_request_options_reach_the_policy(tmp_path: Path) -> None:
    prompt = tmp_path / "system.txt"
    prompt.write_text("Shop carefully.\n")
    given = options("--top-p", "0.9", "--send-seed", "--extra-body", '{"chat_template_kwargs": {"enable_thinking": false}}',
                    "--system-prompt", str(prompt), "--max-context-tokens", "4096", "--request-timeout", "30")
    assert given == {"top_p": 0.9, "send_seed": True, "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
                     "system_prompt": "Shop carefully.\n", "max_context_tokens": 4096, "timeout": 30.0}
    policy = OpenAIPolicy(**given)
    assert policy.options.top_p == 0.9 and policy.options.send_seed
    assert options() == {}  # nothing given: the policy's own defaults


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--policy", "openai", "--extra-body", "{not json"], "--extra-body is not valid JSON"),
        (["--policy", "openai", "--extra-body", "[1, 2]"], "--extra-body must be a JSON object"),
        (["--policy", "openai", "--system-prompt", "/nonexistent/prompt.txt"], "--system-prompt: cannot read"),
        (["--top-p", "0.9"], "--top-p: used only by --policy openai"),
        (["--send-seed"], "--send-seed: used only by --policy openai"),
    ],
)
def test_bad_request_options_exit_2_before_any_work(tmp_path, capsys, no_work, argv, says) -> None:
    assert shopsimrl_main(["rollout", "--out", str(tmp_path), "--name", "r", *argv]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_an_empty_system_prompt_file_is_refused(tmp_path, capsys, no_work) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    assert shopsimrl_main(["rollout", "--out", str(tmp_path), "--name", "r", "--policy", "openai",
                           "--system-prompt", str(empty)]) == 2
    assert "is empty" in capsys.readouterr().err
