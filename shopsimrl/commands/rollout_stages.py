"""``shopsimrl rollout``, once its options are checked: the run in named stages, each stop an exit code.

Policy, env and its slots, train tasks, run folder, tracking, steps.  A stage that refuses the run
raises :class:`Refused` (one line, exit 2, before any step); a signal cancels the run
(:class:`~shopsimrl.commands.interrupts.Interrupts`, exit 128 + signal).  Imported only when the
command runs (it loads rich and the rollout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from shopsimrl.commands.interrupts import Interrupts
from shopsimrl.commands.rollout_options import IN_PROCESS, run_fields
from shopsimrl.env import InProcessEnvClient, ShopSimEnv, catalog_path
from shopsimrl.env.build import build_catalog_async
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.pool import EnvPool, make_env_client
from shopsimrl.env.types import EnvClient, EnvError
from shopsimrl.errors import Refusal
from shopsimrl.learn.connect import make_learning_policy
from shopsimrl.learn.connect import start as start_learning
from shopsimrl.rollout.clusters import task_categories, task_descriptions
from shopsimrl.rollout.episode_runner import agent_runner
from shopsimrl.rollout.faults import FaultInjectingEnv
from shopsimrl.rollout.outputs import RunDirError, RunPaths, prepare_run_dir
from shopsimrl.rollout.report import concentration_summary
from shopsimrl.rollout.run import RolloutConfig, run_rollout
from shopsimrl.rollout.tracking import WandbLogger
from shopsimrl.rollout.view import RolloutView
from shopsimrl.sampling import SamplingKnobs, TooManyTechnicalFailures
from shopsimrl.sampling.modes import Selection, is_faithful

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_TOO_MANY_TECHNICAL_FAILURES = 3


class Refused(Refusal):
    """A stage refuses the run before any step (exit 2); the message says why."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def interruptible(args: Any, config: RolloutConfig, options: dict[str, Any], token: str | None) -> int:
    """The run under SIGINT / SIGTERM handling; a refusal propagates (one line, exit 2, from the dispatcher)."""
    task = asyncio.current_task()
    assert task is not None
    with Interrupts(task) as interrupts:
        try:
            return await _run(args, config, options, interrupts, token)
        except asyncio.CancelledError:
            if interrupts.signal is None:
                raise
            _stderr(f"shopsimrl rollout: interrupted by {interrupts.signal.name}: {_what_stopped(interrupts)}")
            return 128 + int(interrupts.signal)


def _what_stopped(interrupts: Interrupts) -> str:
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
        return isinstance(self.servers, EnvPool)


async def open_env(args: Any, token: str | None = None) -> OpenedEnv:
    """The env client: in-process ShopSim (catalog built on first use, then cached), an env server's URL,
    or an :class:`~shopsimrl.env.pool.EnvPool` over several."""
    if args.env != IN_PROCESS:
        client = make_env_client(args.env, token=token, timeout=args.env_timeout)
        return OpenedEnv(client, client)
    if not catalog_path(args.products, args.catalog_seed).exists():
        print(f"building the ShopSim catalog ({args.products} products, seed {args.catalog_seed}); "
              f"cached for later runs", flush=True)
    path = await build_catalog_async(args.products, args.catalog_seed)  # a signal stops the build at once
    # one env slot per concurrent episode, so a reset never waits for a slot
    env = await asyncio.to_thread(ShopSimEnv, path, slots=args.episode_concurrency)
    return OpenedEnv(InProcessEnvClient(env, owns_env=True), None)


def _make_policy(args: Any, options: dict[str, Any]) -> Any:
    """Stage 1: the policy (refused: its options do not fit it)."""
    try:
        return make_learning_policy(args, options)
    except (TypeError, ValueError) as exc:  # the policy's constructor refuses the options given as flags
        raise Refused(f"policy {args.policy}: {exc}") from None


async def _fit_env_slots(env: OpenedEnv, args: Any, config: RolloutConfig) -> RolloutConfig:
    """Stage 2: env server(s) reachable, the same shop, enough free slots; concurrency lowered to the free slots."""
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


async def _train_tasks(env: OpenedEnv, args: Any, knobs: SamplingKnobs) -> list[str]:
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


def _prepare_outputs(args: Any, name: str) -> RunPaths:
    """Stage 4: the run folder, locked for this run."""
    try:
        return prepare_run_dir(args.out, name, overwrite=args.overwrite, resume=args.resume)
    except (RunDirError, OSError) as exc:  # a folder in use, foreign or not writable: the user's to change
        raise Refused(str(exc)) from exc


async def _run_steps(args: Any, config: RolloutConfig, runner: Any, task_ids: list[str], paths: RunPaths,
                     interrupts: Interrupts, learner_kwargs: dict[str, Any], logger: Any, extra: dict[str, Any],
                     clusters: dict[str, str] | None, descriptions: dict[str, dict[str, str]] | None = None) -> int:
    """Stage 5: the steps, under the live view; each way a run can stop becomes its exit code and message."""
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
                                       clusters=clusters, descriptions=descriptions, **learner_kwargs)
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
                    f"the step in {step.parent if step else paths.root} is incomplete (no complete.json), "
                    f"earlier steps are whole. Free space (or fix the folder) and continue it with --resume.")
            return EXIT_FAILED
        view.summary(result.rows)
    if concentrated := concentration_summary(result.rows):  # one prompt trained far more than the seed order could
        console.print(concentrated, markup=False, highlight=False)
    console.print(f"outputs: {result.paths.root}", markup=False, highlight=False)
    return EXIT_OK


async def _run(args: Any, config: RolloutConfig, options: dict[str, Any], interrupts: Interrupts,
               token: str | None = None) -> int:
    """The run in named stages: policy, env and its slots, train tasks, run folder, tracking, steps."""
    policy = _make_policy(args, options)
    env = await open_env(args, token)
    interrupts.env = env
    logger = None
    paths = None
    code = EXIT_FAILED
    try:
        config = await _fit_env_slots(env, args, config)
        task_ids = await _train_tasks(env, args, config.knobs)
        paths = _prepare_outputs(args, config.name)
        client = FaultInjectingEnv(env.client, args.fault_rate, seed=args.seed) if args.fault_rate > 0 else env.client
        runner = agent_runner(client, policy, max_turns=args.max_turns)
        extra = run_fields(args, options)
        # the learner's hooks, and --resume's position (ResumeError, a refusal: the run cannot be continued as asked)
        learner_kwargs = await start_learning(args, policy, client, paths, config, task_ids, extra)
        if args.wandb:
            logger = WandbLogger(project=args.wandb_project, name=config.name, group=args.wandb_group,
                                 directory=args.wandb_dir or (args.out / config.name / "wandb"), mode=args.wandb_mode,
                                 config={**config.knobs.as_dict(), **extra, "seed": args.seed})
        # ShopSim's categories: the selector's clusters (a selector explores by cluster, reports coverage)
        clusters = None if is_faithful(config.selection, config.waves) else await task_categories(env.client, task_ids)
        # the forecast rule's reading: each task's instruction and label, what a trainer has before rollout
        descriptions = await task_descriptions(env.client, task_ids) if config.selection is Selection.FORECAST else None
        if args.prompt_labels is not None:  # the prompt file's labels over the env's (a refusal: a task not trained)
            descriptions = args.prompt_labels.over(descriptions, task_ids)
        code = await _run_steps(args, config, runner, task_ids, paths, interrupts, learner_kwargs, logger, extra,
                                clusters, descriptions)
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
