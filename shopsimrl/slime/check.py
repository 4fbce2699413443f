"""``shopsimrl slime check --slime-src PATH``: does this release of ShopSimRL fit this slime?

Runs, on a CPU, against the user's own slime checkout, the checks the test suite runs
(``tests/slime_harness``), and prints one verdict per check, naming each mismatch:

- ``surface``: every slime function and class ShopSim calls is where we expect it, with
  the parameters we pass (a function that moved, a changed signature, a missing field);
- for each launcher configuration (``SELECTION`` x ``WAVES``), slime's real ``train()``
  loop with the launcher's argv: ``loop``, ``batch``, ``distinct``, ``replay``,
  ``selector``, ``metrics``, ``resume`` (see :mod:`shopsimrl.slime.harness.checks`);
  and the same through slime's ``train_async.py`` (``ASYNC=1``), with its own checks (``in_flight``,
  ``feedback``; ``--loop`` runs one loop only);
- ``launch``: ``--partial-rollout`` refused before slime starts;
- ``episodes``: our generate hook inside slime's ``generate_and_rm_group`` against a
  scripted SGLang and a real env server, and slime's ``abort()`` mid-episode.

A verdict is PASS or FAIL only on evidence: a check whose inputs are missing (slime does
not import, its leg failed, no step was trained) is NOT RUN, with the reason; one that does
not apply to a configuration is N/A.  slime runs only in child processes, each with a time
limit (``--timeout``), killed by its PID when it blocks; SIGTERM or SIGINT stops the check,
kills its children and removes its temporary folder.

Exit status: 0 every check passed (or does not apply), 1 a check failed or did not run,
2 refused (no slime checkout there), 128 + N stopped by signal N.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from shopsimrl.argtypes import existing_folder, folder, int_range, number, out_file
from shopsimrl.defaults import DEFAULT_CHECK_JOBS
from shopsimrl.errors import Interrupted
from shopsimrl.io import atomic_write_json
from shopsimrl.sampling.modes import Selection, WaveMode
from shopsimrl.slime.harness.checks import CHECKS
from shopsimrl.slime.harness.children import (
    DEFAULT_IMPORT_TIMEOUT_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    Children,
    child_result,
)
from shopsimrl.slime.harness.episodes import run_episodes
from shopsimrl.slime.harness.loop import (
    CONFIGURATIONS,
    LoopSettings,
    harness_args,
    launcher_env,
    prepare,
    run_configuration,
    run_leg,
)
from shopsimrl.slime.harness.outcome import Outcome, Status
from shopsimrl.slime.harness.surface import RESULT

EXIT_FAILED = 1
EXIT_REFUSED = 2
SHOWN_MISMATCHES = 3
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: ``--loop``: slime's loops run per configuration (``async`` is ``train_async.py``, ``ASYNC=1``)
LOOP_CHOICES = ("both", "train", "async")
LAUNCH_CHECK = "launch: --partial-rollout refused"
EPISODES_CHECK = "episodes: the generate hook in generate_and_rm_group, abort() mid-episode"


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
    check.add_argument("--loop", choices=LOOP_CHOICES, default="both",
                       help="which of slime's loops run every configuration: train.py, train_async.py (ASYNC=1), or "
                            "both (default)")
    check.add_argument("--jobs", type=int_range(1, 4), default=DEFAULT_CHECK_JOBS,
                       help=f"configurations run at once (default {DEFAULT_CHECK_JOBS})")
    check.add_argument("--timeout", type=number(above=0), default=DEFAULT_TIMEOUT_SECONDS, metavar="SECONDS",
                       help=f"each slime process's time limit; one still running then is killed and its checks fail "
                            f"(default {DEFAULT_TIMEOUT_SECONDS:g})")
    check.add_argument("--import-timeout", type=number(above=0), default=DEFAULT_IMPORT_TIMEOUT_SECONDS,
                       metavar="SECONDS", help=f"the first process's time limit: it imports slime and reads its "
                       f"signatures, so a slime whose import hangs is reported at once (default "
                       f"{DEFAULT_IMPORT_TIMEOUT_SECONDS:g}; never above --timeout)")
    check.add_argument("--json", default=None, metavar="FILE", type=out_file, help="also write every verdict and figure to FILE")
    check.set_defaults(handler=run)


class Stopped(Interrupted):
    """Raised in the main thread by the first SIGTERM or SIGINT."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _StopOnSignal:
    """The first stopping signal raises :class:`Stopped`; later ones are ignored, so the cleanup runs to its end."""

    def __init__(self) -> None:
        self.received: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            raise Stopped(signum)


def run(args: argparse.Namespace) -> int:
    src = Path(args.slime_src).expanduser().resolve()
    if not (src / "slime" / "__init__.py").is_file() or not (src / "train.py").is_file():
        print(f"shopsimrl slime check: refused: {src} is not a slime checkout (no slime/__init__.py and train.py)",
              file=sys.stderr)
        return EXIT_REFUSED
    children = Children(args.timeout)
    previous = {sig: signal.signal(sig, _StopOnSignal()) for sig in STOPPING_SIGNALS}
    temporary: Path | None = None
    try:
        if args.workdir:
            root = Path(args.workdir).expanduser().resolve()
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = temporary = Path(tempfile.mkdtemp(prefix="shopsim-slime-check-"))
        return _check(src, root, args, children)
    except Stopped as stop:
        print(f"shopsimrl slime check: stopped by {stop}; slime's processes killed"
              + ("" if temporary is None or args.keep else ", its temporary folder removed"), file=sys.stderr, flush=True)
        return 128 + stop.signum
    finally:
        for sig in STOPPING_SIGNALS:  # nothing cuts the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        try:
            children.kill_all()
            if temporary is not None and not args.keep:
                shutil.rmtree(temporary, ignore_errors=True)  # this run's own temporary directory only
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Report:
    """The verdicts, printed as they come."""

    def __init__(self) -> None:
        self.verdicts: list[dict[str, Any]] = []

    def add(self, name: str, outcome: Outcome, note: str = "") -> None:
        self.verdicts.append({"check": name, "status": outcome.status.value, "problems": list(outcome.problems),
                              "reason": outcome.reason, "note": outcome.note})
        detail = (outcome.note or note) if outcome.status is Status.PASS else outcome.reason
        print(f"{outcome.status.value:<8} {name}{'  (' + detail + ')' if detail else ''}", flush=True)
        for problem in outcome.problems[:SHOWN_MISMATCHES]:
            print(f"      - {problem}", flush=True)
        if len(outcome.problems) > SHOWN_MISMATCHES:
            print(f"      - ... and {len(outcome.problems) - SHOWN_MISMATCHES} more", flush=True)

    def count(self, status: Status) -> int:
        return sum(1 for v in self.verdicts if v["status"] == status.value)

    @property
    def holds(self) -> bool:
        return self.count(Status.FAIL) == 0 and self.count(Status.NOT_RUN) == 0


def surface(src: Path, root: Path, children: Children, timeout: float | None = None) -> tuple[Outcome, bool]:
    """The surface check in a child, first: it imports slime, which may block, so its own short limit applies
    (``timeout``, at most the children's); (outcome, slime imports)."""
    scratch = root / "surface"
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "surface.log"
    limit = children.timeout if timeout is None else min(timeout, children.timeout)
    ended = children.run([sys.executable, "-m", "shopsimrl.slime.harness.surface", str(src), str(scratch)], log,
                         timeout=limit)
    if ended.timed_out:
        return Outcome.of([f"slime's modules did not import within {limit:g} s (--import-timeout): the import "
                           f"hangs, or needs a longer limit; its process was killed"]), False
    found = child_result(scratch / RESULT, log, ended, limit)
    if "error" in found:
        return Outcome.of([f"slime's modules could not be imported: {str(found['error']).strip()[-800:]}"]), False
    return Outcome.of([str(p) for p in found.get("problems", [])]), bool(found.get("imported"))


def _check(src: Path, root: Path, args: argparse.Namespace, children: Children) -> int:
    started = time.perf_counter()
    print(f"shopsimrl slime check: slime at {src}; runs in {root}", flush=True)
    report = Report()
    outcome, imported = surface(src, root, children, args.import_timeout)
    report.add("surface", outcome, "slime's functions and classes are where ShopSim calls them")
    settings = LoopSettings.full_size() if args.full_size else LoopSettings()
    names = [f"SELECTION={s} WAVES={w}{loop.suffix}: {check}" for loop in _loops(settings, args.loop)
             for s, w in CONFIGURATIONS for check in CHECKS]
    figures: dict[str, dict[str, float]] = {}
    if not imported:
        for name in [*names, LAUNCH_CHECK, EPISODES_CHECK]:
            report.add(name, Outcome.not_run("slime does not import (see surface)"))
    else:
        figures = _loop(src, root, args, children, settings, report)
        report.add(LAUNCH_CHECK, _launch(src, root, children))
        report.add(EPISODES_CHECK, _episodes(src, root, children))

    if any(figures.values()):
        print(f"\ninformative groups per 1,000 generated episodes, generated per trained episode (slime's real loop, "
              f"{settings.steps} steps):")
    for name, values in figures.items():
        if values:
            print(f"  {name}: {values['informative_per_1k_generated']:.1f} per 1k, "
                  f"{values['generated_per_trained']:.3f} generated per trained")
    counts = ", ".join(f"{report.count(s)} {label}" for s, label in ((Status.PASS, "passed"), (Status.FAIL, "failed"),
                                                                    (Status.NOT_RUN, "not run"),
                                                                    (Status.NOT_APPLICABLE, "not applicable")))
    print(f"\n{len(report.verdicts)} checks: {counts}; {time.perf_counter() - started:.0f} s"
          + (f"; runs kept in {root}" if args.keep or args.workdir else ""))
    if args.json:
        atomic_write_json(Path(args.json), {"verdicts": report.verdicts, "figures": figures})
    return 0 if report.holds else EXIT_FAILED


def _loop(src: Path, root: Path, args: argparse.Namespace, children: Children, settings: LoopSettings,
          report: Report) -> dict[str, dict[str, float]]:
    """The configurations' legs, ``--jobs`` at once; on a signal, the legs are killed before the threads are joined."""
    prepare(root / "loop", settings)  # once, before the configurations run in threads
    figures: dict[str, dict[str, float]] = {}
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = [pool.submit(run_configuration, src, root / "loop", *config, loop, children=children)
                   for loop in _loops(settings, args.loop) for config in CONFIGURATIONS]
        for future in futures:
            result = future.result()
            figures[result.name] = result.figures
            for name, outcome in result.checks.items():
                report.add(f"{result.name}: {name}", outcome)
    except BaseException:
        children.kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return figures


def _loops(settings: LoopSettings, loop: str) -> tuple[LoopSettings, ...]:
    """The settings of each loop ``--loop`` runs: ``train.py``'s, then ``train_async.py``'s."""
    return {"both": (settings, settings.asynchronous()), "train": (settings,), "async": (settings.asynchronous(),)}[loop]


def _launch(src: Path, root: Path, children: Children) -> Outcome:
    paths = prepare(root / "launch", LoopSettings(steps=2, tasks=200))
    refused = LoopSettings(steps=2, tasks=200, extra=("--partial-rollout",))
    env = launcher_env(Selection.SKIP.value, WaveMode.FIXED.value, paths, root / "launch" / "partial", refused)
    leg = run_leg(src, root / "launch" / "partial", env, harness_args(paths, refused), children=children)
    if leg.get("status") == 1 and "--partial-rollout is not supported" in (leg.get("error") or "") and not leg.get("episodes"):
        return Outcome.of([])
    if leg.get("status") is None:
        return Outcome.of([f"slime did not get as far as refusing it: {(leg.get('error') or '').strip()[-800:]}"])
    return Outcome.of([f"--partial-rollout was not refused at launch (status {leg.get('status')})"])


def _episodes(src: Path, root: Path, children: Children) -> Outcome:
    episodes = run_episodes(src, root / "episodes", children=children)
    problems = list(episodes.get("problems", []))
    if episodes.get("status") != 0 and not problems:
        problems = [f"the episodes did not run (status {episodes.get('status')})"]
    return Outcome.of(problems)
