#!/usr/bin/env bash
# GRPO training of the ShopSim agent on slime, with ShopSimRL's dynamic-sampling hooks.
#
# Every knob is an environment variable (docs/slime.md lists them with their defaults).
# Run on its own it has no spare over-sampling slots (OVER_SAMPLING_BATCH_SIZE =
# ROLLOUT_BATCH_SIZE) and one optimizer update per step (GLOBAL_BATCH_SIZE unset =
# ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT); run_full_train.sh sets spare slots and two updates.
#
# The slime argument list (hook paths, sampling and GRPO settings, ...) is built by
# `shopsimrl train`, the one place it exists; that command also runs the startup checks
# (GPUs divisible by the TP sizes, over-sampling >= rollout batch, batch sizes) and
# refuses with exit code 2 and a message naming the variable to change.
#
#   DRY_RUN=1 scripts/run_shopsimrl_slime.sh   # print the exact command, run nothing
#
# W&B is off unless USE_WANDB=1; the API key is never a flag: slime's wandb reads
# WANDB_API_KEY from the environment (with SLIME_LAUNCHER=ray, from the Ray cluster's).
set -euo pipefail

# Every knob's default (SLIME_DIR, ROLLOUT_BATCH_SIZE, SHOPSIM_ENV_URL, ENV_SLOTS, SHOPSIM_MAX_TURNS, ...)
# is defined once, in Python (shopsimrl.slime.launch_knobs.TrainKnobs, taken from the parts' defaults
# modules; the table in docs/slime.md). This script asks for them rather than restating them:
#   shopsimrl launch --print-defaults   # one `export NAME=${NAME:-default}` per knob
: "${SHOPSIMRL_PYTHON:=python3}"
: "${DRY_RUN:=0}"
defaults=$("$SHOPSIMRL_PYTHON" -m shopsimrl.slime.launch --print-defaults)
eval "$defaults"
: "${MODEL_ARGS_SCRIPT:=$SLIME_DIR/scripts/models/qwen3-4B.sh}"

# Megatron cannot read the architecture from a checkpoint: slime's model scripts define MODEL_ARGS.
MODEL_ARGS=()
if [[ -f "$MODEL_ARGS_SCRIPT" ]]; then
    set +u
    # shellcheck source=/dev/null
    source "$MODEL_ARGS_SCRIPT"
    set -u
elif [[ "$DRY_RUN" != 1 ]]; then
    echo "run_shopsimrl_slime.sh: MODEL_ARGS_SCRIPT=$MODEL_ARGS_SCRIPT not found: set it to the model's script in \$SLIME_DIR/scripts/models/" >&2
    exit 2
fi

train=("$SHOPSIMRL_PYTHON" -m shopsimrl.cli train)
if [[ "$DRY_RUN" == 1 ]]; then
    train+=(--dry-run)
fi
exec "${train[@]}" -- "${MODEL_ARGS[@]}"
