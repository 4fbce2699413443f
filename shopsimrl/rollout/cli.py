"""``shopsimrl rollout``: dynamic-sampling rollout steps on ShopSim, with outputs under runs/<name>/.

Exit codes: 0 done; 2 refused before any work (bad knobs or options, too few
tasks, W&B missing); 3 the consecutive technical-failure stop fired (the message
names the trace folder); 1 anything else.
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.env.types import EnvError
from shopsimrl.sampling import KnobError, SamplingKnobs, TooManyTechnicalFailures
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, DEFAULT_WAVES, WAVE_MODES
from shopsimrl.sampling.selector import DEFAULT_STRATEGY, STRATEGIES
from shopsimrl.sampling.knobs import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_TOO_MANY_TECHNICAL_FAILURES = 3

IN_PROCESS = "inprocess"
DEFAULT_PRODUCTS = 20_000  # the env's default catalog (shopsimrl.env.build.DEFAULT_PRODUCTS)
DEFAULT_CATALOG_SEED = 0


class UsageError(ValueError):
    """An option combination refused before any work; the message says what to change."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from shopsimrl.rollout.run import DEFAULT_EPISODE_CONCURRENCY
    from shopsimrl.rollout.runner import DEFAULT_MAX_TURNS

    p = subparsers.add_parser(
        "rollout",
        help="dynamic-sampling rollout steps (the main job)",
        description="Run rollout steps: waves of groups of sibling episodes, filtered by dynamic sampling "
        "until rollout_batch_size groups are kept; outputs go to OUT/NAME/step-<k>/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    knobs = p.add_argument_group("dynamic-sampling knobs (SPEC §1)")
    knobs.add_argument("--rollout-batch-size", type=int, default=DEFAULT_ROLLOUT_BATCH_SIZE, help="groups kept per step")
    knobs.add_argument("--n-samples-per-prompt", type=int, default=DEFAULT_N_SAMPLES_PER_PROMPT, help="siblings per group")
    knobs.add_argument("--over-sampling-batch-size", type=int, default=DEFAULT_OVER_SAMPLING_BATCH_SIZE,
                       help="groups submitted per wave")
    knobs.add_argument("--global-batch-size", type=int, default=DEFAULT_GLOBAL_BATCH_SIZE,
                       help="episodes per optimizer update")
    knobs.add_argument("--max-consecutive-failed-groups", type=int, default=DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
                       help="technical groups in a row that stop the run")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int, default=1, help="rollout steps")
    run.add_argument("--seed", type=int, default=0, help="task order, episode seeds and fault injection")
    run.add_argument("--out", type=Path, default=Path("runs"), help="output folder")
    run.add_argument("--name", default=None, help="run name (default: a timestamp); OUT/NAME is replaced if it holds a previous run")
    run.add_argument("--episode-concurrency", type=int, default=DEFAULT_EPISODE_CONCURRENCY,
                     help="episodes running at once, over all groups")
    run.add_argument("--max-steps", type=int, default=DEFAULT_MAX_TURNS, help="turns per episode")
    run.add_argument("--fault-rate", type=float, default=0.0,
                     help="probability that an env reset/step raises (injected technical failures)")
    run.add_argument("--view", choices=("auto", "live", "plain"), default="auto",
                     help="live view on a terminal, plain log lines otherwise")
    sel = p.add_argument_group("prompt selection", "which prompts to start and how many (docs/efficient-sampling.md)")
    sel.add_argument("--selection", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                     help="seed: the faithful shuffled-epoch order; informative: skip prompts predicted to give "
                     "zero reward spread (re-checked, never lost)")
    sel.add_argument("--waves", choices=WAVE_MODES, default=DEFAULT_WAVES,
                     help="fixed: slime's whole waves; adaptive: keep the predicted number of groups in flight to fill the "
                     "batch with informative groups plus --cushion, topped up after each completion")
    sel.add_argument("--cushion", type=float, default=DEFAULT_CUSHION,
                     help="adaptive waves: expected informative groups kept in flight above the number missing")
    sel.add_argument("--learning", action="store_true",
                     help="heuristic policy: grow more consistent on each task it trains on with spread, as a "
                     "trained model does (the zero-spread share rises over steps)")
    sel.add_argument("--no-timeline", dest="timeline", action="store_false",
                     help="do not draw each step's wave_timeline.png")
    env = p.add_argument_group("environment")
    env.add_argument("--env", default=IN_PROCESS, help=f"'{IN_PROCESS}' or the URL of a ShopSim env server (http://host:port)")
    env.add_argument("--products", type=int, default=DEFAULT_PRODUCTS, help="catalog size of the in-process env")
    env.add_argument("--catalog-seed", type=int, default=DEFAULT_CATALOG_SEED, help="catalog seed of the in-process env")
    pol = p.add_argument_group("policy")
    pol.add_argument("--policy", choices=("heuristic", "openai"), default="heuristic")
    pol.add_argument("--openai-base-url", default=None, help="OpenAI-compatible server (openai policy)")
    pol.add_argument("--openai-model", default=None, help="model name (openai policy)")
    pol.add_argument("--openai-api-key-env", default=None, help="environment variable holding the API key")
    pol.add_argument("--temperature", type=float, default=None)
    pol.add_argument("--max-tokens", type=int, default=None, help="completion tokens per turn")
    pol.add_argument("--request-timeout", type=float, default=None, help="seconds per request")
    wb = p.add_argument_group("Weights & Biases (optional)")
    wb.add_argument("--wandb", action="store_true", help="log each step's metrics to W&B")
    wb.add_argument("--wandb-mode", choices=("online", "offline", "disabled"), default="online")
    wb.add_argument("--wandb-project", default="shopsimrl")
    wb.add_argument("--wandb-group", default=None)
    wb.add_argument("--wandb-dir", type=Path, default=None, help="W&B files (default: OUT/NAME)")
    p.set_defaults(handler=handle)


def knobs_from_args(args: argparse.Namespace) -> SamplingKnobs:
    return SamplingKnobs(
        rollout_batch_size=args.rollout_batch_size,
        n_samples_per_prompt=args.n_samples_per_prompt,
        over_sampling_batch_size=args.over_sampling_batch_size,
        global_batch_size=args.global_batch_size,
        max_consecutive_failed_groups=args.max_consecutive_failed_groups,
    )


_OPENAI_ONLY = {
    "openai_base_url": "base_url",
    "openai_model": "model",
    "openai_api_key_env": "api_key_env",
    "max_tokens": "max_tokens",
    "request_timeout": "timeout",
}


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The policy's constructor options (only those given); ``--temperature`` serves both policies."""
    given = {option: getattr(args, flag) for flag, option in _OPENAI_ONLY.items() if getattr(args, flag) is not None}
    if given and args.policy != "openai":
        flags = ", ".join("--" + f.replace("_", "-") for f, o in _OPENAI_ONLY.items() if o in given)
        raise UsageError(f"{flags}: used only by --policy openai")
    if args.temperature is not None:
        given["temperature"] = args.temperature
    return given


def check_options(args: argparse.Namespace) -> None:
    checks = (
        (args.steps >= 1, f"--steps must be >= 1, got {args.steps}"),
        (args.episode_concurrency >= 1, f"--episode-concurrency must be >= 1, got {args.episode_concurrency}"),
        (args.max_steps >= 1, f"--max-steps (turns per episode) must be >= 1, got {args.max_steps}"),
        (0.0 <= args.fault_rate <= 1.0, f"--fault-rate is a probability within [0, 1], got {args.fault_rate}"),
        (args.products >= 1, f"--products must be >= 1, got {args.products}"),
        (0.0 <= args.cushion < float("inf"), f"--cushion is a number of groups >= 0, got {args.cushion}"),
        (not args.learning or args.policy == "heuristic",
         "--learning is a mode of the heuristic policy (a real model learns in the trainer): drop it or use "
         "--policy heuristic"),
        (args.env == IN_PROCESS or args.env.startswith(("http://", "https://")),
         f"--env must be '{IN_PROCESS}' or an http(s):// URL of an env server, got {args.env!r}"),
    )
    for ok, message in checks:
        if not ok:
            raise UsageError(message)


def handle(args: argparse.Namespace) -> int:
    """Validate everything cheap first (exit 2), then run."""
    try:
        knobs = knobs_from_args(args)
        check_options(args)
        options = policy_options(args)
        if args.name is not None:
            from shopsimrl.rollout.outputs import check_run_dir

            check_run_dir(args.out, args.name)
        if args.wandb:
            from shopsimrl.rollout.tracking import import_wandb

            import_wandb()
    except (KnobError, ValueError, RuntimeError) as exc:  # knobs, options, run folder, W&B missing
        _stderr(f"shopsimrl rollout: refused: {exc}")
        return EXIT_REFUSED
    return asyncio.run(_run(args, knobs, options))


async def _open_env(args: argparse.Namespace) -> Any:
    """The env client: in-process ShopSim (catalog built on first use, then cached) or an env server's URL."""
    if args.env != IN_PROCESS:
        from shopsimrl.env import HttpEnvClient

        return HttpEnvClient(args.env)
    from shopsimrl.env import InProcessEnvClient, catalog_path, load_env

    if not catalog_path(args.products, args.catalog_seed).exists():
        print(f"building the ShopSim catalog ({args.products} products, seed {args.catalog_seed}); "
              f"cached for later runs", flush=True)
    # one env slot per concurrent episode, so a reset never waits for a slot
    env = await asyncio.to_thread(load_env, args.products, args.catalog_seed, slots=args.episode_concurrency)
    return InProcessEnvClient(env, owns_env=True)


async def _run(args: argparse.Namespace, knobs: SamplingKnobs, options: dict[str, Any]) -> int:
    from rich.console import Console

    from shopsimrl.agent import make_policy
    from shopsimrl.rollout.faults import FaultInjectingEnv
    from shopsimrl.rollout.run import RolloutConfig, default_run_name, run_rollout
    from shopsimrl.rollout.runner import agent_runner
    from shopsimrl.rollout.outputs import prepare_run_dir
    from shopsimrl.rollout.view import RolloutView

    try:
        policy = make_policy(args.policy, **({**options, "learning": True} if args.learning else options))
    except (TypeError, ValueError) as exc:
        _stderr(f"shopsimrl rollout: refused: policy {args.policy}: {exc}")
        return EXIT_REFUSED
    name = args.name or default_run_name()
    config = RolloutConfig(knobs=knobs, steps=args.steps, seed=args.seed, out=args.out, name=name,
                           episode_concurrency=args.episode_concurrency, selection=args.selection,
                           waves=args.waves, cushion=args.cushion, timeline=args.timeline)
    console = Console()
    if not console.is_terminal:  # captured output: wide enough for the summary table
        console = Console(width=max(console.width, 150))
    env = await _open_env(args)
    logger = None
    code = EXIT_FAILED
    try:
        if hasattr(env, "healthz"):  # an env server: reachable, and enough slots for our episodes?
            try:
                slots = int((await env.healthz())["slots"])
            except EnvError as exc:
                _stderr(f"shopsimrl rollout: refused: the env server at {args.env} does not answer /healthz: {exc}")
                return EXIT_REFUSED
            if config.episode_concurrency > slots:
                _stderr(f"shopsimrl rollout: the env server has {slots} slots: running at most {slots} episodes at "
                        f"once instead of --episode-concurrency {config.episode_concurrency} (more would only wait "
                        f"for a slot and time out; start the server with --slots to raise it)")
                config = dataclasses.replace(config, episode_concurrency=slots)
        task_ids = await env.list_tasks("train")
        if len(task_ids) < knobs.over_sampling_batch_size:
            _stderr(f"shopsimrl rollout: refused: the train split has {len(task_ids)} tasks but a wave submits "
                      f"{knobs.over_sampling_batch_size} distinct ones: use a larger catalog (--products) or a "
                      f"smaller --over-sampling-batch-size")
            return EXIT_REFUSED
        client = FaultInjectingEnv(env, args.fault_rate, seed=args.seed) if args.fault_rate > 0 else env
        runner = agent_runner(client, policy, max_turns=args.max_steps)
        extra = {"policy": args.policy, "policy_options": options, "env": args.env, "products": args.products,
                 "catalog_seed": args.catalog_seed, "fault_rate": args.fault_rate, "max_turns": args.max_steps,
                 "learning": args.learning}
        paths = prepare_run_dir(args.out, name)
        if args.wandb:
            from shopsimrl.rollout.tracking import WandbLogger

            logger = WandbLogger(project=args.wandb_project, name=name, group=args.wandb_group,
                                 directory=args.wandb_dir or (args.out / name / "wandb"), mode=args.wandb_mode,
                                 config={**config.knobs.as_dict(), **extra, "seed": args.seed})
        live = None if args.view == "auto" else args.view == "live"
        console.print(f"shopsimrl rollout: run {name} -> {args.out / name}  ({len(task_ids)} train tasks, "
                      f"policy {args.policy}, env {args.env})", markup=False, highlight=False)
        with RolloutView(console, live=live) as view:
            try:
                result = await run_rollout(config, runner, task_ids, observer=view,
                                           on_step=logger.log if logger else None, extra_config=extra,
                                           paths=paths, learner=policy.learn if args.learning else None)
            except TooManyTechnicalFailures as exc:
                _stderr(f"shopsimrl rollout: stopped: {exc}\ntraces: {exc.trace_dir}")
                code = EXIT_TOO_MANY_TECHNICAL_FAILURES
                return code
            view.summary(result.reports)
        console.print(f"outputs: {result.paths.root}", markup=False, highlight=False)
        code = EXIT_OK
        return code
    finally:
        if logger is not None:
            logger.finish(exit_code=code)
        aclose = getattr(policy, "aclose", None)
        if aclose is not None:
            await aclose()
        await env.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """``shopsimrl rollout ...`` without the dispatcher (``argv`` excludes the word ``rollout``)."""
    parser = argparse.ArgumentParser(prog="shopsimrl")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rollout", *(argv or [])])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
