#!/usr/bin/env bash
# GRPO training of the ShopSim agent on slime, with ShopSimRL's dynamic-sampling hooks.
#
# Every knob is an environment variable; the defaults below are this script's own.
# Run on its own it has no spare over-sampling slots (OVER_SAMPLING_BATCH_SIZE =
# ROLLOUT_BATCH_SIZE) and one optimizer update per step (GLOBAL_BATCH_SIZE unset =
# ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT); run_full_train.sh sets 32 and 64.
#
# The slime argument list (hook paths, --rollout-temperature 0.6 --rollout-top-p 1.0
# --rollout-top-k -1, GRPO with --eps-clip 0.2 --eps-clip-high 0.28, ...) is built by
# `shopsimrl train`, the one place it exists; that command also runs the startup checks
# (GPUs divisible by the TP sizes, over-sampling >= rollout batch, batch sizes) and
# refuses with exit code 2 and a message naming the variable to change.
#
#   DRY_RUN=1 scripts/run_shopsimrl_slime.sh   # print the exact command, run nothing
#
# W&B is off unless USE_WANDB=1; the API key is never a flag: slime's wandb reads
# WANDB_API_KEY from the environment (with SLIME_LAUNCHER=ray, from the Ray cluster's).
set -euo pipefail

# --- dynamic sampling (docs/dynamic-sampling.md §1) ---
: "${ROLLOUT_BATCH_SIZE:=16}"
: "${N_SAMPLES_PER_PROMPT:=8}"
: "${OVER_SAMPLING_BATCH_SIZE:=$ROLLOUT_BATCH_SIZE}"
: "${GLOBAL_BATCH_SIZE:=}"  # empty: ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT
: "${SHOPSIM_MAX_CONSECUTIVE_FAILED_GROUPS:=8}"
: "${SELECTION:=seed}"  # informative: prompt selection (docs/efficient-sampling.md)
: "${WAVES:=fixed}"  # adaptive: predicted-size refills instead of whole waves
# --- episodes and sampling ---
: "${SHOPSIM_ENV_URL:=http://127.0.0.1:5700}"  # or several, comma-separated
: "${ENV_SLOTS:=48}"  # episodes at once per env server: its --slots
: "${SHOPSIM_ENV_TOKEN_FILE:=}"  # the env servers' shared token (servers beyond loopback)
: "${SHOPSIM_MAX_STEPS:=30}"
: "${ROLLOUT_MAX_RESPONSE_LEN:=8192}"
: "${ROLLOUT_TEMPERATURE:=0.6}"
# --- GRPO ---
: "${EPS_CLIP:=0.2}"
: "${EPS_CLIP_HIGH:=0.28}"
: "${LR:=1e-6}"
: "${NUM_ROLLOUT:=80}"
# --- installation, model, data ---
: "${SLIME_DIR:=/root/slime}"
: "${MEGATRON_DIR:=/root/Megatron-LM}"
: "${SLIME_LAUNCHER:=ray}"
: "${RAY_ADDRESS:=http://127.0.0.1:8265}"
: "${PYTHON:=python3}"
: "${SHOPSIMRL_PYTHON:=python3}"
: "${HF_CHECKPOINT:=/root/Qwen3-4B}"
: "${REF_LOAD:=/root/Qwen3-4B_torch_dist}"
: "${MODEL_ARGS_SCRIPT:=$SLIME_DIR/scripts/models/qwen3-4B.sh}"
: "${SAVE_DIR:=checkpoints/shopsimrl}"
: "${SAVE_INTERVAL:=20}"
: "${PROMPT_DATA:=data/shopsim_train.jsonl}"
: "${RUN_DIR:=runs/slime}"
# --- GPUs ---
: "${ACTOR_NUM_NODES:=1}"
: "${ACTOR_NUM_GPUS_PER_NODE:=8}"
: "${COLOCATE:=1}"
: "${ROLLOUT_NUM_GPUS:=0}"
: "${TENSOR_PARALLEL_SIZE:=2}"
: "${ROLLOUT_NUM_GPUS_PER_ENGINE:=2}"
: "${SGLANG_MEM_FRACTION_STATIC:=0.7}"
: "${MAX_TOKENS_PER_GPU:=16384}"
# --- logging ---
: "${USE_WANDB:=0}"
: "${WANDB_PROJECT:=shopsimrl}"
: "${WANDB_GROUP:=shopsimrl-grpo}"
: "${WANDB_MODE:=online}"
: "${WANDB_DIR:=runs/wandb}"
: "${DRY_RUN:=0}"

export ROLLOUT_BATCH_SIZE N_SAMPLES_PER_PROMPT OVER_SAMPLING_BATCH_SIZE GLOBAL_BATCH_SIZE \
    SHOPSIM_MAX_CONSECUTIVE_FAILED_GROUPS SELECTION WAVES SHOPSIM_ENV_URL SHOPSIM_ENV_TOKEN_FILE ENV_SLOTS SHOPSIM_MAX_STEPS ROLLOUT_MAX_RESPONSE_LEN \
    ROLLOUT_TEMPERATURE EPS_CLIP EPS_CLIP_HIGH LR NUM_ROLLOUT SLIME_DIR MEGATRON_DIR SLIME_LAUNCHER \
    RAY_ADDRESS PYTHON HF_CHECKPOINT REF_LOAD SAVE_DIR SAVE_INTERVAL PROMPT_DATA RUN_DIR ACTOR_NUM_NODES \
    ACTOR_NUM_GPUS_PER_NODE COLOCATE ROLLOUT_NUM_GPUS TENSOR_PARALLEL_SIZE ROLLOUT_NUM_GPUS_PER_ENGINE \
    SGLANG_MEM_FRACTION_STATIC MAX_TOKENS_PER_GPU USE_WANDB WANDB_PROJECT WANDB_GROUP WANDB_MODE WANDB_DIR

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
