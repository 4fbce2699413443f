"""``shopsimrl rollout``: dynamic-sampling rollout steps on ShopSim, with outputs under runs/<name>/.

Exit codes: 0 done; 2 refused before any work (bad knobs or options, too few
tasks, W&B missing, run folder in use or taken); 3 the consecutive
technical-failure stop fired (the message names the trace folder); 130 / 143
interrupted by SIGINT / SIGTERM (the step is aborted, its env leases released);
1 anything else (a disk that filled up is reported as such).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import logging
import math
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.env.defaults import DEFAULT_CLIENT_TIMEOUT, DEFAULT_PRODUCTS
from shopsimrl.env.defaults import DEFAULT_SEED as DEFAULT_CATALOG_SEED
from shopsimrl.env.types import EnvError
from shopsimrl.rollout.defaults import DEFAULT_EPISODE_CONCURRENCY, DEFAULT_OUT, DEFAULT_SEED, DEFAULT_STEPS
from shopsimrl.sampling import KnobError, SamplingKnobs, TooManyTechnicalFailures
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, DEFAULT_WAVES, WAVE_MODES
from shopsimrl.sampling.knobs import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
)
from shopsimrl.sampling.selector import DEFAULT_STRATEGY, STRATEGIES

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_TOO_MANY_TECHNICAL_FAILURES = 3
CLEANUP_SECONDS = 8.0  # after a signal: how long env releases may keep retrying (the exit follows within 10 s)

IN_PROCESS = "inprocess"


class UsageError(ValueError):
    """An option combination refused before any work; the message says what to change."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag, still accepted for one release: it sets the new flag's value and says on
    stderr which spelling to use instead.  Hidden from ``--help``."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _stderr(f"{parser.prog}: {option_string} is deprecated and will be removed in the next release: "
                f"use {self.replacement}")
        setattr(namespace, self.dest, values)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from shopsimrl.agent.defaults import DEFAULT_MAX_TURNS

    p = subparsers.add_parser(
        "rollout",
        help="dynamic-sampling rollout steps (the main job)",
        description="Run rollout steps: waves of groups of sibling episodes, filtered by dynamic sampling "
        "until rollout_batch_size groups are kept; outputs go to OUT/NAME/step-<k>/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    knobs = p.add_argument_group("dynamic-sampling knobs (docs/dynamic-sampling.md §1)")
    knobs.add_argument("--rollout-batch-size", type=int, default=DEFAULT_ROLLOUT_BATCH_SIZE, help="groups kept per step")
    knobs.add_argument("--n-samples-per-prompt", type=int, default=DEFAULT_N_SAMPLES_PER_PROMPT, help="siblings per group")
    knobs.add_argument("--over-sampling-batch-size", type=int, default=DEFAULT_OVER_SAMPLING_BATCH_SIZE,
                       help="groups submitted per wave")
    knobs.add_argument("--global-batch-size", type=int, default=DEFAULT_GLOBAL_BATCH_SIZE,
                       help="episodes per optimizer update")
    knobs.add_argument("--max-consecutive-failed-groups", type=int, default=DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
                       help="technical groups in a row that stop the run")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="rollout steps")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED, help="task order, episode seeds and fault injection")
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    run.add_argument("--name", default=None,
                     help="run name, a plain folder name (default: a timestamp and a random suffix)")
    run.add_argument("--overwrite", action="store_true", help="replace OUT/NAME if it holds a finished run")
    run.add_argument("--env-timeout", type=float, default=DEFAULT_CLIENT_TIMEOUT,
                     help="seconds per env server request before it counts as a technical failure")
    run.add_argument("--episode-concurrency", type=int, default=DEFAULT_EPISODE_CONCURRENCY,
                     help="episodes running at once, over all groups")
    run.add_argument("--max-turns", type=int, default=DEFAULT_MAX_TURNS,
                     help="turns per episode (a turn is one policy reply); the episode then ends as action_limit")
    run.add_argument("--max-steps", type=int, dest="max_turns", action=DeprecatedFlag, replacement="--max-turns")
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
                     help="adaptive waves: expected informative groups kept in flight above the number missing; "
                     "negative keeps fewer (never fewer groups than are missing), so the fallback keeps more "
                     "zero-spread groups and fewer episodes are generated (default %(default)s)")
    sel.add_argument("--learning", action="store_true",
                     help="heuristic policy: grow more consistent on each task it trains on with spread, as a "
                     "trained model does (the zero-spread share rises over steps)")
    sel.add_argument("--no-timeline", dest="timeline", action="store_false",
                     help="do not draw each step's wave_timeline.png")
    env = p.add_argument_group("environment")
    env.add_argument("--env", default=IN_PROCESS,
                     help=f"'{IN_PROCESS}', the URL of a ShopSim env server (http://host:port), or several URLs "
                          "separated by commas (episodes go to the server with the most free slots)")
    env.add_argument("--env-token-file", default=None,
                     help="file holding the env servers' shared token (default: $SHOPSIM_ENV_TOKEN or "
                          "$SHOPSIM_ENV_TOKEN_FILE, if set)")
    env.add_argument("--products", type=int, default=DEFAULT_PRODUCTS, help="catalog size of the in-process env")
    env.add_argument("--catalog-seed", type=int, default=DEFAULT_CATALOG_SEED, help="catalog seed of the in-process env")
    pol = p.add_argument_group("policy")
    pol.add_argument("--policy", choices=("heuristic", "openai"), default="heuristic")
    pol.add_argument("--openai-base-url", default=None, help="OpenAI-compatible server (openai policy)")
    pol.add_argument("--openai-model", default=None, help="model name (openai policy)")
    pol.add_argument("--openai-api-key-env", default=None, help="environment variable holding the API key")
    pol.add_argument("--temperature", type=float, default=None)
    pol.add_argument("--max-tokens", type=int, default=None, help="completion tokens per turn")
    pol.add_argument("--request-timeout", type=float, default=None,
                     help="seconds for a whole request, the complete answer included (openai policy)")
    pol.add_argument("--top-p", type=float, default=None, help="nucleus sampling (openai policy)")
    pol.add_argument("--send-seed", action="store_true", default=None,
                     help="send a sampling seed per request, derived from the episode seed (itself from --seed) and "
                          "the turn, so a server that honours seeds samples reproducibly (openai policy)")
    pol.add_argument("--extra-body", default=None, metavar="JSON",
                     help="JSON object merged into each request body, e.g. "
                          "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}' (openai policy)")
    pol.add_argument("--system-prompt", type=Path, default=None, metavar="FILE",
                     help="file holding the system prompt (default: the built-in one; openai policy)")
    pol.add_argument("--max-context-tokens", type=int, default=None,
                     help="prompt + completion tokens an episode may reach; beyond it the episode ends as "
                          "generation_length before the server refuses (openai policy)")
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
    "top_p": "top_p",
    "send_seed": "send_seed",
    "extra_body": "extra_body",
    "system_prompt": "system_prompt",
    "max_context_tokens": "max_context_tokens",
}


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The policy's constructor options (only those given); ``--temperature`` serves both policies."""
    given = {option: getattr(args, flag) for flag, option in _OPENAI_ONLY.items() if getattr(args, flag) is not None}
    if given and args.policy != "openai":
        flags = ", ".join("--" + f.replace("_", "-") for f, o in _OPENAI_ONLY.items() if o in given)
        raise UsageError(f"{flags}: used only by --policy openai")
    if "extra_body" in given:
        given["extra_body"] = _json_object(given["extra_body"], "--extra-body")
    if "system_prompt" in given:
        given["system_prompt"] = _read_prompt(given["system_prompt"])
    if args.temperature is not None:
        if not math.isfinite(args.temperature) or args.temperature < 0:
            raise UsageError(f"--temperature must be a finite number >= 0, got {args.temperature}")
        given["temperature"] = args.temperature
    return given


def _json_object(text: str, flag: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object such as '{{\"top_k\": 20}}', got {text!r}")
    return value


def _read_prompt(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--system-prompt: cannot read {path}: {exc}") from exc
    if not text.strip():
        raise UsageError(f"--system-prompt: {path} is empty")
    return text


def check_options(args: argparse.Namespace) -> None:
    checks = (
        (args.steps >= 1, f"--steps must be >= 1, got {args.steps}"),
        (args.episode_concurrency >= 1, f"--episode-concurrency must be >= 1, got {args.episode_concurrency}"),
        (args.max_turns >= 1, f"--max-turns (turns per episode) must be >= 1, got {args.max_turns}"),
        (0.0 <= args.fault_rate <= 1.0, f"--fault-rate is a probability within [0, 1], got {args.fault_rate}"),
        (args.products >= 1, f"--products must be >= 1, got {args.products}"),
        (math.isfinite(args.env_timeout) and args.env_timeout > 0,
         f"--env-timeout must be a number of seconds > 0, got {args.env_timeout}"),
        (args.env == IN_PROCESS or all(u.strip().startswith(("http://", "https://")) for u in args.env.split(",")),
         f"--env must be '{IN_PROCESS}' or http(s):// URLs of env servers (comma-separated), got {args.env!r}"),
        (math.isfinite(args.cushion), f"--cushion is a finite number of groups, got {args.cushion}"),
        (not args.learning or args.policy == "heuristic",
         "--learning is a mode of the heuristic policy (a real model learns in the trainer): drop it or use "
         "--policy heuristic"),
    )
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    if args.env != IN_PROCESS:
        from shopsimrl.env.pool import parse_env_urls

        try:
            parse_env_urls(args.env)
        except ValueError as exc:
            raise UsageError(f"--env must be '{IN_PROCESS}' or http(s):// URLs of env servers separated by "
                             f"commas: {exc}") from exc
    elif args.env_token_file is not None:
        raise UsageError("--env-token-file: used only with --env URL")


def handle(args: argparse.Namespace) -> int:
    """Validate everything cheap first (exit 2), then run."""
    try:
        knobs = knobs_from_args(args)
        check_options(args)
        options = policy_options(args)
        token = None
        if args.env != IN_PROCESS:
            from shopsimrl.env.auth import load_token

            token = load_token(args.env_token_file)  # TokenError is a ValueError: refused below
        from shopsimrl.rollout.outputs import check_out_dir, check_run_dir

        check_out_dir(args.out)
        if args.name is not None:
            check_run_dir(args.out, args.name, overwrite=args.overwrite)
        if args.wandb:
            from shopsimrl.rollout.tracking import import_wandb

            import_wandb()
    except (KnobError, ValueError, RuntimeError) as exc:  # knobs, options, run folder, W&B missing
        _stderr(f"shopsimrl rollout: refused: {exc}")
        return EXIT_REFUSED
    return asyncio.run(_interruptible(args, knobs, options, token))


class _Interrupts:
    """SIGINT / SIGTERM become a cancellation of the run: the step aborts and every env lease is released.

    The first signal cancels the run and gives env releases ``CLEANUP_SECONDS`` to finish; a second one
    during that cleanup does not cut it short, it only shortens the releases' remaining time to 2 s.
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.signal: signal.Signals | None = None
        self.env: Any = None
        self.step_events: Path | None = None  # the interrupted step's events.jsonl, for the message
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> _Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._fire, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)

    def _fire(self, sig: signal.Signals) -> None:
        hurry = getattr(self.env, "hurry", None)
        if self.signal is None:
            self.signal = sig
            if hurry is not None:
                hurry(CLEANUP_SECONDS)
            # one line at the end sums up the releases that failed (each trace keeps its release_error)
            logging.getLogger("shopsimrl.agent").setLevel(logging.ERROR)
            self.task.cancel(sig.name)
        elif hurry is not None:
            hurry(2.0)


async def _interruptible(args: argparse.Namespace, knobs: SamplingKnobs, options: dict[str, Any],
                         token: str | None) -> int:
    task = asyncio.current_task()
    assert task is not None
    with _Interrupts(task) as interrupts:
        try:
            return await _run(args, knobs, options, interrupts, token)
        except asyncio.CancelledError:
            if interrupts.signal is None:
                raise
            where = f"; partial step events in {interrupts.step_events}" if interrupts.step_events else ""
            lost = int(getattr(interrupts.env, "unconfirmed_releases", 0))
            leases = (f"{lost} env leases could not be released (the env server did not answer; it reclaims "
                      f"them after its --lease-ttl)" if lost else "its env leases released")
            _stderr(f"shopsimrl rollout: interrupted by {interrupts.signal.name}: the step was aborted and "
                    f"{leases}{where}")
            return 128 + int(interrupts.signal)


async def _open_env(args: argparse.Namespace, token: str | None = None) -> Any:
    """The env client: in-process ShopSim (catalog built on first use, then cached), an env server's URL,
    or an :class:`~shopsimrl.env.pool.EnvPool` over several."""
    if args.env != IN_PROCESS:
        from shopsimrl.env.pool import make_env_client

        return make_env_client(args.env, token=token, timeout=args.env_timeout)
    from shopsimrl.env import InProcessEnvClient, catalog_path, load_env

    if not catalog_path(args.products, args.catalog_seed).exists():
        print(f"building the ShopSim catalog ({args.products} products, seed {args.catalog_seed}); "
              f"cached for later runs", flush=True)
    # one env slot per concurrent episode, so a reset never waits for a slot
    env = await asyncio.to_thread(load_env, args.products, args.catalog_seed, slots=args.episode_concurrency)
    return InProcessEnvClient(env, owns_env=True)


async def _run(args: argparse.Namespace, knobs: SamplingKnobs, options: dict[str, Any],
               interrupts: _Interrupts, token: str | None = None) -> int:
    from rich.console import Console

    from shopsimrl.agent import make_policy
    from shopsimrl.rollout.clusters import task_categories
    from shopsimrl.rollout.faults import FaultInjectingEnv
    from shopsimrl.rollout.outputs import RunDirError, prepare_run_dir
    from shopsimrl.rollout.run import RolloutConfig, default_run_name, run_rollout
    from shopsimrl.rollout.runner import agent_runner
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
    env = await _open_env(args, token)
    interrupts.env = env
    logger = None
    paths = None
    code = EXIT_FAILED
    try:
        if hasattr(env, "healthz"):  # env server(s): reachable, the same shop, enough slots for our episodes?
            several = hasattr(env, "status")
            try:
                health = await env.healthz()
                slots, free = int(health["slots"]), int(health.get("free_slots", health["slots"]))
            except EnvError as exc:
                reason = str(exc) if several else f"the env server at {args.env} does not answer /healthz: {exc}"
                _stderr(f"shopsimrl rollout: refused: {reason}")
                return EXIT_REFUSED
            where = f"the {len(env.status())} env servers" if several else "the env server"
            if free < 1:
                _stderr(f"shopsimrl rollout: refused: all {slots} slots of {where} at {args.env} are leased "
                        f"by other clients: wait for them (an abandoned lease is reclaimed after the server's "
                        f"--lease-ttl) or start a server with more --slots")
                return EXIT_REFUSED
            if config.episode_concurrency > free:
                taken = f" ({slots - free} are leased by other clients)" if free < slots else ""
                _stderr(f"shopsimrl rollout: {where} {'have' if several else 'has'} {free} free slots of {slots}{taken}: running at "
                        f"most {free} episodes at once instead of --episode-concurrency "
                        f"{config.episode_concurrency} (more would only wait for a slot and time out)")
                config = dataclasses.replace(config, episode_concurrency=free)
        try:
            task_ids = await env.list_tasks("train")
        except EnvError as exc:  # e.g. a server that refuses our token (its /healthz is open)
            _stderr(f"shopsimrl rollout: refused: the env server at {args.env} refuses to list tasks: "
                    f"[{exc.code}] {exc}")
            return EXIT_REFUSED
        if len(task_ids) < knobs.over_sampling_batch_size:
            _stderr(f"shopsimrl rollout: refused: the train split has {len(task_ids)} tasks but a wave submits "
                      f"{knobs.over_sampling_batch_size} distinct ones: use a larger catalog (--products) or a "
                      f"smaller --over-sampling-batch-size")
            return EXIT_REFUSED
        client = FaultInjectingEnv(env, args.fault_rate, seed=args.seed) if args.fault_rate > 0 else env
        runner = agent_runner(client, policy, max_turns=args.max_turns)
        extra = {"policy": args.policy, "policy_options": options, "env": args.env, "products": args.products,
                 "catalog_seed": args.catalog_seed, "fault_rate": args.fault_rate, "max_turns": args.max_turns,
                 "learning": args.learning}
        try:
            paths = prepare_run_dir(args.out, name, overwrite=args.overwrite)
        except (RunDirError, OSError) as exc:
            _stderr(f"shopsimrl rollout: refused: {exc}")
            return EXIT_REFUSED
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
                clusters = await task_categories(env, task_ids) if config.selection != "seed" or \
                    config.waves == "adaptive" else None  # ShopSim's categories: the selector's clusters
                result = await run_rollout(config, runner, task_ids, observer=view,
                                           on_step=logger.log if logger else None, extra_config=extra,
                                           paths=paths, learner=policy.learn if args.learning else None,
                                           clusters=clusters)
            except TooManyTechnicalFailures as exc:
                step_dir = Path(exc.trace_dir or paths.root)
                _stderr(f"shopsimrl rollout: stopped: {exc}\ntraces: {step_dir / 'traces'}\n"
                        f"triage: {step_dir / 'triage'}")
                code = EXIT_TOO_MANY_TECHNICAL_FAILURES
                return code
            except asyncio.CancelledError:
                interrupts.step_events = _last_step_events(paths.root)
                raise
            except OSError as exc:
                step = _last_step_events(paths.root)
                what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "an output could not be written"
                _stderr(f"shopsimrl rollout: stopped: {what} ({exc.strerror or exc}: {exc.filename or '?'}); "
                        f"the step in {step.parent if step else paths.root} is incomplete (no metrics.json), "
                        f"earlier steps are whole. Free space (or fix the folder) and run again.")
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
        if paths is not None:
            paths.unlock()


def _last_step_events(root: Path) -> Path | None:
    """The newest step folder's events.jsonl (the step a stop or an interrupt cut short)."""
    steps = sorted((p for p in root.glob("step-*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
    return steps[-1] / "events.jsonl" if steps else None


def main(argv: Sequence[str] | None = None) -> int:
    """``shopsimrl rollout ...`` without the dispatcher (``argv`` excludes the word ``rollout``)."""
    parser = argparse.ArgumentParser(prog="shopsimrl")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rollout", *(argv or [])])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
