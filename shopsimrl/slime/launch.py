"""The slime training command, built in one place.

``scripts/run_shopsimrl_slime.sh`` and ``scripts/run_full_train.sh`` only set
environment variables and call ``shopsimrl train``; the knobs are read and checked by
:class:`shopsimrl.slime.launch_knobs.TrainKnobs`, and :class:`TrainConfig` builds from
them the exact ``train.py`` argument list.  So the list of slime flags exists once, in
Python, and ``shopsimrl train --dry-run`` / ``DRY_RUN=1`` print precisely what would run.
``python -m shopsimrl.slime.launch --print-defaults`` prints the knobs' defaults for the scripts.

ShopSim's own settings (env URL, trace dir, failure limit, turn limit) are not slime
flags: slime's parser rejects unknown flags, so they go into a YAML file passed with
slime's ``--custom-config-path`` (slime copies every key of it onto ``args``).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shopsimrl.agent.constrained import DEFAULT_ACTION_FORMAT
from shopsimrl.defaults import DATA_SOURCE_PATH, HOOKS, ROLLOUT_FUNCTION_PATH, SLIME_ORDER_DATA_SOURCE_PATH
from shopsimrl.io import atomic_write_json
from shopsimrl.sampling.modes import Selection, WaveMode, is_faithful
from shopsimrl.slime.data import CATEGORY_KEY, read_prompts
from shopsimrl.slime.launch_knobs import LaunchError, TrainKnobs, _parse, main, shell_defaults

#: the names callers import from here (the knobs' own live in :mod:`shopsimrl.slime.launch_knobs`)
__all__ = ["HOOKS", "REFUSED_FLAGS", "LaunchError", "TrainConfig", "_parse", "main", "render", "shell_defaults"]

#: train.py flags the launcher refuses, with why (they would fail mid-run, or train on what they must not).
REFUSED_FLAGS: Mapping[str, str] = {
    "--partial-rollout": (
        "--partial-rollout is not supported: slime would resume aborted ShopSim episodes from a partial token "
        "stream, which a multi-turn episode cannot do (the env state is gone), and would serve the same prompt "
        "twice in a step; drop the flag"
    ),
}
CUSTOM_CONFIG_NAME = "shopsim_slime_config.yaml"


class TrainConfig(TrainKnobs):
    """The knobs (:class:`TrainKnobs`) and what slime gets from them: ``train.py``'s arguments, the job's
    environment, the whole command and the ShopSim config file."""

    @property
    def _selector_data_source(self) -> bool:
        """Prompt selection, or adaptive waves (sized from the selector's predictions), need our data source."""
        return not is_faithful(self.selection, self.waves)

    @property
    def custom_config_path(self) -> Path:
        return _absolute(self.run_dir) / CUSTOM_CONFIG_NAME

    def custom_config(self) -> dict[str, Any]:
        """The ShopSim settings slime copies onto ``args`` (read by the hooks)."""
        # the env package loads httpx (its client): only when the config is written
        from shopsimrl.env.pool import parse_env_urls

        urls = parse_env_urls(self.env_url)
        config: dict[str, Any] = {
            "shopsim_env_url": ",".join(urls),
            "shopsim_env_slots": self.env_slots * len(urls),  # the hook's gate: every server's slots
            "shopsim_trace_dir": str(_absolute(self.run_dir) / "traces"),
            "shopsim_max_consecutive_failed_groups": self.max_consecutive_failed_groups,
            "shopsim_max_turns": self.max_turns,
            **({"shopsim_selection": str(self.selection), "shopsim_cluster_key": CATEGORY_KEY}
               if self._selector_data_source else {}),
            **({"shopsim_wave_cushion": self.wave_cushion} if self.wave_cushion is not None else {}),
            **({"shopsim_action_format": self.action_format} if self.action_format != DEFAULT_ACTION_FORMAT else {}),
        }
        if self.env_token_file:
            config["shopsim_env_token_file"] = str(_absolute(self.env_token_file))
        return config

    def train_args(self, extra: Sequence[str] = ()) -> list[str]:
        """slime's ``train.py`` arguments; ``extra`` (e.g. the model's MODEL_ARGS) go last.

        A flag of :data:`REFUSED_FLAGS` in ``extra`` is refused here, at launch, not mid-run.
        """
        self.check_loop()
        refused = [REFUSED_FLAGS[flag] for flag in REFUSED_FLAGS if any(a == flag or a.startswith(flag + "=") for a in extra)]
        if refused:
            raise LaunchError("; ".join(refused))
        knobs = self.check()
        if self.selection == Selection.FORECAST.value and Path(self.prompt_data).is_file():
            read_prompts(self.prompt_data)  # a malformed line is refused here, in one line, before slime starts
        args = [
            "--hf-checkpoint", self.hf_checkpoint,
            "--ref-load", self.ref_load,
            "--load", str(_absolute(self.save_dir)),
            "--save", str(_absolute(self.save_dir)),
            "--save-interval", str(self.save_interval),
            # data: the prompt is a task id; no chat template on it (the generate hook builds the conversation)
            "--prompt-data", str(_absolute(self.prompt_data)),
            "--input-key", "prompt",
            "--metadata-key", "metadata",
            "--rollout-shuffle",
            "--num-rollout", str(self.num_rollout),
            # dynamic sampling
            "--rollout-batch-size", str(knobs.rollout_batch_size),
            "--n-samples-per-prompt", str(knobs.n_samples_per_prompt),
            "--over-sampling-batch-size", str(knobs.over_sampling_batch_size),
            "--global-batch-size", str(knobs.global_batch_size),
            "--rollout-max-response-len", str(self.rollout_max_response_len),
            "--rollout-temperature", str(self.rollout_temperature),
            "--rollout-top-p", "1.0",
            "--rollout-top-k", "-1",
            "--reward-key", "reward",
        ]
        for flag, path in HOOKS.items():
            args += [flag, path]
        if self._selector_data_source:  # docs/selection.md
            args += ["--data-source-path", DATA_SOURCE_PATH]
        elif self.async_loop:  # slime's own order, its state saved as of each rollout's end (docs/slime.md)
            args += ["--data-source-path", SLIME_ORDER_DATA_SOURCE_PATH]
        if WaveMode.parse(self.waves) is WaveMode.ADAPTIVE:
            args += ["--rollout-function-path", ROLLOUT_FUNCTION_PATH]
        args += ["--custom-config-path", str(self.custom_config_path)]
        args += [
            "--advantage-estimator", "grpo",
            "--eps-clip", str(self.eps_clip),
            "--eps-clip-high", str(self.eps_clip_high),
            "--kl-loss-coef", "0.0",
            "--entropy-coef", "0.0",
            "--optimizer", "adam",
            "--lr", str(self.lr),
            "--lr-decay-style", "constant",
            "--weight-decay", "0.1",
            "--adam-beta1", "0.9",
            "--adam-beta2", "0.98",
            "--tensor-model-parallel-size", str(self.tensor_parallel_size),
            "--pipeline-model-parallel-size", "1",
            "--use-dynamic-batch-size",
            "--max-tokens-per-gpu", str(self.max_tokens_per_gpu),
            "--actor-num-nodes", str(self.actor_num_nodes),
            "--actor-num-gpus-per-node", str(self.actor_num_gpus_per_node),
            *(["--colocate"] if self.colocate else ["--rollout-num-gpus", str(self.rollout_num_gpus)]),
            "--rollout-num-gpus-per-engine", str(self.rollout_num_gpus_per_engine),
            "--sglang-mem-fraction-static", str(self.sglang_mem_fraction_static),
        ]
        if self.use_wandb:
            args += [
                "--use-wandb",
                "--wandb-project", self.wandb_project,
                "--wandb-group", self.wandb_group,
                "--wandb-mode", self.wandb_mode,
                "--wandb-dir", str(_absolute(self.wandb_dir)),
            ]
        return args + list(extra)

    def job_env(self) -> dict[str, str]:
        """Variables the training job needs (never a secret: W&B reads WANDB_API_KEY from the environment)."""
        return {"PYTHONPATH": self.megatron_dir, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}

    def command(self, extra: Sequence[str] = ()) -> list[str]:
        """The whole command: ``ray job submit ... -- python3 train.py ...`` or ``env ... python3 train.py ...``."""
        train = [self.python, str(Path(self.slime_dir) / self.train_script), *self.train_args(extra)]
        if self.launcher == "ray":
            runtime_env = json.dumps({"env_vars": self.job_env()}, sort_keys=True)
            return ["ray", "job", "submit", "--address", self.ray_address, "--runtime-env-json", runtime_env, "--", *train]
        return ["env", *(f"{k}={v}" for k, v in self.job_env().items()), *train]

    def write_custom_config(self) -> Path:
        """JSON is YAML, so slime's ``yaml.safe_load`` reads this file; written atomically."""
        return atomic_write_json(self.custom_config_path, self.custom_config())


def _absolute(path: str) -> Path:
    """Paths go absolute: a Ray job does not run in the directory the script was started from."""
    return Path(path).expanduser().resolve()


def render(command: Sequence[str]) -> str:
    return shlex.join(command)


if __name__ == "__main__":
    sys.exit(main())
