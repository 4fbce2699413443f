"""Several env servers in the launch path: run_full_train.sh (ENV_PROCESSES, ENV_SERVERS_PER_NODE),
the custom config slime copies onto ``args``, and the client the generate hook builds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from local_processes import alive, free_ports

from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.pool import EnvPool
from shopsimrl.slime.launch import LaunchError, TrainConfig

pytestmark = pytest.mark.slow  # real server processes: with -n this file starts first

ROOT = Path(__file__).resolve().parents[2]
FULL = ROOT / "scripts" / "run_full_train.sh"
TOKEN = "launch-test-token-0123456789"


def script_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WANDB", "ROLLOUT_", "GLOBAL_", "OVER_", "SHOPSIM_", "ENV_"))}
    env.update(SHOPSIMRL_PYTHON=sys.executable, RUN_DIR=str(tmp_path / "run"), SLIME_DIR=str(tmp_path / "no-slime"),
               MODEL_ARGS_SCRIPT=str(tmp_path / "model.sh"), **extra)
    (tmp_path / "model.sh").write_text("MODEL_ARGS=(--num-layers 2)\n")
    return env


def test_custom_config_takes_a_url_list_and_sums_the_slots(tmp_path: Path) -> None:
    config = TrainConfig.from_env({"RUN_DIR": str(tmp_path), "ENV_SLOTS": "40", "SHOPSIM_ENV_TOKEN_FILE": "env.token",
                                   "SHOPSIM_ENV_URL": "http://a:5700, http://a:5701/,http://b:5700"})
    custom = config.custom_config()
    assert custom["shopsim_env_url"] == "http://a:5700,http://a:5701,http://b:5700"
    assert custom["shopsim_env_slots"] == 120  # the hook's gate covers every server's slots
    assert custom["shopsim_env_token_file"] == str(Path("env.token").resolve())
    with pytest.raises(LaunchError, match="SHOPSIM_ENV_URL=.*twice"):
        TrainConfig.from_env({"SHOPSIM_ENV_URL": "http://a:1,http://a:1"}).check()


async def test_the_generate_hook_builds_a_pool_for_a_list_with_the_token(tmp_path: Path) -> None:
    from shopsimrl.slime.generate import _http_env_client

    token_file = tmp_path / "env.token"
    token_file.write_text(TOKEN)
    pool = _http_env_client(SimpleNamespace(shopsim_env_url="http://127.0.0.1:9,http://127.0.0.1:10",
                                            shopsim_env_token_file=str(token_file)))
    single = _http_env_client(SimpleNamespace(shopsim_env_url="http://127.0.0.1:9"))
    try:
        assert isinstance(pool, EnvPool) and pool.token == TOKEN and pool.urls == ["http://127.0.0.1:9",
                                                                                   "http://127.0.0.1:10"]
        assert isinstance(single, HttpEnvClient)
    finally:
        await pool.aclose()
        await single.aclose()


def test_dry_runs_print_the_several_servers_commands(tmp_path: Path) -> None:
    local = subprocess.run(["bash", str(FULL)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           env=script_env(tmp_path, DRY_RUN="1", ENV_PROCESSES="3"))
    assert local.returncode == 0, local.stderr
    assert "env serve --host 127.0.0.1 --port 5700 --slots 48 --processes 3 &" in local.stdout
    config = json.loads(re.search(r"shopsim_slime_config.yaml: (\{.*\})", local.stderr).group(1))  # type: ignore[union-attr]
    assert config["shopsim_env_url"] == "http://127.0.0.1:5700,http://127.0.0.1:5701,http://127.0.0.1:5702"
    assert config["shopsim_env_slots"] == 144
    ray = subprocess.run(["bash", str(FULL)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env=script_env(tmp_path, DRY_RUN="1", ENV_SERVERS_PER_NODE="2",
                                        SHOPSIM_ENV_TOKEN_FILE="/shared/env.token"))
    assert ray.returncode == 0, ray.stderr
    assert (f"env ray-serve --per-node 2 --port 5700 --slots 48 --urls-file {tmp_path / 'run' / 'env_urls.txt'} "
            f"--token-file /shared/env.token &") in ray.stdout


def test_full_run_with_env_processes_starts_and_stops_real_servers(tmp_path: Path, catalog_cache: Path,
                                                                   default_catalog: Path) -> None:
    port = free_ports(2)
    result = subprocess.run(["bash", str(FULL)], capture_output=True, text=True, cwd=tmp_path, timeout=180,
                            env=script_env(tmp_path, ENV_PROCESSES="2", ENV_PORT=str(port),
                                           SHOPSIMRL_CACHE=str(catalog_cache)))
    assert result.returncode == 2, result.stderr  # training refused: slime is not installed
    urls = f"http://127.0.0.1:{port},http://127.0.0.1:{port + 1}"
    assert f"env server ready at {urls}" in result.stderr and "no train.py" in result.stderr
    assert "stopping the env server" in result.stderr
    supervisor = int(re.search(r"env server pid (\d+)", result.stderr).group(1))  # type: ignore[union-attr]
    log = (tmp_path / "run" / "env_server.log").read_text()
    children = [int(p) for p in re.search(r"pids ([\d, ]+)\)", log).group(1).split(", ")]  # type: ignore[union-attr]
    deadline = time.monotonic() + 20
    while any(alive(p) for p in (supervisor, *children)):
        assert time.monotonic() < deadline, "a server outlived the script"
        time.sleep(0.05)


FAKE_RAY_SERVE = """
import http.server, sys, threading, time
args = sys.argv
urls_file = args[args.index("--urls-file") + 1]
server = http.server.HTTPServer(("127.0.0.1", 0), type("H", (http.server.BaseHTTPRequestHandler,), {
    "do_GET": lambda self: (self.send_response(200 if self.path == "/healthz" else 404), self.end_headers()),
    "log_message": lambda self, *a: None}))
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(1.0)  # the script must wait for the list, not race it
open(urls_file + ".tmp", "w").write(f"http://127.0.0.1:{server.server_port}\\n")
__import__("os").replace(urls_file + ".tmp", urls_file)
open(sys.argv[0] + ".pid", "w").write(str(__import__("os").getpid()))
while True:
    time.sleep(1)
"""


def test_full_run_with_servers_per_node_waits_for_the_url_list_and_stops_ray_serve(tmp_path: Path) -> None:
    """``env ray-serve`` is a stand-in here (no Ray cluster in tests): the script's side of the contract."""
    fake = tmp_path / "fake_ray_serve.py"
    fake.write_text(FAKE_RAY_SERVE)
    wrapper = tmp_path / "fake-python"
    wrapper.write_text("#!/usr/bin/env bash\n"
                       f'if [[ "$*" == *"env ray-serve"* ]]; then exec "{sys.executable}" "{fake}" "$@"; fi\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    result = subprocess.run(["bash", str(FULL)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            env={**script_env(tmp_path, ENV_SERVERS_PER_NODE="1"), "SHOPSIMRL_PYTHON": str(wrapper)})
    assert result.returncode == 2, result.stderr
    url = (tmp_path / "run" / "env_urls.txt").read_text().strip()
    assert url.startswith("http://127.0.0.1:")
    assert f"env server ready at {url}" in result.stderr and "stopping the env server" in result.stderr
    assert not alive(int(Path(str(fake) + ".pid").read_text()))
