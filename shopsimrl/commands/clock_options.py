"""``shopsimrl rollout``'s clock and loop options: which clock the steps run on, slime's loop, the time model.

Defaults are the machine's clock and ``train.py`` (the seed's); docs/clock.md explains both.  Every
refusal is one line and exit 2 (a :class:`~shopsimrl.errors.UsageError`).
"""

from __future__ import annotations

import argparse
from typing import Any

from shopsimrl.argtypes import number, one_of
from shopsimrl.errors import UsageError
from shopsimrl.rollout.gputime import DEFAULT_CLOCK, Clock, TimeModel
from shopsimrl.rollout.loops import DEFAULT_TRAINING_LOOP, TrainingLoop

#: flag -> the time model's field it overrides (only on the modelled clock)
MODEL_FLAGS = {"decode_tokens_per_s": "decode_tokens_per_s", "engine_capacity": "capacity",
               "reply_tokens": "reply_tokens"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("clock", "the clock the steps run on and slime's training loop (docs/clock.md)")
    group.add_argument("--clock", **one_of(Clock), default=DEFAULT_CLOCK,
                       help="machine: groups come back as this machine finishes them; modelled: in modelled GPU "
                       "time (the time model of docs/clock.md), reproducible, with training and weight sync timed")
    group.add_argument("--loop", **one_of(TrainingLoop), default=DEFAULT_TRAINING_LOOP,
                       help="sync: slime's train.py; async: train_async.py, rollout k+1 generated while step k "
                       "trains (the policy that plays is one update older)")
    group.add_argument("--tis-cap", type=number(above=0), default=None, metavar="C",
                       help="--loop async with --learner grpo: weight each decision by its truncated importance ratio "
                       "min(pi_trainer / pi_rollout, C) (slime's --use-tis, whose --tis-clip is 2.0); default: no "
                       "correction, as slime")
    group.add_argument("--decode-tokens-per-s", type=number(above=0), default=None, metavar="X",
                       help="--clock modelled: one episode's solo decode speed (tokens/s)")
    group.add_argument("--engine-capacity", type=number(above=0), default=None, metavar="C",
                       help="--clock modelled: episodes the engines run at full speed (more share the throughput)")
    group.add_argument("--reply-tokens", type=number(above=0), default=None, metavar="N",
                       help="--clock modelled: modelled reply tokens per action of the heuristic and linear policies")


def check_options(args: argparse.Namespace) -> None:
    """What one value alone cannot show."""
    given = [f"--{flag.replace('_', '-')}" for flag in MODEL_FLAGS if getattr(args, flag) is not None]
    checks = (
        (not given or args.clock is Clock.MODELLED, f"{', '.join(given)}: a constant of the modelled clock; add "
                                                    f"--clock modelled"),
        (args.tis_cap is None or args.loop is TrainingLoop.ASYNC,
         "--tis-cap corrects the async loop's one-update lag: add --loop async (train.py trains on-policy)"),
        (args.tis_cap is None or args.learner == "grpo", "--tis-cap weights the GRPO learner's loss: use --learner grpo"),
        (args.loop is not TrainingLoop.ASYNC or not args.resume,
         "--loop async cannot be resumed: the parameters one update behind the trainer are not saved"),
    )
    for ok, message in checks:
        if not ok:
            raise UsageError(message)


def time_model(args: argparse.Namespace) -> TimeModel:
    """The modelled clock's constants: the calibrated model, with the flags given."""
    return TimeModel(**{field: getattr(args, flag) for flag, field in MODEL_FLAGS.items()
                        if getattr(args, flag) is not None})


def run_fields(args: argparse.Namespace) -> dict[str, Any]:
    """What run.json records beyond the config's own (the TIS cap, when given)."""
    return {"tis_cap": args.tis_cap} if args.tis_cap is not None else {}
