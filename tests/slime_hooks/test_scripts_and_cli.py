"""The training scripts, the `shopsimrl train` / `data export` commands, and the hooks they name."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from agent.fakes import TASK, FakeEnv
from local_processes import alive, free_port

from shopsimrl.cli import main as cli_main
from shopsimrl.io import read_jsonl
from shopsimrl.slime.data import export_prompts
from shopsimrl.slime.launch import HOOKS, LaunchError, TrainConfig, _parse

pytestmark = pytest.mark.slow  # the launch scripts in real shells: with -n this file starts first

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
STANDALONE = SCRIPTS / "run_shopsimrl_slime.sh"
FULL = SCRIPTS / "run_full_train.sh"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
HEAVY = ("torch", "ray", "sglang", "slime", "transformers")

# How slime calls each hook (slime/rollout/sglang_rollout.py, slime/ray/rollout.py).
SLIME_SIGNATURES = {
    "--dynamic-sampling-filter-path": ["args", "group", "kwargs"],
    "--custom-reward-post-process-path": ["args", "samples"],
    "--custom-generate-function-path": ["args", "sample", "sampling_params", "evaluation"],
    "--rollout-all-samples-process-path": ["args", "all_samples", "data_source"],
    "--custom-rollout-log-function-path": ["rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"],
    "--custom-eval-rollout-log-function-path": ["rollout_id", "args", "data", "extra_metrics"],
    "--eval-function-path": ["args", "rollout_id", "data_source", "evaluation"],
}


def run_script(script: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "ROLLOUT_", "GLOBAL_", "OVER_"))}
    base.update(SHOPSIMRL_PYTHON=sys.executable, RUN_DIR=str(tmp_path / "run"), MODEL_ARGS_SCRIPT=str(tmp_path / "none.sh"))
    base.update(env)
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=base, cwd=tmp_path, timeout=120)


def flag_values(command: str) -> dict[str, str]:
    words = command.split()
    return {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}


@pytest.mark.parametrize("script", [STANDALONE, FULL], ids=lambda p: p.name)
def test_scripts_pass_bash_n_and_shellcheck(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    result = subprocess.run([str(SHELLCHECK), str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_standalone_dry_run_prints_the_command_with_hooks_and_knobs(tmp_path):
    result = run_script(STANDALONE, tmp_path, DRY_RUN="1")
    assert result.returncode == 0, result.stderr
    command = result.stdout.strip()
    assert command.startswith("ray job submit --address http://127.0.0.1:8265")
    flags = flag_values(command)
    for flag, path in HOOKS.items():
        assert flags[flag] == path
    expected = {
        "--rollout-batch-size": "16", "--n-samples-per-prompt": "8", "--over-sampling-batch-size": "16",
        "--global-batch-size": "128", "--rollout-temperature": "0.6", "--rollout-top-p": "1.0", "--rollout-top-k": "-1",
        "--advantage-estimator": "grpo", "--eps-clip": "0.2", "--eps-clip-high": "0.28", "--reward-key": "reward",
        "--input-key": "prompt",
    }
    assert {k: flags[k] for k in expected} == expected
    assert "--use-wandb" not in command and "--apply-chat-template" not in command
    assert "shopsim_max_consecutive_failed_groups" in result.stderr  # the custom config it would write


def test_full_dry_run_uses_spec_defaults_and_starts_the_env_server(tmp_path):
    result = run_script(FULL, tmp_path, DRY_RUN="1")
    assert result.returncode == 0, result.stderr
    serve, train = result.stdout.strip().splitlines()
    assert "shopsimrl.cli env serve --host 127.0.0.1 --port 5700 --slots 48" in serve
    flags = flag_values(train)
    assert (flags["--rollout-batch-size"], flags["--over-sampling-batch-size"], flags["--global-batch-size"]) == ("16", "32", "64")
    assert "--custom-config-path" in flags


def test_wandb_is_opt_in_and_the_key_never_reaches_the_command_line(tmp_path):
    result = run_script(STANDALONE, tmp_path, DRY_RUN="1", USE_WANDB="1", WANDB_API_KEY="secret-key-123",
                        WANDB_PROJECT="p1", WANDB_GROUP="g1", WANDB_MODE="offline")
    assert result.returncode == 0, result.stderr
    flags = flag_values(result.stdout)
    assert "--use-wandb" in result.stdout
    assert (flags["--wandb-project"], flags["--wandb-group"], flags["--wandb-mode"]) == ("p1", "g1", "offline")
    assert "secret-key-123" not in result.stdout + result.stderr and "--wandb-key" not in result.stdout


def test_every_hook_in_the_scripts_resolves_to_a_function_with_slimes_signature(tmp_path):
    flags = flag_values(run_script(STANDALONE, tmp_path, DRY_RUN="1").stdout)
    for flag, names in SLIME_SIGNATURES.items():
        module_name, _, attr = flags[flag].rpartition(".")
        function = getattr(importlib.import_module(module_name), attr)
        assert callable(function)
        assert list(inspect.signature(function).parameters) == names, flag
    assert inspect.iscoroutinefunction(importlib.import_module("shopsimrl.slime_runtime").generate)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OVER_SAMPLING_BATCH_SIZE": "8"}, "over_sampling_batch_size (8) must be >= rollout_batch_size (16)"),
        ({"GLOBAL_BATCH_SIZE": "60"}, "is not a multiple of global_batch_size=60"),
        ({"GLOBAL_BATCH_SIZE": "4"}, "global_batch_size=4 is not a multiple of n_samples_per_prompt=8"),
        ({"TENSOR_PARALLEL_SIZE": "3"}, "8 training GPUs is not divisible by TENSOR_PARALLEL_SIZE=3"),
        ({"ROLLOUT_NUM_GPUS_PER_ENGINE": "3"}, "not a positive multiple of ROLLOUT_NUM_GPUS_PER_ENGINE=3"),
        ({"COLOCATE": "0", "ROLLOUT_NUM_GPUS": "0"}, "ROLLOUT_NUM_GPUS (0) is not a positive multiple"),
        ({"ROLLOUT_BATCH_SIZE": "many"}, "ROLLOUT_BATCH_SIZE='many' is not an integer"),
        ({"SHOPSIM_WAVE_CUSHION": "1.0"}, "SHOPSIM_WAVE_CUSHION=1 sizes adaptive waves only"),
        ({"SHOPSIM_WAVE_CUSHION": "some"}, "SHOPSIM_WAVE_CUSHION='some' is not a number"),
    ],
)
def test_startup_checks_refuse_with_a_clear_message(tmp_path, env, message):
    result = run_script(STANDALONE, tmp_path, DRY_RUN="1", **env)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def shell_defaults(*flags: str, **environ: str) -> dict[str, str]:
    """What the scripts' ``eval`` of ``--print-defaults`` exports, read back from a real bash."""
    script = (f'eval "$("{sys.executable}" -m shopsimrl.slime.launch --print-defaults {" ".join(flags)})"; '
              "env -0")
    clean = {k: v for k, v in os.environ.items() if not any(f.metadata["env"] == k for f in fields(TrainConfig))}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={**clean, **environ}).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_shell_defaults_are_the_launchers_defaults():
    shell = shell_defaults()
    for f in fields(TrainConfig):
        var = f.metadata["env"]
        assert var in shell, f"--print-defaults sets no {var}"
        assert (shell[var] == "") if f.default is None else (_parse(shell[var], f.default) == f.default), var
    assert shell_defaults(ROLLOUT_BATCH_SIZE="4")["ROLLOUT_BATCH_SIZE"] == "4"  # a set knob is kept
    full = shell_defaults("--full-run")
    assert (full["OVER_SAMPLING_BATCH_SIZE"], full["GLOBAL_BATCH_SIZE"], full["ENV_SLOTS"]) == ("32", "64", "48")
    assert (full["ENV_HOST"], full["ENV_PORT"]) == ("127.0.0.1", "5700") and "SHOPSIM_ENV_URL" not in full


@pytest.mark.parametrize("script", [STANDALONE, FULL], ids=lambda p: p.name)
def test_scripts_take_their_defaults_from_the_launcher(script):
    text = script.read_text()
    assert "-m shopsimrl.slime.launch --print-defaults" in text
    restated = [var for var in re.findall(r'^: "\$\{(\w+):=', text, flags=re.M)
                if any(f.metadata["env"] == var for f in fields(TrainConfig)) or var in ("ENV_HOST", "ENV_PORT")]
    assert restated == [], f"{script.name} restates the defaults of {restated}"


def test_every_knob_is_documented():
    doc = (ROOT / "docs" / "slime.md").read_text()
    for f in fields(TrainConfig):
        assert f"`{f.metadata['env']}`" in doc, f.metadata["env"]
    for var in ("ENV_HOST", "ENV_PORT", "ENV_SLOTS", "ENV_WAIT_SECONDS", "DRY_RUN", "MODEL_ARGS_SCRIPT", "SHOPSIMRL_PYTHON"):
        assert f"`{var}`" in doc, var


@pytest.mark.parametrize("launcher", ["ray", "python"])
def test_train_without_slime_fails_clearly(tmp_path, launcher):
    env = {**os.environ, "SLIME_DIR": str(tmp_path / "no-slime"), "SLIME_LAUNCHER": launcher, "RUN_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "train"], capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert f"no train.py in SLIME_DIR={tmp_path / 'no-slime'}" in result.stderr
    assert "git clone https://github.com/THUDM/slime" in result.stderr
    assert not (tmp_path / "shopsim_slime_config.yaml").exists()


def test_print_args_lists_train_py_arguments(tmp_path):
    env = {**os.environ, "RUN_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "train", "--print-args", "--", "--num-layers", "2"],
                            capture_output=True, text=True, env=env, check=True)
    lines = result.stdout.splitlines()
    assert lines[:2] == ["--hf-checkpoint", "/root/Qwen3-4B"] and lines[-2:] == ["--num-layers", "2"]


def test_custom_config_is_yaml_slime_can_read(tmp_path):
    import yaml

    config = TrainConfig.from_env({"RUN_DIR": str(tmp_path), "SHOPSIM_MAX_CONSECUTIVE_FAILED_GROUPS": "5"})
    path = config.write_custom_config()
    assert yaml.safe_load(path.read_text()) == {
        "shopsim_env_url": "http://127.0.0.1:5700", "shopsim_env_slots": 48,
        "shopsim_trace_dir": str(tmp_path.resolve() / "traces"),
        "shopsim_max_consecutive_failed_groups": 5, "shopsim_max_turns": 30,
    }


def test_the_wave_cushion_goes_into_the_custom_config(tmp_path):
    config = TrainConfig.from_env({"RUN_DIR": str(tmp_path), "WAVES": "adaptive", "SHOPSIM_WAVE_CUSHION": "-0.5"})
    assert config.custom_config()["shopsim_wave_cushion"] == -0.5
    assert "shopsim_wave_cushion" not in TrainConfig.from_env({"WAVES": "adaptive"}).custom_config()


def test_the_action_format_goes_into_the_custom_config_and_the_generate_hook_reads_it(tmp_path):
    from types import SimpleNamespace

    from shopsimrl.slime.generate import action_format

    config = TrainConfig.from_env({"RUN_DIR": str(tmp_path), "ACTION_FORMAT": "constrained-words"})
    assert config.custom_config()["shopsim_action_format"] == "constrained-words"
    assert action_format(SimpleNamespace(**config.custom_config())) == "constrained-words"
    assert "shopsim_action_format" not in TrainConfig.from_env({}).custom_config()  # tools: the default, unwritten


def test_an_unknown_action_format_is_refused_with_the_names(capsys):
    with pytest.raises(LaunchError, match="ACTION_FORMAT must be one of tools, constrained, constrained-words, got 'json'"):
        TrainConfig.from_env({"ACTION_FORMAT": "json"}).check()


@pytest.mark.parametrize("flag", ["--partial-rollout", "--partial-rollout=true"])
def test_partial_rollout_is_refused_at_launch(flag, capsys, monkeypatch):
    monkeypatch.delenv("SHOPSIM_WAVE_CUSHION", raising=False)
    assert cli_main(["train", "--dry-run", "--", flag]) == 2
    assert "--partial-rollout is not supported" in capsys.readouterr().err


async def test_export_writes_slimes_prompt_file(tmp_path):
    out = tmp_path / "data" / "train.jsonl"
    assert await export_prompts(FakeEnv(), "train", out) == 1
    # the instruction and the category: what the forecast rule reads, as the main job does
    meta = {"task_id": TASK.task_id, "split": "train", "instruction": TASK.instruction,
            **({"category": TASK.goal["category"]} if "category" in TASK.goal else {})}
    assert list(read_jsonl(out)) == [{"prompt": TASK.task_id, "metadata": meta}]


def test_export_refuses_in_process_options_with_an_env_url(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "data", "export", "--env", "http://127.0.0.1:1", "--products", "10",
         "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True)
    assert result.returncode == 2 and "--products" in result.stderr


@pytest.mark.parametrize("module", ["shopsimrl.slime_runtime", "shopsimrl.slime_metrics", "shopsimrl.commands.train",
                                    "shopsimrl.slime.launch", "shopsimrl.slime.policy"])
def test_imports_load_no_heavy_dependency(module):
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == ""


def test_filter_and_metric_hooks_run_without_heavy_dependencies():
    # slime's filter hub is the slime double's (the filter answers with slime's class): no heavy import either
    code = """
import sys
from types import SimpleNamespace as S
from shopsimrl.slime.harness.double.rollout import install
install()
from shopsimrl.slime_runtime import fully_scored_group_filter, normalize_grpo_by_prompt_and_rollout
from shopsimrl.slime_metrics import record_generated_rollout_groups, enrich_rollout_metrics
args = S(reward_key="reward")
group = [S(group_index=0, index=i, rollout_id=None, reward={"reward": float(i)}, metadata={"shopsim_scored": True}) for i in range(2)]
fully_scored_group_filter(args, group)
normalize_grpo_by_prompt_and_rollout(args, group)
record_generated_rollout_groups(args, [group], None)
enrich_rollout_metrics(0, args, group, {}, 1.0)
print(",".join(m for m in HEAVY_NAMES if m in sys.modules))
""".replace("HEAVY_NAMES", repr(tuple(m for m in HEAVY if m != "slime")))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == ""


# -- run_full_train.sh: the env server's lifecycle ----------------------------------------------------------


FAKE_SERVER = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def fake_python(tmp_path: Path, serve: str) -> Path:
    """A SHOPSIMRL_PYTHON whose `env serve` is a stand-in server (or a hang); everything else is the real CLI."""
    (tmp_path / "server.py").write_text(FAKE_SERVER)
    serve_cmd = {"healthy": f'exec "{sys.executable}" "{tmp_path}/server.py" "$@"', "hang": "exec sleep 60"}[serve]
    wrapper = tmp_path / "fake-python"
    wrapper.write_text(
        "#!/usr/bin/env bash\n"
        f'if [[ "$*" == *"env serve"* ]]; then echo $$ > "{tmp_path}/server.pid"; {serve_cmd}; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    (tmp_path / "model.sh").write_text("MODEL_ARGS=(--num-layers 2)\n")
    return wrapper


def full_env(tmp_path: Path, serve: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "ROLLOUT_", "GLOBAL_", "OVER_"))}
    env.update(SHOPSIMRL_PYTHON=str(fake_python(tmp_path, serve)), ENV_PORT=str(free_port()), RUN_DIR=str(tmp_path / "run"),
               SLIME_DIR=str(tmp_path / "no-slime"), MODEL_ARGS_SCRIPT=str(tmp_path / "model.sh"), **extra)
    return env


def test_full_run_stops_the_env_server_when_training_fails(tmp_path):
    result = subprocess.run(["bash", str(FULL)], capture_output=True, text=True, env=full_env(tmp_path, "healthy"),
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr  # training refused: slime is not installed
    assert "env server ready" in result.stderr and "no train.py" in result.stderr
    assert "stopping the env server" in result.stderr
    assert not alive(int((tmp_path / "server.pid").read_text()))


def test_full_run_gives_up_waiting_for_healthz_and_stops_the_server(tmp_path):
    result = subprocess.run(["bash", str(FULL)], capture_output=True, text=True,
                            env=full_env(tmp_path, "hang", ENV_WAIT_SECONDS="2"), cwd=tmp_path, timeout=120)
    assert result.returncode == 1
    assert "did not answer within ENV_WAIT_SECONDS=2" in result.stderr
    assert not alive(int((tmp_path / "server.pid").read_text()))


def test_ctrl_c_stops_the_env_server(tmp_path):
    process = subprocess.Popen(["bash", str(FULL)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=full_env(tmp_path, "hang", ENV_WAIT_SECONDS="60"), cwd=tmp_path)
    pid_file = tmp_path / "server.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert not alive(int(pid_file.read_text()))


def test_data_export_from_the_in_process_catalog_writes_every_train_task(tmp_path):
    out = tmp_path / "data" / "shopsim_train.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "data", "export", "--split", "train", "--out", str(out),
         "--products", "500", "--seed", "3", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    from shopsimrl.env import load_env

    with load_env(500, 3, tmp_path / "cache") as env:
        expected = env.list_tasks("train")
        categories = [env.get_task(t).goal["category"] for t in expected]
        instructions = [env.get_task(t).instruction for t in expected]
    assert [r["prompt"] for r in rows] == expected and len(rows) > 0
    # the category is the cluster label the selector data source reads (shopsim_cluster_key: category); the
    # instruction and the category are what the forecast rule reads; nothing of the hidden goal besides
    assert rows[0]["metadata"] == {"task_id": expected[0], "split": "train", "category": categories[0],
                                   "instruction": instructions[0]}
    assert [r["metadata"]["instruction"] for r in rows] == instructions
    assert [r["metadata"]["category"] for r in rows] == categories


# -- the turn cap: SHOPSIM_MAX_TURNS, and its old name SHOPSIM_MAX_STEPS for one release ---------------------------


def test_shopsim_max_turns_sets_the_turn_cap_silently(capsys):
    config = TrainConfig.from_env({"SHOPSIM_MAX_TURNS": "12"})
    assert config.max_turns == 12 and config.custom_config()["shopsim_max_turns"] == 12
    assert "shopsim_max_steps" not in config.custom_config()
    assert capsys.readouterr().err == ""


def test_the_old_shopsim_max_steps_still_works_and_says_the_new_name(capsys):
    assert TrainConfig.from_env({"SHOPSIM_MAX_STEPS": "7"}).max_turns == 7
    assert capsys.readouterr().err == (
        "warning: SHOPSIM_MAX_STEPS is deprecated and will be removed in the next release: set SHOPSIM_MAX_TURNS instead\n")
    assert TrainConfig.from_env({"SHOPSIM_MAX_STEPS": "7", "SHOPSIM_MAX_TURNS": "9"}).max_turns == 9
    assert capsys.readouterr().err == "warning: SHOPSIM_MAX_STEPS is deprecated and ignored: SHOPSIM_MAX_TURNS is set\n"


def test_a_turn_cap_below_one_is_refused():
    with pytest.raises(LaunchError, match="SHOPSIM_MAX_TURNS .* must be >= 1, got 0"):
        TrainConfig.from_env({"SHOPSIM_MAX_TURNS": "0"}).check()


@pytest.mark.parametrize("variable", ["SHOPSIM_MAX_TURNS", "SHOPSIM_MAX_STEPS"])
def test_the_script_passes_the_turn_cap_through(tmp_path, variable):
    result = run_script(STANDALONE, tmp_path, DRY_RUN="1", **{variable: "7"})
    assert result.returncode == 0, result.stderr
    assert '"shopsim_max_turns": 7' in result.stderr
    deprecated = "SHOPSIM_MAX_STEPS is deprecated and will be removed in the next release: set SHOPSIM_MAX_TURNS"
    assert (deprecated in result.stderr) == (variable == "SHOPSIM_MAX_STEPS")
