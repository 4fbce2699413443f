"""``shopsimrl simulate``: a GPU-free training run comparing prompt-selection and wave strategies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_REFUSED = 0, 2


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "simulate",
        help="simulated training run: seed vs informative selection, fixed vs adaptive waves",
        description="Simulate rollout steps on a prompt population with latent difficulty and a policy that learns "
        "from every informative group, calibrated to the public release run; compare strategies side by side.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=80, help="rollout steps per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one world per seed; medians are reported")
    p.add_argument("--out", type=Path, default=Path("runs/simulate"), help="summary.json and the pictures go here")
    p.add_argument("--timeline-step", type=int, default=40, help="step whose wave timeline is drawn")
    world = p.add_argument_group("world (defaults: the calibration to the release run)")
    world.add_argument("--prompts", type=int, default=None)
    world.add_argument("--eta-prompt", type=float, default=None, help="pass-rate logit gained by a prompt trained on")
    world.add_argument("--eta-global", type=float, default=None, help="skill gained per informative group trained")
    world.add_argument("--clusters", type=int, default=None, metavar="K",
                       help="the prompts fall into K clusters, each learning from its own groups (0: none)")
    world.add_argument("--transfer", type=float, default=None, metavar="S",
                       help="with --clusters: share of a cluster's learning that carries to every prompt (0..1)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from shopsimrl.io import atomic_write_json
    from shopsimrl.simulate.compare import (
        compare,
        draw_cluster_pass_rates,
        draw_step_bars,
        draw_timeline,
        targets,
        with_overrides,
    )
    from shopsimrl.simulate.model import WorldParams

    if args.steps < 1 or not 1 <= args.timeline_step <= args.steps:
        print(f"shopsimrl simulate: refused: need --steps >= 1 and 1 <= --timeline-step <= --steps, got "
              f"{args.steps} and {args.timeline_step}", file=sys.stderr)
        return EXIT_REFUSED
    if args.transfer is not None and not args.clusters:
        print("shopsimrl simulate: refused: --transfer needs --clusters K >= 1", file=sys.stderr)
        return EXIT_REFUSED
    try:
        world = with_overrides(WorldParams(), prompts=args.prompts, eta_prompt=args.eta_prompt,
                               eta_global=args.eta_global, clusters=args.clusters, transfer=args.transfer)
    except ValueError as exc:
        print(f"shopsimrl simulate: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    clustered = f" in {world.clusters} clusters, transfer {world.transfer:g}" if world.clusters else ""
    print(f"simulating {args.steps} steps x {len(args.seeds)} seeds{clustered} (the oracle rows read the true "
          f"pass rates: the bound for any selector) ...", flush=True)
    result = compare(steps=args.steps, seeds=args.seeds, world=world, timeline_step=args.timeline_step)
    summary, checks = result["summary"], targets(result["summary"], world.clusters)
    columns = [("inf/1k gen ep", "informative_per_1k_generated_episodes"),
               ("gen/trained ep", "generated_per_trained_episode"), ("inf share", "informative_share_of_trained"),
               ("final pass", "final_mean_pass_rate"), ("coverage", "coverage"), ("step s", "mean_step_wall_s")]
    if world.clusters:
        columns += [("cluster min", "cluster_final_pass_min"), ("cluster median", "cluster_final_pass_median"),
                    ("clusters gen", "clusters_generated_min")]
    print(" | ".join(f"{h:>14}" for h in ("strategy", *(name for name, _ in columns))))
    for label, row in summary.items():
        print(" | ".join([f"{label:>14}", *(f"{row[key]:>14.3f}" for _, key in columns)]))
    for name, check in checks.items():
        print(f"{'met' if check['met'] else 'NOT met':>8}  {name}: {check['value']:.3f}")
    out = args.out
    runs = result["runs"]
    atomic_write_json(out / "summary.json", {"world": result["world"], "steps": args.steps, "seeds": args.seeds,
                                             "summary": summary, "targets": checks})
    draw_step_bars(out / "step_bars.png", {k: v for k, v in runs.items() if not k.startswith("oracle")})
    draw_timeline(out / "wave_timeline_seed_fixed.png", runs["seed/fixed"][0], args.timeline_step)
    draw_timeline(out / "wave_timeline_informative_adaptive.png", runs["informative/adaptive"][0], args.timeline_step)
    if world.clusters:
        draw_cluster_pass_rates(out / "cluster_pass_rates.png", {k: v for k, v in runs.items() if not k.startswith("oracle")})
    print(f"outputs: {out}")
    return EXIT_OK
