"""``shopsimrl simulate``: a GPU-free training run comparing prompt-selection and wave selections."""

from __future__ import annotations

import argparse

from shopsimrl.argtypes import folder, int_range, number, one_of
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.commands.limits import MAX_PROMPTS, MAX_SEEDS, MAX_STEPS, WHY_PROMPTS, WHY_STEPS
from shopsimrl.defaults import DEFAULT_OVER_SAMPLING_BATCH_SIZE, DEFAULT_SIMULATE_STEPS, DEFAULT_STAGE_SKIP_Q
from shopsimrl.errors import UsageError
from shopsimrl.io import atomic_write_json
from shopsimrl.rollout.loops import (
    CALIBRATED_TRAIN_S,
    CALIBRATED_WEIGHT_SYNC_S,
    DEFAULT_TRAINING_LOOP,
    TrainingLoop,
    TrainTiming,
)
from shopsimrl.sampling.knobs import SamplingKnobs
from shopsimrl.sampling.modes import DEFAULT_SIBLINGS, Siblings
from shopsimrl.sampling.staged import StagedSiblings

EXIT_OK = 0
WORLDS = ("calibrated", "learner")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "simulate",
        help="simulated training run: seed vs informative selection, fixed vs adaptive waves",
        description="Simulate rollout steps on a prompt population with latent difficulty and a policy that learns "
        "from every informative group, calibrated to the public release run; compare selections side by side.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int_range(1, MAX_STEPS, why_high=WHY_STEPS), default=None,
                   help="rollout steps per run (default 80; 30 with --world learner, the benchmark's run)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one world per seed; medians are reported")
    p.add_argument("--out", type=folder, default="runs/simulate", help="summary.json and the pictures go here")
    p.add_argument("--timeline-step", type=int_range(1), default=None,
                   help="step whose wave timeline is drawn (default: the middle step)")
    staged = p.add_argument_group("staged siblings (docs/dynamic-sampling.md R29)")
    staged.add_argument("--siblings", **one_of(Siblings), default=DEFAULT_SIBLINGS,
                        help="staged: every selection also runs with staged siblings (rows <selection>+staged), and "
                        "every row is timed under the capacity model")
    staged.add_argument("--stage-size", type=int_range(1), default=None, help="K, the siblings started first (default n/2)")
    staged.add_argument("--stage-skip-q", type=number(0, 1), default=None, metavar="Q",
                        help="start a group whole when its predicted chance of spread is at least Q (default "
                        f"{DEFAULT_STAGE_SKIP_Q}; 1 stages every group, paying a second round of latency for each)")
    staged.add_argument("--capacity", type=number(0), default=None,
                        help="episodes the engine runs at full speed (default with --siblings staged: calibrated so "
                        "the seed's wave takes the release run's step time; otherwise no capacity model)")
    world = p.add_argument_group("world (defaults: the calibration to the release run)")
    world.add_argument("--world", choices=WORLDS, default=WORLDS[0],
                       help="calibrated: the fit to the public release run (every informative group teaches every "
                       "prompt alike); learner: the fit to the main job's GRPO learner on --products 2000 (two kinds "
                       "of prompt that disagree about what to learn; 160 prompts)")
    world.add_argument("--prompts", type=int_range(DEFAULT_OVER_SAMPLING_BATCH_SIZE, MAX_PROMPTS, why_high=WHY_PROMPTS,
                                                   why=f"a wave submits {DEFAULT_OVER_SAMPLING_BATCH_SIZE} distinct prompts"),
                       default=None)
    world.add_argument("--eta-prompt", type=number(0), default=None, help="pass-rate logit gained by a prompt trained on")
    world.add_argument("--eta-global", type=number(0), default=None, help="skill gained per informative group trained")
    world.add_argument("--clusters", type=int_range(0, MAX_PROMPTS, why_high=WHY_PROMPTS), default=None, metavar="K",
                       help="the prompts fall into K clusters, each learning from its own groups (0: none)")
    world.add_argument("--transfer", type=number(0, 1), default=None, metavar="S",
                       help="with --clusters: share of a cluster's learning that carries to every prompt (0..1)")
    world.add_argument("--directions", type=int_range(0, MAX_PROMPTS, why_high=WHY_PROMPTS), default=None, metavar="K",
                       help="K >= 2 kinds of prompt pull a shared stance toward their own direction (the learner "
                       "world's angle, weight and rate; 0: none)")
    loop = p.add_argument_group("slime's training loop (docs/clock.md, slime's two loops)")
    loop.add_argument("--loop", **one_of(TrainingLoop), default=DEFAULT_TRAINING_LOOP,
                      help="sync: train.py (rollout, train, weight sync); async: train_async.py (rollout k+1 beside "
                      "training k, the policy one step older); with --train-s or async the table adds the loop's wall "
                      "time per step and per informative group")
    loop.add_argument("--train-s", type=number(0), default=None, metavar="S",
                      help=f"training seconds per step (default, when the loop is timed: {CALIBRATED_TRAIN_S:g}, "
                      "calibrated on a public slime run)")
    loop.add_argument("--weight-sync-s", type=number(0), default=None, metavar="S",
                      help=f"weight-sync seconds after each training step (default, when timed: "
                      f"{CALIBRATED_WEIGHT_SYNC_S:g})")
    handled_by(p, handle)


def handle(args: argparse.Namespace) -> int:
    # the simulator and its pictures (numpy, matplotlib) load only when it runs: --help stays fast
    from shopsimrl.simulate.capacity import calibrate_capacity
    from shopsimrl.simulate.model import DIRECTION_FIELDS, WorldParams
    from shopsimrl.simulate.side_by_side import (
        compare,
        draw_cluster_pass_rates,
        draw_step_bars,
        draw_timeline,
        with_overrides,
    )

    if args.steps is None:
        # the learner world's default run length is its fit's (loaded with it)
        from shopsimrl.simulate.calibrate_learner import STEPS as LEARNER_STEPS

        args.steps = LEARNER_STEPS if args.world == "learner" else DEFAULT_SIMULATE_STEPS
    if args.timeline_step is None:
        args.timeline_step = max(1, args.steps // 2)
    if args.steps < 1 or not 1 <= args.timeline_step <= args.steps:
        raise UsageError(f"need --steps >= 1 and 1 <= --timeline-step <= --steps, got {args.steps} and "
                         f"{args.timeline_step}")
    if len(args.seeds) > MAX_SEEDS:
        raise UsageError(f"--seeds: at most {MAX_SEEDS} worlds, got {len(args.seeds)}")
    if args.transfer is not None and not args.clusters:
        raise UsageError("--transfer needs --clusters K >= 1")
    try:
        base = WorldParams()
        if args.world == "learner" or args.directions:
            # the learner world's constants (the fit loads only when asked for)
            from shopsimrl.simulate.calibrate_learner import LEARNER_2000

            base = LEARNER_2000 if args.world == "learner" else with_overrides(
                base, **{k: getattr(LEARNER_2000, k) for k in DIRECTION_FIELDS if k != "directions"})
        if args.world == "learner" and args.clusters:
            raise ValueError("--world learner has directions, not clusters: drop --clusters")
        world = with_overrides(base, prompts=args.prompts, eta_prompt=args.eta_prompt,
                               eta_global=args.eta_global, clusters=args.clusters, transfer=args.transfer,
                               directions=args.directions)
        knobs = SamplingKnobs()
        skip = {} if args.stage_skip_q is None else {"skip_q": args.stage_skip_q}
        staging = (StagedSiblings.of(knobs.n_samples_per_prompt, args.stage_size, **skip)
                   if args.siblings is Siblings.STAGED else None)
        if args.stage_size is not None and staging is None:
            raise ValueError("--stage-size is for --siblings staged")
        if args.stage_skip_q is not None and staging is None:
            raise ValueError("--stage-skip-q is for --siblings staged")
        if args.capacity is not None and not args.capacity > 0:
            raise ValueError(f"--capacity must be > 0 episodes, got {args.capacity}")
    except ValueError as exc:  # the world's and the staging's checks of values given as flags: a refusal
        raise UsageError(str(exc)) from None
    capacity = args.capacity
    if capacity is None and staging is not None:
        capacity = calibrate_capacity(knobs.over_sampling_batch_size * knobs.n_samples_per_prompt,
                                      world.episode_median_s, world.episode_sigma)
    if capacity is not None:
        print(f"capacity model: {capacity:.2f} episodes at full speed (each at min(1, C/in_flight) of solo speed)")
    clustered = f" in {world.clusters} clusters, transfer {world.transfer:g}" if world.clusters else ""
    bound = "" if world.directions else " (the oracle rows read the true pass rates: the bound for any selector)"
    print(f"simulating {args.steps} steps x {len(args.seeds)} seeds{clustered}{bound} ...", flush=True)
    timing = None
    if args.loop is TrainingLoop.ASYNC or args.train_s is not None or args.weight_sync_s is not None:
        timing = TrainTiming(CALIBRATED_TRAIN_S if args.train_s is None else args.train_s,
                             CALIBRATED_WEIGHT_SYNC_S if args.weight_sync_s is None else args.weight_sync_s)
        print(f"slime's {'train_async.py' if args.loop is TrainingLoop.ASYNC else 'train.py'} loop: "
              f"{timing.train_s:g} s training and {timing.weight_sync_s:g} s weight sync per step")
    result = compare(steps=args.steps, seeds=args.seeds, world=world, timeline_step=args.timeline_step,
                     staging=staging, capacity=capacity, loop=args.loop, timing=timing)
    summary = result["summary"]
    columns = [("inf/1k gen ep", "informative_per_1k_generated_episodes"),
               ("gen/trained ep", "generated_per_trained_episode"), ("inf share", "informative_share_of_trained"),
               ("final pass", "final_mean_pass_rate"), ("coverage", "coverage"), ("step s", "mean_step_wall_s"),
               ("s/inf group", "wall_s_per_informative_group")]
    if timing is not None:
        columns += [("loop step s", "loop_mean_step_wall_s"), ("loop s/inf", "loop_wall_s_per_informative_group")]
    if world.clusters:
        columns += [("cluster min", "cluster_final_pass_min"), ("cluster median", "cluster_final_pass_median"),
                    ("clusters gen", "clusters_generated_min")]
    columns += [(f"kind {k} final", f"kind_{k}_final_pass_rate") for k in range(world.directions)]
    print(" | ".join(f"{h:>14}" for h in ("selection", *(name for name, _ in columns))))
    for label, row in summary.items():
        print(" | ".join([f"{label:>14}", *(f"{row[key]:>14.3f}" for _, key in columns)]))
    out = args.out
    runs = result["runs"]
    atomic_write_json(out / "summary.json", {"world": result["world"], "steps": args.steps, "seeds": args.seeds,
                                             "summary": summary,
                                             **({"capacity": capacity, "staging": {
                                                 "stage_size": staging.stage_size, "threshold": staging.threshold,
                                                 "skip_q": staging.skip_q}} if staging is not None else {}),
                                             **({"loop": str(args.loop.value), "timing": timing.as_dict()}
                                                if timing is not None else {})})
    draw_step_bars(out / "step_bars.png", {k: v for k, v in runs.items() if not k.startswith("oracle")})
    draw_timeline(out / "wave_timeline_seed_fixed.png", runs["seed/fixed"][0], args.timeline_step)
    draw_timeline(out / "wave_timeline_informative_adaptive.png", runs["skip/adaptive"][0], args.timeline_step)
    if world.clusters:
        draw_cluster_pass_rates(out / "cluster_pass_rates.png", {k: v for k, v in runs.items() if not k.startswith("oracle")})
    print(f"outputs: {out}")
    return EXIT_OK
