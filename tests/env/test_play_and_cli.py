"""A person can play: `shopsimrl env play` driven through piped stdin; build/serve CLI; cheap import."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from shopsimrl.cli import build_parser
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.play import play, to_action

from .conftest import SMALL_PRODUCTS, SMALL_SEED


def _script_for(env: ShopSimEnv, task_id: str) -> str:
    goal = env.get_task(task_id).goal
    product = env.goal_product(task_id)
    # help, a blank line and a bad click are handled without ending the game
    lines = ["help", "", "click nothing-here", f"search[{product.title}]"]
    lines.append(f"click[{product.product_id}]")
    lines += [f"click {axis}={goal['options'].get(axis, values[0])}" for axis, values in product.options]
    lines.append("click buy now")
    return "\n".join(lines) + "\n"


def test_play_cli_through_piped_stdin(small_db: Path, cache_dir: Path) -> None:
    with ShopSimEnv(small_db) as env:
        task_id = env.list_tasks("train")[3]
        script = _script_for(env, task_id)
    cmd = [sys.executable, "-m", "shopsimrl.cli", "env", "play", "--products", str(SMALL_PRODUCTS),
           "--seed", str(SMALL_SEED), "--cache-dir", str(cache_dir), "--task", task_id]
    done = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"Task {task_id}" in out and "Instruction:" in out and "[Search page]" in out
    assert "Invalid action (" in out  # 'search' after 'search' or a bad click is explained, not fatal
    assert "[Done] You bought" in out and "Reward detail" in out and "r_success" in out


def test_play_quits_and_survives_end_of_input(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=1) as env:
        task_id = env.list_tasks("val")[0]
        out = io.StringIO()
        assert play(env, task_id, stdin=io.StringIO("search boots\nquit\n"), console=Console(file=out)) == 0
        assert "[Results page]" in out.getvalue() and "bye." in out.getvalue()
        assert env.counters()["free_slots"] == 1  # the lease was released
        out = io.StringIO()
        assert play(env, task_id, stdin=io.StringIO(""), console=Console(file=out)) == 0
        assert play(env, "missing-task", stdin=io.StringIO(""), console=Console(file=out)) == 1


def test_to_action_forms() -> None:
    assert to_action("search waterproof boots") == "search[waterproof boots]"
    assert to_action("click[buy now]") == "click[buy now]"
    assert to_action("click < prev") == "click[< prev]"
    assert to_action("   ") is None


def test_env_commands_are_registered() -> None:
    parser = build_parser()
    serve = parser.parse_args(["env", "serve"])
    assert (serve.host, serve.port, serve.slots) == ("127.0.0.1", 5700, 48) and callable(serve.handler)
    build = parser.parse_args(["env", "build", "--products", "1000", "--seed", "3"])
    assert (build.products, build.seed) == (1000, 3) and callable(build.handler)
    play_args = parser.parse_args(["env", "play", "--split", "val"])
    assert play_args.split == "val" and play_args.task is None


def test_build_cli_reports_the_catalog(cache_dir: Path, small_db: Path) -> None:
    cmd = [sys.executable, "-m", "shopsimrl.cli", "env", "build", "--products", str(SMALL_PRODUCTS),
           "--seed", str(SMALL_SEED), "--cache-dir", str(cache_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "found cached" in done.stdout and str(small_db.name) in done.stdout


def test_importing_the_package_is_cheap() -> None:
    code = ("import sys, shopsimrl.env as e; e.ShopSimEnv; e.InProcessEnvClient; "
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'httpx', 'starlette') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
