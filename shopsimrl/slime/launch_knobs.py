"""The training scripts' knobs: read from the environment, checked, refused with the fix.

``scripts/run_shopsimrl_slime.sh`` and ``scripts/run_full_train.sh`` only set environment
variables; :class:`TrainKnobs` reads them (field = variable, default, meaning), and its checks
refuse every bad setting at once, before anything starts.  The knobs' defaults exist once, here
(taken from the parts' defaults modules): the scripts cannot import Python, so they ask for them
with ``shopsimrl launch --print-defaults`` (``--full-run`` for ``run_full_train.sh``) and ``eval``
the shell lines it prints.  What is built from the knobs (slime's ``train.py`` arguments, the
command, the ShopSim config file) is :class:`shopsimrl.slime.launch.TrainConfig`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from shopsimrl.agent.constrained import ACTION_FORMATS, DEFAULT_ACTION_FORMAT
from shopsimrl.defaults import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_HOST,
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_MAX_TURNS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_PORT,
    DEFAULT_PROMPT_DATA,
    DEFAULT_ROLLOUT_BATCH_SIZE,
    DEFAULT_SLOTS,
    DEFAULT_URL,
)
from shopsimrl.errors import Refusal
from shopsimrl.sampling import KnobError, SamplingKnobs
from shopsimrl.sampling.knobs import validate_failure_limit, validate_update_knobs, validate_wave_knobs
from shopsimrl.sampling.modes import (
    DEFAULT_SELECTION,
    DEFAULT_WAVE_MODE,
    SELECTIONS,
    WAVE_MODES,
    Choice,
    Selection,
    WaveMode,
)

KNOB_VARIABLES = (
    "set with ROLLOUT_BATCH_SIZE, N_SAMPLES_PER_PROMPT, OVER_SAMPLING_BATCH_SIZE, GLOBAL_BATCH_SIZE, "
    "SHOPSIM_MAX_CONSECUTIVE_FAILED_GROUPS"
)
#: Old variable names still read for one release (with a message on stderr), by their new name.
DEPRECATED_VARIABLES: Mapping[str, str] = {"SHOPSIM_MAX_TURNS": "SHOPSIM_MAX_STEPS"}
#: ``run_full_train.sh``'s own values (the docs/dynamic-sampling.md §1 set-up: 16 spare slots per wave, 2 updates per step)
#: and its env-server variables; it derives SHOPSIM_ENV_URL from ENV_HOST and ENV_PORT itself.
FULL_RUN_DEFAULTS: Mapping[str, Any] = {
    "OVER_SAMPLING_BATCH_SIZE": DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    "GLOBAL_BATCH_SIZE": DEFAULT_GLOBAL_BATCH_SIZE,
    "ENV_HOST": DEFAULT_HOST,
    "ENV_PORT": DEFAULT_PORT,
}
INSTALL_HINT = (
    "install slime first: use the slimerl/slime Docker image (it ships Megatron-LM and SGLang), then "
    "`git clone https://github.com/THUDM/slime /root/slime && pip install -e /root/slime`, "
    "or point SLIME_DIR at an existing checkout (see docs/slime.md)"
)


class LaunchError(Refusal, ValueError):
    """A knob or installation problem; the message says what to change."""


def _knob(env: str, default: Any, help: str, kind: type | None = None) -> Any:
    return field(default=default, metadata={"env": env, "help": help, "kind": kind})


_Knobs = TypeVar("_Knobs", bound="TrainKnobs")


@dataclass(frozen=True)
class TrainKnobs:
    """Every knob of the training scripts: field = environment variable, default, meaning.

    The defaults are those of ``run_shopsimrl_slime.sh`` run on its own: no spare
    over-sampling slots (``over_sampling_batch_size`` = ``rollout_batch_size``) and one
    optimizer update per step (``global_batch_size`` = rollout batch x n samples).
    ``run_full_train.sh`` sets the docs/dynamic-sampling.md §1 values (32 and 64).
    """

    # installation
    slime_dir: str = _knob("SLIME_DIR", "/root/slime", "slime checkout (its train.py is run)")
    megatron_dir: str = _knob("MEGATRON_DIR", "/root/Megatron-LM", "Megatron-LM checkout, put on PYTHONPATH")
    launcher: str = _knob("SLIME_LAUNCHER", "ray", "'ray' (ray job submit to RAY_ADDRESS) or 'python' (run train.py directly)")
    ray_address: str = _knob("RAY_ADDRESS", "http://127.0.0.1:8265", "Ray dashboard address for ray job submit")
    python: str = _knob("PYTHON", "python3", "the Python that runs slime's train.py")
    # model and data
    hf_checkpoint: str = _knob("HF_CHECKPOINT", "/root/Qwen3-4B", "HF model dir (tokenizer, chat template, SGLang weights)")
    ref_load: str = _knob("REF_LOAD", "/root/Qwen3-4B_torch_dist", "Megatron torch_dist checkpoint of the same model")
    save_dir: str = _knob("SAVE_DIR", "checkpoints/shopsimrl", "training checkpoints (also --load, to resume)")
    save_interval: int = _knob("SAVE_INTERVAL", 20, "rollout steps between checkpoints")
    prompt_data: str = _knob("PROMPT_DATA", DEFAULT_PROMPT_DATA, "prompt file from `shopsimrl data export`")
    run_dir: str = _knob("RUN_DIR", "runs/slime", "traces and the ShopSim custom config go here")
    num_rollout: int = _knob("NUM_ROLLOUT", 80, "rollout steps to train")
    # dynamic sampling (docs/dynamic-sampling.md §1)
    rollout_batch_size: int = _knob("ROLLOUT_BATCH_SIZE", DEFAULT_ROLLOUT_BATCH_SIZE, "groups kept per step")
    n_samples_per_prompt: int = _knob("N_SAMPLES_PER_PROMPT", DEFAULT_N_SAMPLES_PER_PROMPT, "siblings per group")
    over_sampling_batch_size: int | None = _knob(
        "OVER_SAMPLING_BATCH_SIZE", None, "groups submitted per wave (unset: ROLLOUT_BATCH_SIZE)"
    )
    global_batch_size: int | None = _knob(
        "GLOBAL_BATCH_SIZE", None, "episodes per optimizer update (unset: ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT)"
    )
    max_consecutive_failed_groups: int = _knob(
        "SHOPSIM_MAX_CONSECUTIVE_FAILED_GROUPS", DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS, "technical groups in a row that stop the run"
    )
    selection: Selection = _knob("SELECTION", DEFAULT_SELECTION, "seed: slime's own data order; skip (formerly informative): the seed "
                                "order skipping prompts on a run of zero-spread groups; spread: the former rule, "
                                "measured to train a worse policy (both through our data source)")
    waves: str = _knob("WAVES", DEFAULT_WAVE_MODE.value, "fixed: slime's whole waves; adaptive: predicted-size refills (our rollout function)")
    wave_cushion: float | None = _knob(
        "SHOPSIM_WAVE_CUSHION", None, "WAVES=adaptive: expected informative groups kept in hand (unset: the rule's default)",
        kind=float,
    )
    # episodes
    action_format: str = _knob("ACTION_FORMAT", DEFAULT_ACTION_FORMAT, "tools: the model calls tools; constrained or "
                               "constrained-words: each reply is JSON constrained to the page's actions "
                               "(docs/real-model.md says when to train with it)")
    env_url: str = _knob("SHOPSIM_ENV_URL", DEFAULT_URL,
                         "the ShopSim env server, or several as a comma list (same catalog on each)")
    env_slots: int = _knob("ENV_SLOTS", DEFAULT_SLOTS, "episodes at once per env server: its --slots")
    env_token_file: str = _knob("SHOPSIM_ENV_TOKEN_FILE", "",
                                "file holding the env servers' shared token (servers beyond loopback)")
    max_turns: int = _knob("SHOPSIM_MAX_TURNS", DEFAULT_MAX_TURNS,
                           "turns per episode before action_limit (was SHOPSIM_MAX_STEPS, still read for one release)")
    rollout_max_response_len: int = _knob("ROLLOUT_MAX_RESPONSE_LEN", 8192, "response tokens per episode (all turns)")
    rollout_temperature: float = _knob("ROLLOUT_TEMPERATURE", 0.6, "sampling temperature")
    # GRPO
    eps_clip: float = _knob("EPS_CLIP", 0.2, "PPO clip, lower")
    eps_clip_high: float = _knob("EPS_CLIP_HIGH", 0.28, "PPO clip, upper (clip-higher)")
    lr: float = _knob("LR", 1e-6, "Adam learning rate")
    # GPUs
    actor_num_nodes: int = _knob("ACTOR_NUM_NODES", 1, "training nodes")
    actor_num_gpus_per_node: int = _knob("ACTOR_NUM_GPUS_PER_NODE", 8, "training GPUs per node")
    colocate: bool = _knob("COLOCATE", True, "1: training and SGLang share the GPUs; 0: ROLLOUT_NUM_GPUS separate ones")
    async_loop: bool = _knob("ASYNC", False, "1: slime's train_async.py, rollout k+1 while step k trains (needs COLOCATE=0)")
    rollout_num_gpus: int = _knob("ROLLOUT_NUM_GPUS", 0, "SGLang GPUs when COLOCATE=0")
    tensor_parallel_size: int = _knob("TENSOR_PARALLEL_SIZE", 2, "Megatron tensor parallel size")
    rollout_num_gpus_per_engine: int = _knob("ROLLOUT_NUM_GPUS_PER_ENGINE", 2, "SGLang tensor parallel size per engine")
    sglang_mem_fraction_static: float = _knob("SGLANG_MEM_FRACTION_STATIC", 0.7, "SGLang static memory fraction")
    max_tokens_per_gpu: int = _knob("MAX_TOKENS_PER_GPU", 16384, "dynamic batch size: tokens per GPU")
    # logging
    use_wandb: bool = _knob("USE_WANDB", False, "1: log to W&B (the key comes from WANDB_API_KEY, never a flag)")
    wandb_project: str = _knob("WANDB_PROJECT", "shopsimrl", "W&B project")
    wandb_group: str = _knob("WANDB_GROUP", "shopsimrl-grpo", "W&B group (slime appends a random suffix)")
    wandb_mode: str = _knob("WANDB_MODE", "online", "online | offline | disabled")
    wandb_dir: str = _knob("WANDB_DIR", "runs/wandb", "W&B local files")

    @classmethod
    def from_env(cls: type[_Knobs], environ: Mapping[str, str] | None = None) -> _Knobs:
        """Read every knob from ``environ`` (default ``os.environ``); unset or empty means the default."""
        environ = _resolve_deprecated(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        errors = []
        for f in fields(cls):
            raw = environ.get(f.metadata["env"], "")
            if raw == "":
                continue
            try:
                values[f.name] = _parse(raw, f.default, f.metadata.get("kind"))
            except ValueError:
                errors.append(f"{f.metadata['env']}={raw!r} is not {_kind(f.default, f.metadata.get('kind'))}")
        if errors:
            raise LaunchError("; ".join(errors))
        return cls(**values)

    @property
    def knobs(self) -> SamplingKnobs:
        """The docs/dynamic-sampling.md §1 knobs, validated by the sampling core (its messages name the fix)."""
        rbs, n = self.rollout_batch_size, self.n_samples_per_prompt
        return SamplingKnobs(
            rollout_batch_size=rbs,
            n_samples_per_prompt=n,
            over_sampling_batch_size=self.over_sampling_batch_size or rbs,
            global_batch_size=self.global_batch_size or rbs * n,
            max_consecutive_failed_groups=self.max_consecutive_failed_groups,
        )

    def check(self) -> SamplingKnobs:
        """Every startup check at once; raises :class:`LaunchError` listing all problems."""
        problems = []
        rbs, n = self.rollout_batch_size, self.n_samples_per_prompt
        for check, values in (
            (validate_wave_knobs, (rbs, self.over_sampling_batch_size or rbs)),
            (validate_update_knobs, (rbs, n, self.global_batch_size or rbs * n)),
            (validate_failure_limit, (self.max_consecutive_failed_groups,)),
        ):
            try:
                check(*values)
            except KnobError as exc:
                problems.append(f"{exc} [{KNOB_VARIABLES}]")
        actor_gpus = self.actor_num_nodes * self.actor_num_gpus_per_node
        if actor_gpus < 1 or actor_gpus % self.tensor_parallel_size:
            problems.append(
                f"ACTOR_NUM_NODES x ACTOR_NUM_GPUS_PER_NODE = {actor_gpus} training GPUs is not divisible by "
                f"TENSOR_PARALLEL_SIZE={self.tensor_parallel_size}"
            )
        rollout_gpus = actor_gpus if self.colocate else self.rollout_num_gpus
        if rollout_gpus < 1 or rollout_gpus % self.rollout_num_gpus_per_engine:
            where = "the colocated training GPUs" if self.colocate else "ROLLOUT_NUM_GPUS"
            problems.append(
                f"{where} ({rollout_gpus}) is not a positive multiple of ROLLOUT_NUM_GPUS_PER_ENGINE="
                f"{self.rollout_num_gpus_per_engine} (SGLang's tensor parallel size)"
            )
        # the env package loads httpx (its client): only when the knobs are checked
        from shopsimrl.env.pool import parse_env_urls

        try:
            parse_env_urls(self.env_url)
        except ValueError as exc:
            problems.append(f"SHOPSIM_ENV_URL={self.env_url!r}: {exc}")
        if self.max_turns < 1:
            problems.append(f"SHOPSIM_MAX_TURNS (turns per episode) must be >= 1, got {self.max_turns}")
        if self.env_slots < 1:
            problems.append(f"ENV_SLOTS (episodes at once per env server) must be >= 1, got {self.env_slots}")
        if self.launcher not in ("ray", "python"):
            problems.append(f"SLIME_LAUNCHER must be 'ray' or 'python', got {self.launcher!r}")
        if self.selection not in (*SELECTIONS, "informative"):
            problems.append(f"SELECTION must be one of {', '.join(SELECTIONS)}, got {self.selection!r}")
        if self.action_format not in ACTION_FORMATS:
            problems.append(f"ACTION_FORMAT must be one of {', '.join(ACTION_FORMATS)}, got {self.action_format!r}")
        if self.waves not in WAVE_MODES:
            problems.append(f"WAVES must be fixed or adaptive, got {self.waves!r}")
        if self.wave_cushion is not None and self.waves != WaveMode.ADAPTIVE.value:
            problems.append(f"SHOPSIM_WAVE_CUSHION={self.wave_cushion:g} sizes adaptive waves only: set WAVES=adaptive or unset it")
        if self.wandb_mode not in ("online", "offline", "disabled"):
            problems.append(f"WANDB_MODE must be online, offline or disabled, got {self.wandb_mode!r}")
        if problems:
            raise LaunchError("invalid training settings:\n  - " + "\n  - ".join(problems))
        return self.knobs

    @property
    def train_script(self) -> str:
        """The slime loop that runs: ``train.py``, or ``train_async.py`` with ASYNC=1."""
        return "train_async.py" if self.async_loop else "train.py"

    def check_loop(self) -> None:
        """ASYNC=1: what slime's train_async.py refuses, refused before anything starts, in one line."""
        if not self.async_loop:
            return
        if self.colocate:
            raise LaunchError("ASYNC=1 runs slime's train_async.py, which refuses colocation (it asserts --colocate "
                              "is off): set COLOCATE=0 and ROLLOUT_NUM_GPUS")
        slime = Path(self.slime_dir)
        if (slime / "train.py").is_file() and not (slime / self.train_script).is_file():
            raise LaunchError(f"ASYNC=1 runs slime's train_async.py, which SLIME_DIR={self.slime_dir} does not have: "
                              "use a slime that ships it, or unset ASYNC")

    def check_installed(self) -> None:
        """slime's ``train.py`` and the launcher must exist; the message says how to install."""
        problems = []
        if not (Path(self.slime_dir) / self.train_script).is_file():
            problems.append(f"slime not found: no {self.train_script} in SLIME_DIR={self.slime_dir}")
        launcher = "ray" if self.launcher == "ray" else self.python
        if shutil.which(launcher) is None:
            problems.append(f"{launcher!r} is not on PATH")
        if problems:
            raise LaunchError("; ".join(problems) + f". To {INSTALL_HINT}.")


def _resolve_deprecated(environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ`` with each deprecated variable read under its new name when the new one is unset or empty;
    each deprecated variable that is set is named on stderr with its replacement."""
    resolved = dict(environ)
    for new, old in DEPRECATED_VARIABLES.items():
        if resolved.get(old, "") == "":
            continue
        if resolved.get(new, "") == "":
            resolved[new] = resolved[old]
            print(f"warning: {old} is deprecated and will be removed in the next release: set {new} instead",
                  file=sys.stderr)
        else:
            print(f"warning: {old} is deprecated and ignored: {new} is set", file=sys.stderr)
    return resolved


def shell_defaults(*, full_run: bool = False, environ: Mapping[str, str] | None = None) -> str:
    """Shell lines that set and export every knob that is unset or empty to its default, for ``eval``.

    A knob set through its deprecated name is left unset, so the launcher reads the old name (and says so).
    ``full_run``: ``run_full_train.sh``'s values (:data:`FULL_RUN_DEFAULTS`); SHOPSIM_ENV_URL is left to it.
    """
    environ = os.environ if environ is None else environ
    defaults: dict[str, Any] = {}
    for f in fields(TrainKnobs):
        name = f.metadata["env"]
        old = DEPRECATED_VARIABLES.get(name)
        if old is not None and environ.get(name, "") == "" and environ.get(old, "") != "":
            continue
        defaults[name] = f.default
    if full_run:
        del defaults["SHOPSIM_ENV_URL"]
        defaults.update(FULL_RUN_DEFAULTS)
    return "".join(f"export {name}=${{{name}:-{shlex.quote(_shell_value(value))}}}\n" for name, value in defaults.items())


def _shell_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return "" if value is None else str(value)


def main(argv: Sequence[str] | None = None) -> int:
    """``shopsimrl launch --print-defaults [--full-run]``: the knobs' defaults as shell lines."""
    parser = argparse.ArgumentParser(prog="shopsimrl launch",
                                     description="Print the training knobs' defaults as shell lines (for the scripts' eval).")
    parser.add_argument("--print-defaults", action="store_true", required=True,
                        help="print `export NAME=${NAME:-default}` for every knob")
    parser.add_argument("--full-run", action="store_true",
                        help="run_full_train.sh's values: 32 groups per wave, 64 episodes per update, ENV_HOST, ENV_PORT")
    args = parser.parse_args(argv)
    sys.stdout.write(shell_defaults(full_run=args.full_run))
    return 0


def _parse(raw: str, default: Any, kind: type | None = None) -> Any:
    if isinstance(default, Choice):
        return type(default).parse(raw)
    if kind is float:
        return float(raw)
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if isinstance(default, int) or default is None:
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


def _kind(default: Any, kind: type | None = None) -> str:
    if isinstance(default, Choice):
        return "one of " + ", ".join(choice.value for choice in type(default))
    if kind is float:
        return "a number"
    if isinstance(default, bool):
        return "0 or 1"
    if isinstance(default, int) or default is None:
        return "an integer"
    if isinstance(default, float):
        return "a number"
    return "a string"
