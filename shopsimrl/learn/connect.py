"""How ``shopsimrl rollout`` reaches the learner: its options, its policy, and what the run loop is handed.

Kept apart from the rollout's command so the main job meets learning in three calls
(:func:`add_arguments`, :func:`make_learning_policy`, :func:`start`) and one check
(:func:`check_options`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from shopsimrl.agent import make_policy
from shopsimrl.argtypes import DeprecatedFlag, int_range
from shopsimrl.defaults import DEFAULT_EVAL_SPLIT, DEFAULT_LEARNER, EVAL_SAMPLES_PER_TASK, EVAL_SPLITS, LEARNERS
from shopsimrl.learn import resume
from shopsimrl.rollout.episode_runner import agent_runner
from shopsimrl.rollout.loops import POLICY_LAG
from shopsimrl.rollout.run import run_record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    class DeprecatedSwitch(DeprecatedFlag):
        """``--learning`` (no value): today's ``--learner heuristic``."""

        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            super().__call__(parser, namespace, self.const, option_string)

    group = parser.add_argument_group("learning", "what the main job trains (docs/rollout.md, 'Learning')")
    group.add_argument("--learner", choices=LEARNERS, default=DEFAULT_LEARNER,
                       help="none: the policy never changes (faithful); heuristic: the heuristic grows more "
                       "consistent on each task it trains on with spread; grpo: a small linear policy over the "
                       "heuristic's choices, trained by GRPO on each step's batch (not a language model)")
    group.add_argument("--learning", dest="learner", nargs=0, const="heuristic", action=DeprecatedSwitch,
                       replacement="--learner heuristic")
    group.add_argument("--eval-every", type=int_range(1), default=None, metavar="N",
                       help="--learner grpo: evaluate on the val split before training and after every N-th step "
                       "(eval/shopsim/* in metrics.jsonl)")
    group.add_argument("--eval-samples", type=int_range(1), default=EVAL_SAMPLES_PER_TASK, metavar="K",
                       help="sampled eval episodes per val task (greedy plays one)")
    group.add_argument("--eval-split", choices=EVAL_SPLITS, default=DEFAULT_EVAL_SPLIT,
                       help="the held-out tasks evaluated: the val split, or val and test together")
    group.add_argument("--resume", action="store_true",
                       help="continue the run --name from its last complete step (same options; --steps may grow)")


def check_options(args: argparse.Namespace) -> None:
    """Refuse learner options that do not fit together (ValueError: the rollout command exits 2)."""
    checks = (
        (args.learner == "none" or args.policy == "heuristic",
         f"--learner {args.learner} is a mode of the heuristic policy (a real model learns in the trainer): drop "
         f"it or use --policy heuristic"),
        (args.eval_every is None or args.learner == "grpo", "--eval-every: used only with --learner grpo"),
        (args.learner != "grpo" or args.temperature is None,
         "--temperature: the learned policy's sharpness is its parameters; drop it with --learner grpo"),
        (not args.resume or args.name is not None, "--resume needs the --name of the run to continue"),
        (not args.resume or not args.overwrite, "--resume and --overwrite contradict each other: choose one"),
        (not args.resume or args.learner != "heuristic",
         "--resume: the heuristic learner's per-task state is not saved; use --learner grpo or none"),
    )
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def make_learning_policy(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """The policy the run plays: as asked (``none``), the learning heuristic, or the linear policy."""
    if args.learner == "grpo":
        from shopsimrl.learn.policy import LinearPolicy  # the grpo learner's modules load only when it is asked for

        return LinearPolicy()
    return make_policy(args.policy, **({**options, "learning": True} if args.learner == "heuristic" else options))


def run_fields(args: argparse.Namespace) -> dict[str, Any]:
    """What run.json records of the learner."""
    return {"learner": args.learner, "learning": args.learner == "heuristic", "eval_every": args.eval_every,
            **({"eval_samples": args.eval_samples, "eval_split": args.eval_split} if args.eval_every else {})}


async def start(args: argparse.Namespace, policy: Any, env: Any, paths: Any, config: Any,
                task_ids: Sequence[str], extra: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments :func:`shopsimrl.rollout.run.run_rollout` takes from the learner (and ``--resume``).

    Raises :class:`~shopsimrl.learn.resume.ResumeError` (a ValueError) when the run cannot be continued.
    """
    kwargs: dict[str, Any] = {}
    if args.learner == "heuristic":
        kwargs["learner"] = policy.learn
    learner = None
    if args.learner == "grpo":
        from shopsimrl.learn.learner import EvalPlan, GrpoLearner  # numpy: only when the grpo learner is asked for

        plan = None
        if args.eval_every:
            from shopsimrl.learn.evaluate import eval_task_ids  # the grpo learner's, as above

            held_out = await eval_task_ids(env, args.eval_split)
            plan = EvalPlan(every=args.eval_every, task_ids=held_out, seed=config.seed, samples=args.eval_samples,
                            concurrency=config.episode_concurrency,
                            make_runner=lambda p: agent_runner(env, p, max_turns=args.max_turns))
        learner = GrpoLearner(policy, paths.root, config.knobs.global_batch_size, plan,
                              lag=POLICY_LAG[config.loop], tis_cap=args.tis_cap)
        kwargs["after_batch"] = learner.after_batch
    if args.resume:
        restore = None
        if learner is not None:
            from shopsimrl.learn.learner import restore as restore_learner  # numpy, as above

            def restore(step_root: Any) -> None:
                restore_learner(policy, learner, step_root)

        kwargs["resume"] = resume.prepare(paths, run_record(config, len(task_ids), extra=extra), task_ids,
                                          restore_learner=restore)
    return kwargs
