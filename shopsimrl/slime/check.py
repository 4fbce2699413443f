"""``shopsimrl slime check --slime-src PATH``: does this release of ShopSimRL fit this slime?

Runs, on a CPU, against the user's own slime checkout, the checks the test suite runs
(``tests/slime_harness``), and prints one verdict per check, naming each mismatch:

- ``surface``: every slime function and class ShopSim calls is where we expect it, with
  the parameters we pass (a function that moved, a changed signature, a missing field);
- for each launcher configuration (``SELECTION`` x ``WAVES``), slime's real ``train()``
  loop with the launcher's argv: ``loop``, ``batch``, ``distinct``, ``replay``,
  ``selector``, ``metrics``, ``resume`` (see :mod:`shopsimrl.slime.harness.loop`);
- ``launch``: ``--partial-rollout`` refused before slime starts;
- ``episodes``: our generate hook inside slime's ``generate_and_rm_group`` against a
  scripted SGLang and a real env server, and slime's ``abort()`` mid-episode.

Exit status: 0 every check passed, 1 a check failed, 2 refused (no slime checkout there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from shopsimrl.argtypes import existing_folder, folder, int_range, out_file

EXIT_FAILED = 1
EXIT_REFUSED = 2
SHOWN_MISMATCHES = 3


def register(commands: Any) -> None:
    check = commands.add_parser(
        "check", help="check that this ShopSimRL fits a slime checkout (slime's real code on a CPU, minutes)",
        description="Run slime's real train loop, rollout and abort with ShopSim's hooks, against the slime "
        "checkout at --slime-src, standing in only for torch, Ray, Megatron and SGLang's servers; print a verdict "
        "per check.",
    )
    check.add_argument("--slime-src", required=True, metavar="PATH", type=existing_folder, help="the slime checkout (holds slime/ and train.py)")
    check.add_argument("--workdir", default=None, metavar="DIR", type=folder,
                       help="where the runs write (default: a new temporary directory, removed unless --keep)")
    check.add_argument("--keep", action="store_true", help="keep the runs' files (their path is printed)")
    check.add_argument("--full-size", action="store_true",
                       help="the launcher's own step (16 groups of 8) over 1,600 prompts, not the quicker 8 of 4; "
                            "prints the sampling figures the docs quote")
    check.add_argument("--jobs", type=int_range(1, 4), default=2, help="configurations run at once (default 2)")
    check.add_argument("--json", default=None, metavar="FILE", type=out_file, help="also write every verdict and figure to FILE")
    check.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    src = Path(args.slime_src).expanduser().resolve()
    if not (src / "slime" / "__init__.py").is_file() or not (src / "train.py").is_file():
        print(f"shopsimrl slime check: refused: {src} is not a slime checkout (no slime/__init__.py and train.py)",
              file=sys.stderr)
        return EXIT_REFUSED
    if args.jobs < 1:
        print("shopsimrl slime check: refused: --jobs must be >= 1", file=sys.stderr)
        return EXIT_REFUSED
    if args.workdir:
        root = Path(args.workdir).expanduser().resolve()
        root.mkdir(parents=True, exist_ok=True)
        return _check(src, root, args)
    root = Path(tempfile.mkdtemp(prefix="shopsim-slime-check-"))
    try:
        return _check(src, root, args)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)  # this run's own temporary directory only


def _check(src: Path, root: Path, args: argparse.Namespace) -> int:
    from shopsimrl.sampling.modes import Strategy, WaveMode
    from shopsimrl.slime.harness.episodes import run_episodes
    from shopsimrl.slime.harness.loop import CONFIGURATIONS, LoopSettings, harness_args, launcher_env, prepare, run_leg

    started = time.perf_counter()
    print(f"shopsimrl slime check: slime at {src}; runs in {root}", flush=True)
    verdicts: list[dict[str, Any]] = []

    def verdict(name: str, problems: list[str], note: str = "") -> None:
        verdicts.append({"check": name, "problems": problems, "note": note})
        print(f"{'PASS' if not problems else 'FAIL'}  {name}{'  ' + note if note and not problems else ''}", flush=True)
        for problem in problems[:SHOWN_MISMATCHES]:
            print(f"      - {problem}", flush=True)
        if len(problems) > SHOWN_MISMATCHES:
            print(f"      - ... and {len(problems) - SHOWN_MISMATCHES} more", flush=True)

    surface = subprocess.run([sys.executable, "-m", "shopsimrl.slime.harness.surface", str(src)],
                             capture_output=True, text=True, check=False)
    try:
        problems = json.loads(surface.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        problems = [f"the surface check did not run: {surface.stderr.strip()[-800:]}"]
    verdict("surface", problems, "slime's functions and classes are where ShopSim calls them")

    settings = LoopSettings.full_size() if args.full_size else LoopSettings()
    prepare(root / "loop", settings)  # once, before the configurations run in threads
    figures: dict[str, dict[str, float]] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        from shopsimrl.slime.harness.loop import run_configuration

        futures = [(config, pool.submit(run_configuration, src, root / "loop", *config, settings)) for config in CONFIGURATIONS]
        for _config, future in futures:
            result = future.result()
            figures[result.name] = result.figures
            for name, problems in result.checks.items():
                verdict(f"{result.name}: {name}", problems)

    paths = prepare(root / "launch", LoopSettings(steps=2, tasks=200))
    refused = LoopSettings(steps=2, tasks=200, extra=("--partial-rollout",))
    env = launcher_env(Strategy.INFORMATIVE.value, WaveMode.FIXED.value, paths, root / "launch" / "partial", refused)
    leg = run_leg(src, root / "launch" / "partial", env, harness_args(paths, refused))
    problems = [] if leg.get("status") == 1 and "--partial-rollout is not supported" in (leg.get("error") or "") \
        and not leg.get("episodes") else [f"--partial-rollout was not refused at launch (status {leg.get('status')})"]
    verdict("launch: --partial-rollout refused", problems)

    episodes = run_episodes(src, root / "episodes")
    verdict("episodes: the generate hook in generate_and_rm_group, abort() mid-episode", episodes.get("problems", []))

    print("\ninformative groups per 1,000 generated episodes, generated per trained episode (slime's real loop, "
          f"{settings.steps} steps):")
    for name, values in figures.items():
        if values:
            print(f"  {name}: {values['informative_per_1k_generated']:.1f} per 1k, "
                  f"{values['generated_per_trained']:.3f} generated per trained")
    failed = sum(1 for v in verdicts if v["problems"])
    print(f"\n{len(verdicts) - failed} of {len(verdicts)} checks passed in {time.perf_counter() - started:.0f} s"
          + (f"; runs kept in {root}" if args.keep or args.workdir else ""))
    if args.json:
        from shopsimrl.io import atomic_write_json

        atomic_write_json(Path(args.json), {"verdicts": verdicts, "figures": figures})
    return EXIT_FAILED if failed else 0
