#!/usr/bin/env bash
# The full ShopSimRL run: start the ShopSim env server(s), wait for them, train on slime
# (scripts/run_shopsimrl_slime.sh), and stop the servers on exit, failure or Ctrl-C.
#
# Defaults: spare over-sampling slots in every wave (for zero-std groups), two optimizer
# updates per step, and one env server on this machine (the values: `shopsimrl launch
# --print-defaults --full-run`).  More env servers:
#   ENV_PROCESSES=4          four server processes on this machine (ports ENV_PORT..ENV_PORT+3)
#   ENV_SERVERS_PER_NODE=2   two servers on every node of the Ray cluster (shopsimrl env ray-serve;
#                            needs shopsimrl[ray] and, as they bind the nodes' IPs, SHOPSIM_ENV_TOKEN_FILE)
# Every other knob is documented in run_shopsimrl_slime.sh and docs/slime.md.
#
#   DRY_RUN=1 scripts/run_full_train.sh   # print the env server and training commands
#   SELECTION=skip WAVES=adaptive scripts/run_full_train.sh   # docs/selection.md
set -euo pipefail

HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"

: "${SHOPSIMRL_PYTHON:=python3}"
: "${DRY_RUN:=0}"
# The knobs' defaults (ROLLOUT_BATCH_SIZE, ..., this run's OVER_SAMPLING_BATCH_SIZE and GLOBAL_BATCH_SIZE,
# ENV_HOST, ENV_PORT, ENV_SLOTS, RUN_DIR) are defined once, in Python; print them with
#   shopsimrl launch --print-defaults --full-run
defaults=$("$SHOPSIMRL_PYTHON" -m shopsimrl.slime.launch --print-defaults --full-run)
eval "$defaults"
# This script's own knobs (no other place reads them):
: "${ENV_PROCESSES:=1}"
: "${ENV_SERVERS_PER_NODE:=0}"
: "${ENV_WAIT_SECONDS:=120}"

token=()
if [[ -n "$SHOPSIM_ENV_TOKEN_FILE" ]]; then
    token=(--token-file "$SHOPSIM_ENV_TOKEN_FILE")
fi
URLS_FILE="$RUN_DIR/env_urls.txt"
if ((ENV_SERVERS_PER_NODE > 0)); then
    # Each server binds its node's IP; ray-serve writes the URL list once every server is up.
    serve=("$SHOPSIMRL_PYTHON" -m shopsimrl.cli env ray-serve --per-node "$ENV_SERVERS_PER_NODE" --port "$ENV_PORT"
           --slots "$ENV_SLOTS" --urls-file "$URLS_FILE" "${token[@]}")
    : "${SHOPSIM_ENV_URL:=http://127.0.0.1:$ENV_PORT}"  # dry run only: the real list comes from $URLS_FILE
else
    serve=("$SHOPSIMRL_PYTHON" -m shopsimrl.cli env serve --host "$ENV_HOST" --port "$ENV_PORT" --slots "$ENV_SLOTS")
    if ((ENV_PROCESSES > 1)); then
        serve+=(--processes "$ENV_PROCESSES")
    fi
    serve+=("${token[@]}")
    if [[ -z "${SHOPSIM_ENV_URL:-}" ]]; then
        urls=()
        for ((i = 0; i < ENV_PROCESSES; i++)); do
            urls+=("http://$ENV_HOST:$((ENV_PORT + i))")
        done
        SHOPSIM_ENV_URL=$(IFS=,; echo "${urls[*]}")
    fi
fi
export SHOPSIM_ENV_URL SHOPSIMRL_PYTHON DRY_RUN

if [[ "$DRY_RUN" == 1 ]]; then
    printf '%q ' "${serve[@]}"
    printf '&\n'
    exec "$HERE/run_shopsimrl_slime.sh"
fi

command -v curl >/dev/null || { echo "run_full_train.sh: curl is needed to wait for the env server" >&2; exit 2; }
mkdir -p "$RUN_DIR"
rm -f "$URLS_FILE"
ENV_LOG="$RUN_DIR/env_server.log"
ENV_PID=""

stop_env() {
    if [[ -n "$ENV_PID" ]] && kill -0 "$ENV_PID" 2>/dev/null; then
        echo "run_full_train.sh: stopping the env server (pid $ENV_PID)" >&2
        kill "$ENV_PID" 2>/dev/null || true
        wait "$ENV_PID" 2>/dev/null || true
    fi
}
trap stop_env EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"${serve[@]}" >"$ENV_LOG" 2>&1 &
ENV_PID=$!
echo "run_full_train.sh: env server pid $ENV_PID, log $ENV_LOG" >&2

deadline=$((SECONDS + ENV_WAIT_SECONDS))
check_alive() {
    if ! kill -0 "$ENV_PID" 2>/dev/null; then
        echo "run_full_train.sh: the env server exited before answering $1; last lines of $ENV_LOG:" >&2
        tail -n 20 "$ENV_LOG" >&2 || true
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "run_full_train.sh: $1 did not answer within ENV_WAIT_SECONDS=$ENV_WAIT_SECONDS; see $ENV_LOG" >&2
        exit 1
    fi
}
if ((ENV_SERVERS_PER_NODE > 0)); then
    until [[ -s "$URLS_FILE" ]]; do
        check_alive "ray-serve (its URL list $URLS_FILE)"
        sleep 1
    done
    SHOPSIM_ENV_URL=$(<"$URLS_FILE")
    export SHOPSIM_ENV_URL
fi
IFS=, read -r -a env_urls <<<"$SHOPSIM_ENV_URL"
for url in "${env_urls[@]}"; do
    until curl -fsS -o /dev/null --max-time 2 "$url/healthz"; do
        check_alive "$url/healthz"
        sleep 1
    done
done
echo "run_full_train.sh: env server ready at $SHOPSIM_ENV_URL" >&2

"$HERE/run_shopsimrl_slime.sh"
