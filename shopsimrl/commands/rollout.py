"""``shopsimrl rollout``: dynamic-sampling rollout steps on ShopSim, with outputs under runs/<name>/.

Exit codes: 0 done; 2 refused before any work (bad knobs or options, too few
tasks, W&B missing, run folder in use or taken); 3 the consecutive
technical-failure stop fired (the message names the trace folder); 130 / 143
interrupted by SIGINT / SIGTERM (the step is aborted, its env leases released);
1 anything else (a disk that filled up is reported as such).

This module holds the options and the checks before any work; ``rollout_options`` the checks
of several options at once, ``rollout_stages`` the run itself.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from shopsimrl.argtypes import (
    DeprecatedFlag,
    OneLineParser,
    folder,
    in_file,
    int_range,
    number,
    one_of,
    server_url,
    server_urls,
)
from shopsimrl.commands.clock_options import add_arguments as add_clock_arguments
from shopsimrl.commands.dispatch import handled_by, run
from shopsimrl.commands.limits import MAX_STEPS, WHY_STEPS
from shopsimrl.commands.rollout_options import IN_PROCESS, prompt_labels
from shopsimrl.defaults import (
    DEFAULT_CATALOG_SEED,
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_CUSHION,
    DEFAULT_EPISODE_CONCURRENCY,
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_MAX_TURNS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_OUT,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_PRODUCTS,
    DEFAULT_ROLLOUT_BATCH_SIZE,
    DEFAULT_SEED,
    DEFAULT_STEPS,
    MAX_EPISODE_CONCURRENCY,
)
from shopsimrl.env.build import MAX_PRODUCTS, MIN_PRODUCTS
from shopsimrl.learn.connect import add_arguments as add_learner_arguments
from shopsimrl.sampling.modes import (
    DEFAULT_SELECTION,
    DEFAULT_SIBLINGS,
    DEFAULT_WAVE_MODE,
    Selection,
    Siblings,
    WaveMode,
)


def _env_option(text: str) -> str:
    """``--env``: the in-process env, or env server URLs (the same server never twice)."""
    return IN_PROCESS if text.strip() == IN_PROCESS else server_urls(text)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "rollout",
        help="dynamic-sampling rollout steps (the main job)",
        description="Run rollout steps: waves of groups of sibling episodes, filtered by dynamic sampling "
        "until rollout_batch_size groups are kept; outputs go to OUT/NAME/step-<k>/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    knobs = p.add_argument_group("dynamic-sampling knobs (docs/dynamic-sampling.md §1)")
    knobs.add_argument("--rollout-batch-size", type=int_range(1), default=DEFAULT_ROLLOUT_BATCH_SIZE, help="groups kept per step")
    knobs.add_argument("--n-samples-per-prompt", type=int_range(1), default=DEFAULT_N_SAMPLES_PER_PROMPT, help="siblings per group")
    knobs.add_argument("--over-sampling-batch-size", type=int_range(1), default=DEFAULT_OVER_SAMPLING_BATCH_SIZE,
                       help="groups submitted per wave")
    knobs.add_argument("--global-batch-size", type=int_range(1), default=DEFAULT_GLOBAL_BATCH_SIZE,
                       help="episodes per optimizer update")
    knobs.add_argument("--max-consecutive-failed-groups", type=int_range(1), default=DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
                       help="technical groups in a row that stop the run")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int_range(1, MAX_STEPS, why_high=WHY_STEPS), default=DEFAULT_STEPS, help="rollout steps")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED, help="task order, episode seeds and fault injection")
    run.add_argument("--out", type=folder, default=DEFAULT_OUT, help="output folder")
    run.add_argument("--name", default=None,
                     help="run name, a plain folder name (default: a timestamp and a random suffix)")
    run.add_argument("--overwrite", action="store_true", help="replace OUT/NAME if it holds a finished run")
    run.add_argument("--env-timeout", type=number(above=0), default=DEFAULT_CLIENT_TIMEOUT,
                     help="seconds per env server request before it counts as a technical failure")
    run.add_argument("--episode-concurrency", type=int_range(1, MAX_EPISODE_CONCURRENCY), default=DEFAULT_EPISODE_CONCURRENCY,
                     help="episodes running at once, over all groups")
    run.add_argument("--max-turns", type=int_range(1), default=DEFAULT_MAX_TURNS,
                     help="turns per episode (a turn is one policy reply); the episode then ends as action_limit")
    run.add_argument("--max-steps", type=int, dest="max_turns", action=DeprecatedFlag, replacement="--max-turns")
    run.add_argument("--fault-rate", type=number(0, 1), default=0.0,
                     help="probability that an env reset/step raises (injected technical failures)")
    run.add_argument("--view", choices=("auto", "live", "plain"), default="auto",
                     help="live view on a terminal, plain log lines otherwise")
    sel = p.add_argument_group("prompt selection", "which prompts to start and how many (docs/selection.md)")
    sel.add_argument("--selection", **one_of(Selection), default=DEFAULT_SELECTION,
                     help="seed: the faithful shuffled-epoch order; skip (formerly informative): the same order, skipping prompts "
                     "on a run of zero-spread groups (at most once per epoch pass, re-tried at a floor); spread: the "
                     "prompts predicted nearest 50%% pass rate (concentrates; measured to train a worse policy); "
                     "forecast: skip, and never-seen prompts predicted from their text and labels not to spread "
                     "(docs/forecast.md)")
    sel.add_argument("--prompt-labels", type=prompt_labels, default=None, metavar="FILE",
                     help="forecast rule: a prompt file in `shopsimrl data export`'s format whose text and labels it "
                     "reads over the env's (e.g. a pass rate measured earlier; a numeric label by its decile), as "
                     "slime's data source reads the same file")
    sel.add_argument("--waves", **one_of(WaveMode), default=DEFAULT_WAVE_MODE,
                     help="fixed: slime's whole waves; adaptive: keep the predicted number of groups in flight to fill the "
                     "batch with informative groups plus --cushion, topped up after each completion")
    sel.add_argument("--cushion", type=number(), default=DEFAULT_CUSHION,
                     help="adaptive waves: expected informative groups kept in flight above the number missing; "
                     "negative keeps fewer (never fewer groups than are missing), so the fallback keeps more "
                     "zero-spread groups and fewer episodes are generated (default %(default)s)")
    sel.add_argument("--siblings", **one_of(Siblings), default=DEFAULT_SIBLINGS,
                     help="all: every group starts its n siblings at once (the seed); staged: K first, then the rest, "
                     "or a zero-std drop after K when the seed would drop the group and the prediction says the rest "
                     "would agree too (docs/dynamic-sampling.md R29)")
    sel.add_argument("--stage-size", type=int_range(1), default=None,
                     help="staged siblings: K, the siblings started first (default n_samples_per_prompt // 2)")
    sel.add_argument("--no-timeline", dest="timeline", action="store_false",
                     help="do not draw each step's wave_timeline.png")
    env = p.add_argument_group("environment")
    env.add_argument("--env", default=IN_PROCESS, type=_env_option,
                     help=f"'{IN_PROCESS}', the URL of a ShopSim env server (http://host:port), or several URLs "
                          "separated by commas (episodes go to the server with the most free slots)")
    env.add_argument("--env-token-file", default=None, type=in_file,
                     help="file holding the env servers' shared token (default: $SHOPSIM_ENV_TOKEN or "
                          "$SHOPSIM_ENV_TOKEN_FILE, if set)")
    env.add_argument("--products", type=int_range(MIN_PRODUCTS, MAX_PRODUCTS), default=DEFAULT_PRODUCTS, help="catalog size of the in-process env")
    env.add_argument("--catalog-seed", type=int, default=DEFAULT_CATALOG_SEED, help="catalog seed of the in-process env")
    pol = p.add_argument_group("policy")
    pol.add_argument("--policy", choices=("heuristic", "openai"), default="heuristic")
    pol.add_argument("--openai-base-url", default=None, type=server_url, help="OpenAI-compatible server (openai policy)")
    pol.add_argument("--openai-model", default=None, help="model name (openai policy)")
    pol.add_argument("--action-format", choices=("tools", "constrained", "constrained-words"), default=None,
                     help="'tools' (default): tool calls; 'constrained': each request carries the page's actions as a "
                          "JSON schema and the reply's JSON is the action, for small models; 'constrained-words': the "
                          "same, the search query made of the instruction's words (openai policy)")
    pol.add_argument("--openai-api-key-env", default=None, help="environment variable holding the API key")
    pol.add_argument("--temperature", type=number(0), default=None)
    pol.add_argument("--max-tokens", type=int_range(1), default=None, help="completion tokens per turn")
    pol.add_argument("--request-timeout", type=number(above=0), default=None,
                     help="seconds for a whole request, the complete answer included (openai policy)")
    pol.add_argument("--top-p", type=number(0, 1), default=None, help="nucleus sampling (openai policy)")
    pol.add_argument("--send-seed", action="store_true", default=None,
                     help="send a sampling seed per request, derived from the episode seed (itself from --seed) and "
                          "the turn, so a server that honours seeds samples reproducibly (openai policy)")
    pol.add_argument("--extra-body", default=None, metavar="JSON",
                     help="JSON object merged into each request body, e.g. "
                          "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}' (openai policy)")
    pol.add_argument("--system-prompt", type=in_file, default=None, metavar="FILE",
                     help="file holding the system prompt (default: the built-in one; openai policy)")
    pol.add_argument("--max-context-tokens", type=int_range(1), default=None,
                     help="prompt + completion tokens an episode may reach; beyond it the episode ends as "
                          "generation_length before the server refuses (openai policy)")
    add_learner_arguments(p)  # --learner, --eval-every, --eval-samples, --resume (and the old --learning)
    add_clock_arguments(p)  # --clock, --loop, --tis-cap and the modelled clock's constants
    wb = p.add_argument_group("Weights & Biases (optional)")
    wb.add_argument("--wandb", action="store_true", help="log each step's metrics to W&B")
    wb.add_argument("--wandb-mode", choices=("online", "offline", "disabled"), default="online")
    wb.add_argument("--wandb-project", default="shopsimrl")
    wb.add_argument("--wandb-group", default=None)
    wb.add_argument("--wandb-dir", type=folder, default=None, help="W&B files (default: OUT/NAME)")
    handled_by(p, handle)

def handle(args: argparse.Namespace) -> int:
    """Validate everything cheap first (a refusal: one line, exit 2), then run."""
    # the checks and the run load the rollout, the env and rich: only when the command runs, so --help stays fast
    from shopsimrl.commands.rollout_options import (
        check_options,
        check_policy_server,
        config_from_args,
        knobs_from_args,
        policy_options,
    )
    from shopsimrl.commands.rollout_stages import interruptible
    from shopsimrl.env.auth import load_token
    from shopsimrl.rollout.outputs import check_out_dir, check_run_dir
    from shopsimrl.rollout.tracking import import_wandb

    knobs = knobs_from_args(args)
    config = config_from_args(args, knobs)
    check_options(args)
    options = policy_options(args)
    check_policy_server(args)
    token = None if args.env == IN_PROCESS else load_token(args.env_token_file)  # TokenError: a refusal
    check_out_dir(args.out)
    if args.name is not None:
        check_run_dir(args.out, args.name, overwrite=args.overwrite or args.resume)
    if args.wandb:
        import_wandb()  # WandbUnavailable: a refusal naming the package to install
    return asyncio.run(interruptible(args, config, options, token))


def main(argv: Sequence[str] | None = None) -> int:
    """``shopsimrl rollout ...`` without the dispatcher (``argv`` excludes the word ``rollout``)."""
    parser = OneLineParser(prog="shopsimrl")
    register(parser.add_subparsers(dest="command"))
    return run(parser, ["rollout", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
