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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shopsimrl.argtypes import (
    DeprecatedFlag,
    OneLineParser,
    folder,
    in_file,
    int_range,
    number,
    server_url,
    server_urls,
)
from shopsimrl.env.build import MAX_PRODUCTS, MIN_PRODUCTS
from shopsimrl.env.defaults import DEFAULT_CLIENT_TIMEOUT, DEFAULT_PRODUCTS
from shopsimrl.env.defaults import DEFAULT_SEED as DEFAULT_CATALOG_SEED
from shopsimrl.env.types import EnvClient, EnvError
from shopsimrl.rollout.defaults import (
    DEFAULT_EPISODE_CONCURRENCY,
    DEFAULT_OUT,
    DEFAULT_SEED,
    DEFAULT_STEPS,
    MAX_EPISODE_CONCURRENCY,
)
from shopsimrl.sampling import KnobError, SamplingKnobs, TooManyTechnicalFailures
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION
from shopsimrl.sampling.knobs import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
)
from shopsimrl.sampling.modes import (
    DEFAULT_STRATEGY,
    DEFAULT_WAVE_MODE,
    STRATEGIES,
    WAVE_MODES,
    Strategy,
    WaveMode,
    is_faithful,
)
from shopsimrl.sampling.staged import DEFAULT_SIBLINGS, SIBLINGS

if TYPE_CHECKING:
    from shopsimrl.env.http_client import HttpEnvClient
    from shopsimrl.env.pool import EnvPool
    from shopsimrl.rollout.outputs import RunPaths
    from shopsimrl.rollout.run import RolloutConfig

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


def _env_option(text: str) -> str:
    """``--env``: the in-process env, or env server URLs (the same server never twice)."""
    return IN_PROCESS if text.strip() == IN_PROCESS else server_urls(text)


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
    knobs.add_argument("--rollout-batch-size", type=int_range(1), default=DEFAULT_ROLLOUT_BATCH_SIZE, help="groups kept per step")
    knobs.add_argument("--n-samples-per-prompt", type=int_range(1), default=DEFAULT_N_SAMPLES_PER_PROMPT, help="siblings per group")
    knobs.add_argument("--over-sampling-batch-size", type=int_range(1), default=DEFAULT_OVER_SAMPLING_BATCH_SIZE,
                       help="groups submitted per wave")
    knobs.add_argument("--global-batch-size", type=int_range(1), default=DEFAULT_GLOBAL_BATCH_SIZE,
                       help="episodes per optimizer update")
    knobs.add_argument("--max-consecutive-failed-groups", type=int_range(1), default=DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
                       help="technical groups in a row that stop the run")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int_range(1), default=DEFAULT_STEPS, help="rollout steps")
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
    sel = p.add_argument_group("prompt selection", "which prompts to start and how many (docs/efficient-sampling.md)")
    sel.add_argument("--selection", type=Strategy, choices=list(Strategy), metavar="{" + ",".join(STRATEGIES) + "}",
                     default=DEFAULT_STRATEGY,
                     help="seed: the faithful shuffled-epoch order; informative: skip prompts predicted to give "
                     "zero reward spread (re-checked, never lost)")
    sel.add_argument("--waves", type=WaveMode, choices=list(WaveMode), metavar="{" + ",".join(WAVE_MODES) + "}",
                     default=DEFAULT_WAVE_MODE,
                     help="fixed: slime's whole waves; adaptive: keep the predicted number of groups in flight to fill the "
                     "batch with informative groups plus --cushion, topped up after each completion")
    sel.add_argument("--cushion", type=number(), default=DEFAULT_CUSHION,
                     help="adaptive waves: expected informative groups kept in flight above the number missing; "
                     "negative keeps fewer (never fewer groups than are missing), so the fallback keeps more "
                     "zero-spread groups and fewer episodes are generated (default %(default)s)")
    sel.add_argument("--siblings", choices=SIBLINGS, default=DEFAULT_SIBLINGS,
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
    from shopsimrl.learn.connect import add_arguments as add_learner_arguments

    add_learner_arguments(p)  # --learner, --eval-every, --eval-samples, --resume (and the old --learning)
    wb = p.add_argument_group("Weights & Biases (optional)")
    wb.add_argument("--wandb", action="store_true", help="log each step's metrics to W&B")
    wb.add_argument("--wandb-mode", choices=("online", "offline", "disabled"), default="online")
    wb.add_argument("--wandb-project", default="shopsimrl")
    wb.add_argument("--wandb-group", default=None)
    wb.add_argument("--wandb-dir", type=folder, default=None, help="W&B files (default: OUT/NAME)")
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
    "action_format": "action_format",
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
    """What one value alone cannot show (each value is checked while parsing: argtypes)."""
    checks = (
        (args.max_turns >= 1, f"--max-turns (turns per episode) must be >= 1, got {args.max_turns}"),  # --max-steps
        (args.env != IN_PROCESS or args.env_token_file is None, "--env-token-file: used only with --env URL"),
    )
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    from shopsimrl.learn.connect import check_options as check_learner_options

    try:
        check_learner_options(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def config_from_args(args: argparse.Namespace, knobs: SamplingKnobs) -> RolloutConfig:
    """The run's configuration (its own checks: steps, episode concurrency, cushion)."""
    from shopsimrl.rollout.run import RolloutConfig, default_run_name

    return RolloutConfig(knobs=knobs, steps=args.steps, seed=args.seed, out=args.out,
                         name=args.name or default_run_name(), episode_concurrency=args.episode_concurrency,
                         selection=args.selection, waves=args.waves, cushion=args.cushion, timeline=args.timeline,
                         siblings=args.siblings, stage_size=args.stage_size)


def handle(args: argparse.Namespace) -> int:
    """Validate everything cheap first (exit 2), then run."""
    try:
        knobs = knobs_from_args(args)
        config = config_from_args(args, knobs)
        check_options(args)
        options = policy_options(args)
        token = None
        if args.env != IN_PROCESS:
            from shopsimrl.env.auth import load_token

            token = load_token(args.env_token_file)  # TokenError is a ValueError: refused below
        from shopsimrl.rollout.outputs import check_out_dir, check_run_dir

        check_out_dir(args.out)
        if args.name is not None:
            check_run_dir(args.out, args.name, overwrite=args.overwrite or args.resume)
        if args.wandb:
            from shopsimrl.rollout.tracking import import_wandb

            import_wandb()
    except (KnobError, ValueError, RuntimeError) as exc:  # knobs, options, run folder, W&B missing
        _stderr(f"shopsimrl rollout: refused: {exc}")
        return EXIT_REFUSED
    return asyncio.run(_interruptible(args, config, options, token))


class _Interrupts:
    """SIGINT / SIGTERM become a cancellation of the run: the step aborts and every env lease is released.

    The first signal cancels the run and gives env releases ``CLEANUP_SECONDS`` to finish; a second one
    during that cleanup does not cut it short, it only shortens the releases' remaining time to 2 s.
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.signal: signal.Signals | None = None
        self.env: OpenedEnv | None = None
        self.step_events: Path | None = None  # the interrupted step's events.jsonl, for the message
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> _Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._fire, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)
            if self.signal is not None:  # already on the way out with 128 + signal: a late second one changes nothing
                signal.signal(sig, signal.SIG_IGN)

    def _fire(self, sig: signal.Signals) -> None:
        servers = self.env.servers if self.env is not None else None
        if self.signal is None:
            self.signal = sig
            if servers is not None:
                servers.hurry(CLEANUP_SECONDS)
            # one line at the end sums up the releases that failed (each trace keeps its release_error)
            logging.getLogger("shopsimrl.agent").setLevel(logging.ERROR)
            self.task.cancel(sig.name)
        elif servers is not None:
            servers.hurry(2.0)


async def _interruptible(args: argparse.Namespace, config: RolloutConfig, options: dict[str, Any],
                         token: str | None) -> int:
    from shopsimrl.env.build import CatalogError

    task = asyncio.current_task()
    assert task is not None
    with _Interrupts(task) as interrupts:
        try:
            return await _run(args, config, options, interrupts, token)
        except CatalogError as exc:  # the in-process catalog cannot be built (a full disk) or opened
            _stderr(f"shopsimrl rollout: refused: {exc}")
            return EXIT_REFUSED
        except asyncio.CancelledError:
            if interrupts.signal is None:
                raise
            _stderr(f"shopsimrl rollout: interrupted by {interrupts.signal.name}: {_what_stopped(interrupts)}")
            return 128 + int(interrupts.signal)


def _what_stopped(interrupts: _Interrupts) -> str:
    """What the interrupt cut short, in words that match what had started."""
    if interrupts.env is None:
        return "before any step, while the env was being opened (a catalog build in progress stops, its " \
               "temporary file removed); nothing was written"
    if interrupts.step_events is None:
        return "before any step started; no env lease was taken"
    servers = interrupts.env.servers
    lost = servers.unconfirmed_releases if servers is not None else 0
    leases = (f"{lost} env leases could not be released (the env server did not answer; it reclaims "
              f"them after its --lease-ttl)" if lost else "its env leases released")
    return f"the step was aborted and {leases}; partial step events in {interrupts.step_events}"


@dataclass(frozen=True)
class OpenedEnv:
    """The env client and, when env servers serve it, the same client typed as what it is: health and slots
    to check before the run, release retries to hurry after a signal (known from how it was made, not probed)."""

    client: EnvClient
    servers: HttpEnvClient | EnvPool | None  # None: the in-process env

    @property
    def several(self) -> bool:
        """Several env servers behind one pool."""
        from shopsimrl.env.pool import EnvPool

        return isinstance(self.servers, EnvPool)


class Refused(Exception):
    """A stage refuses the run before any step (exit 2); the message says why."""


async def _open_env(args: argparse.Namespace, token: str | None = None) -> OpenedEnv:
    """The env client: in-process ShopSim (catalog built on first use, then cached), an env server's URL,
    or an :class:`~shopsimrl.env.pool.EnvPool` over several."""
    if args.env != IN_PROCESS:
        from shopsimrl.env.pool import make_env_client

        client = make_env_client(args.env, token=token, timeout=args.env_timeout)
        return OpenedEnv(client, client)
    from shopsimrl.env import InProcessEnvClient, ShopSimEnv, catalog_path
    from shopsimrl.env.build import build_catalog_async

    if not catalog_path(args.products, args.catalog_seed).exists():
        print(f"building the ShopSim catalog ({args.products} products, seed {args.catalog_seed}); "
              f"cached for later runs", flush=True)
    path = await build_catalog_async(args.products, args.catalog_seed)  # a signal stops the build at once
    # one env slot per concurrent episode, so a reset never waits for a slot
    env = await asyncio.to_thread(ShopSimEnv, path, slots=args.episode_concurrency)
    return OpenedEnv(InProcessEnvClient(env, owns_env=True), None)


def _make_policy(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """Stage 1: the policy (refused: its options do not fit it)."""
    from shopsimrl.learn.connect import make_learning_policy

    try:
        return make_learning_policy(args, options)
    except (TypeError, ValueError) as exc:
        raise Refused(f"policy {args.policy}: {exc}") from exc


async def _fit_env_slots(env: OpenedEnv, args: argparse.Namespace, config: RolloutConfig) -> RolloutConfig:
    """Stage 2: env server(s) reachable, the same shop, enough free slots; concurrency lowered to the free slots."""
    from shopsimrl.env.pool import EnvPool

    servers = env.servers
    if servers is None:
        return config
    several = env.several
    try:
        health = await servers.healthz()
        slots, free = int(health["slots"]), int(health.get("free_slots", health["slots"]))
    except EnvError as exc:
        raise Refused(str(exc) if several else f"the env server at {args.env} does not answer /healthz: {exc}") from exc
    where = f"the {len(servers.status())} env servers" if isinstance(servers, EnvPool) else "the env server"
    if free < 1:
        raise Refused(f"all {slots} slots of {where} at {args.env} are leased by other clients: wait for them (an "
                      f"abandoned lease is reclaimed after the server's --lease-ttl) or start a server with more --slots")
    if config.episode_concurrency > free:
        taken = f" ({slots - free} are leased by other clients)" if free < slots else ""
        _stderr(f"shopsimrl rollout: {where} {'have' if several else 'has'} {free} free slots of {slots}{taken}: running at "
                f"most {free} episodes at once instead of --episode-concurrency "
                f"{config.episode_concurrency} (more would only wait for a slot and time out)")
        config = dataclasses.replace(config, episode_concurrency=free)
    return config


async def _train_tasks(env: OpenedEnv, args: argparse.Namespace, knobs: SamplingKnobs) -> list[str]:
    """Stage 3: the train split, large enough for a wave of distinct tasks."""
    try:
        task_ids = await env.client.list_tasks("train")
    except EnvError as exc:  # e.g. a server that refuses our token (its /healthz is open)
        raise Refused(f"the env server at {args.env} refuses to list tasks: [{exc.code}] {exc}") from exc
    if len(task_ids) < knobs.over_sampling_batch_size:
        raise Refused(f"the train split has {len(task_ids)} tasks but a wave submits "
                      f"{knobs.over_sampling_batch_size} distinct ones: use a larger catalog (--products) or a "
                      f"smaller --over-sampling-batch-size")
    return list(task_ids)


def _prepare_outputs(args: argparse.Namespace, name: str) -> RunPaths:
    """Stage 4: the run folder, locked for this run."""
    from shopsimrl.rollout.outputs import RunDirError, prepare_run_dir

    try:
        return prepare_run_dir(args.out, name, overwrite=args.overwrite, resume=args.resume)
    except (RunDirError, OSError) as exc:
        raise Refused(str(exc)) from exc


async def _run_steps(args: argparse.Namespace, config: RolloutConfig, runner: Any, task_ids: list[str],
                     paths: RunPaths, interrupts: _Interrupts, learner_kwargs: dict[str, Any], logger: Any,
                     extra: dict[str, Any], clusters: dict[str, str] | None) -> int:
    """Stage 5: the steps, under the live view; each way a run can stop becomes its exit code and message."""
    from rich.console import Console

    from shopsimrl.rollout.run import run_rollout
    from shopsimrl.rollout.view import RolloutView

    console = Console()
    if not console.is_terminal:  # captured output: wide enough for the summary table
        console = Console(width=max(console.width, 150))
    live = None if args.view == "auto" else args.view == "live"
    console.print(f"shopsimrl rollout: run {config.name} -> {args.out / config.name}  ({len(task_ids)} train tasks, "
                  f"policy {args.policy}, env {args.env})", markup=False, highlight=False)
    with RolloutView(console, live=live) as view:
        try:
            result = await run_rollout(config, runner, task_ids, observer=view,
                                       on_step=logger.log if logger else None, extra_config=extra,
                                       paths=paths, keep_reports=False,  # summary rows only: memory flat over steps
                                       clusters=clusters, **learner_kwargs)
        except TooManyTechnicalFailures as exc:
            step_dir = Path(exc.trace_dir or paths.root)
            _stderr(f"shopsimrl rollout: stopped: {exc}\ntraces: {step_dir / 'traces'}\n"
                    f"triage: {step_dir / 'triage'}")
            return EXIT_TOO_MANY_TECHNICAL_FAILURES
        except asyncio.CancelledError:
            interrupts.step_events = _last_step_events(paths.root)
            raise
        except OSError as exc:
            step = _last_step_events(paths.root)
            what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "an output could not be written"
            _stderr(f"shopsimrl rollout: stopped: {what} ({exc.strerror or exc}: {exc.filename or '?'}); "
                    f"the step in {step.parent if step else paths.root} is incomplete (no metrics.json), "
                    f"earlier steps are whole. Free space (or fix the folder) and run again.")
            return EXIT_FAILED
        view.summary(result.rows)
    console.print(f"outputs: {result.paths.root}", markup=False, highlight=False)
    return EXIT_OK


async def _run(args: argparse.Namespace, config: RolloutConfig, options: dict[str, Any],
               interrupts: _Interrupts, token: str | None = None) -> int:
    """The run in named stages: policy, env and its slots, train tasks, run folder, tracking, steps."""
    from shopsimrl.learn.connect import run_fields as learning_fields
    from shopsimrl.learn.connect import start as start_learning
    from shopsimrl.rollout.clusters import task_categories
    from shopsimrl.rollout.faults import FaultInjectingEnv
    from shopsimrl.rollout.runner import agent_runner

    try:
        policy = _make_policy(args, options)
    except Refused as exc:
        _stderr(f"shopsimrl rollout: refused: {exc}")
        return EXIT_REFUSED
    env = await _open_env(args, token)
    interrupts.env = env
    logger = None
    paths = None
    code = EXIT_FAILED
    try:
        try:
            config = await _fit_env_slots(env, args, config)
            task_ids = await _train_tasks(env, args, config.knobs)
            paths = _prepare_outputs(args, config.name)
        except Refused as exc:
            _stderr(f"shopsimrl rollout: refused: {exc}")
            return EXIT_REFUSED
        client = FaultInjectingEnv(env.client, args.fault_rate, seed=args.seed) if args.fault_rate > 0 else env.client
        runner = agent_runner(client, policy, max_turns=args.max_turns)
        extra = {"policy": args.policy, "policy_options": options, "env": args.env, "products": args.products,
                 "catalog_seed": args.catalog_seed, "fault_rate": args.fault_rate, "max_turns": args.max_turns,
                 **learning_fields(args)}
        try:  # the learner's hooks, and --resume's position (refused: the run cannot be continued as asked)
            learner_kwargs = await start_learning(args, policy, client, paths, config, task_ids, extra)
        except ValueError as exc:
            _stderr(f"shopsimrl rollout: refused: {exc}")
            return EXIT_REFUSED
        if args.wandb:
            from shopsimrl.rollout.tracking import WandbLogger

            logger = WandbLogger(project=args.wandb_project, name=config.name, group=args.wandb_group,
                                 directory=args.wandb_dir or (args.out / config.name / "wandb"), mode=args.wandb_mode,
                                 config={**config.knobs.as_dict(), **extra, "seed": args.seed})
        # ShopSim's categories: the prompt source's clusters (a selector explores by cluster, reports coverage)
        clusters = None if is_faithful(config.selection, config.waves) else await task_categories(env.client, task_ids)
        code = await _run_steps(args, config, runner, task_ids, paths, interrupts, learner_kwargs, logger, extra,
                                clusters)
        return code
    finally:
        if logger is not None:
            logger.finish(exit_code=code)
        aclose = getattr(policy, "aclose", None)
        if aclose is not None:
            await aclose()
        await env.client.aclose()
        if paths is not None:
            paths.unlock()


def _last_step_events(root: Path) -> Path | None:
    """The newest step folder's events.jsonl (the step a stop or an interrupt cut short)."""
    steps = sorted((p for p in root.glob("step-*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
    return steps[-1] / "events.jsonl" if steps else None


def main(argv: Sequence[str] | None = None) -> int:
    """``shopsimrl rollout ...`` without the dispatcher (``argv`` excludes the word ``rollout``)."""
    parser = OneLineParser(prog="shopsimrl")
    register(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(["rollout", *(argv or [])])
    except SystemExit as exc:  # a value refused while parsing: one line on stderr already
        return exc.code if isinstance(exc.code, int) else 2
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
