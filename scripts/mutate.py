"""``make mutate``: break one dynamic-sampling rule at a time and check that tests/sampling fails.

Each mutation is a small textual edit (one line where the rule is one line) of a file under
``shopsimrl/sampling``.  The runner copies ``shopsimrl/``, ``tests/`` and ``pyproject.toml`` into a
temporary directory once, checks that the copy's own tests pass there, then for each mutation
edits the copy, runs ``pytest -x tests/sampling`` on it and restores the copy's file.  The working
tree is only read: an interrupted run (Ctrl-C, a crash) leaves nothing behind but a temporary
directory that is removed on exit.

A mutation is *killed* when the tests fail (exit 1) or hang past ``--timeout``; it *survives* when
they pass.  The run exits 0 only if every mutation is killed, 1 if one survives, and 2 when the
check cannot run (a mutation no longer applies to the code, or the unmutated suite fails).

    python scripts/mutate.py              # all mutations
    python scripts/mutate.py --list       # what each mutation breaks
    python scripts/mutate.py -k eviction  # only those whose name contains "eviction"

Rule numbers refer to docs/dynamic-sampling.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("shopsimrl", "tests", "pyproject.toml")
TESTS = "tests/sampling"


@dataclass(frozen=True)
class Mutation:
    name: str
    rule: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str


SAMPLING = "shopsimrl/sampling/"

MUTATIONS = (
    # §2.1 technical
    Mutation("technical-if-any-sibling-scored", "R5", SAMPLING + "verdict.py",
             "if not all(is_scored(s, reward_key) for s in samples):",
             "if not any(is_scored(s, reward_key) for s in samples):"),
    Mutation("technical-may-be-a-fallback", "R9", SAMPLING + "filter.py",
             "reason=REASON_TECHNICAL, keep_when_insufficient=False)",
             "reason=REASON_TECHNICAL, keep_when_insufficient=True)"),
    Mutation("stop-limit-default-9", "R6", SAMPLING + "knobs.py",
             "DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS = 8", "DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS = 9"),
    Mutation("stop-one-group-late", "R6", SAMPLING + "guard.py",
             "if self.count >= self.limit:", "if self.count > self.limit:"),
    Mutation("streak-not-reset-by-scored-group", "R6", SAMPLING + "guard.py",
             "if verdict is not Verdict.TECHNICAL:\n            if self.count:",
             "if verdict is not Verdict.TECHNICAL:\n            if False:"),
    # §2.2 zero-std
    Mutation("tolerance-2e-6", "R7", SAMPLING + "knobs.py", "ZERO_STD_EPSILON = 1e-6", "ZERO_STD_EPSILON = 2e-6"),
    Mutation("tolerance-5e-7", "R7", SAMPLING + "knobs.py", "ZERO_STD_EPSILON = 1e-6", "ZERO_STD_EPSILON = 5e-7"),
    Mutation("tolerance-exclusive", "R7", SAMPLING + "verdict.py",
             "max(values) - min(values) <= ZERO_STD_EPSILON", "max(values) - min(values) < ZERO_STD_EPSILON"),
    Mutation("rollout-id-ignored", "R8", SAMPLING + "verdict.py",
             'return _field(sample, "index") if rid is None else rid', 'return _field(sample, "index")'),
    Mutation("zero-std-kept", "R9", SAMPLING + "filter.py", "Verdict.ZERO_STD: ZERO_STD_DROP", "Verdict.ZERO_STD: KEEP"),
    Mutation("zero-std-never-a-fallback", "R9", SAMPLING + "filter.py",
             "reason=REASON_ZERO_STD, keep_when_insufficient=True)",
             "reason=REASON_ZERO_STD, keep_when_insufficient=False)"),
    # §3 remaining, the drop rule, waves, abort
    Mutation("remaining-not-decremented-on-drop", "R12", SAMPLING + "controller.py",
             "self.remaining -= 1", "self.remaining -= 0"),
    Mutation("fallback-threshold-strict", "R13", SAMPLING + "filter.py",
             "if output.keep_when_insufficient and remaining <= target:",
             "if output.keep_when_insufficient and remaining < target:"),
    Mutation("new-wave-at-remaining-equal-target", "R14", SAMPLING + "controller.py",
             "while self.remaining < self.target:", "while self.remaining <= self.target:"),
    Mutation("no-abort-once-target-kept", "R15", SAMPLING + "controller.py",
             "return len(self.kept) >= self.target", "return len(self.kept) > self.target"),
    Mutation("replay-ignores-wave-submission-time", "R15", SAMPLING + "replay.py",
             "heapq.heappush(pending, (now + supply[index][1], index))",
             "heapq.heappush(pending, (supply[index][1], index))"),
    # §4 no eviction
    Mutation("eviction", "R17", SAMPLING + "controller.py",
             "        else:\n            self.surplus.append(index)",
             "        elif output.keep and self.fallback:  # a group with spread evicts a fallback\n"
             "            kept.remove(self.fallback.pop()); kept.append(index); decision = Decision.ACCEPTED\n"
             "        else:\n            self.surplus.append(index)"),
    # §6 drop rates, success over all completed generations, update split, advantages
    Mutation("drop-rate-over-trained-only", "R19", SAMPLING + "metrics.py",
             "denominator = train_group_count + drop_count", "denominator = train_group_count"),
    Mutation("zero-std-rate-over-all-drops", "R19", SAMPLING + "metrics.py",
             "ZERO_STD_GROUP_DROP_RATE: drop_rate(zero_std, train_groups)",
             "ZERO_STD_GROUP_DROP_RATE: drop_rate(zero_std, train_groups + technical)"),
    Mutation("success-over-trained-groups-only", "R20", SAMPLING + "metrics.py",
             "scored = [t for t in all_trajectories if t.scored]",
             "scored = [t for g in trained for t in by_group[g].values() if t.scored]"),
    Mutation("update-split-one-group-too-many", "R21", SAMPLING + "updates.py",
             "per_update = global_batch_size // n_samples_per_prompt",
             "per_update = global_batch_size // n_samples_per_prompt + 1"),
    Mutation("grpo-biased-std", "R22", SAMPLING + "advantages.py", "/ (n - 1)) if n > 1", "/ n) if n > 1"),
    # §7 metrics
    Mutation("all-wrong-over-all-groups", "R23", SAMPLING + "metrics.py",
             "/ len(fully_scored_groups)", "/ len(by_group)"),
    Mutation("metrics-segments-not-deduplicated", "R24", SAMPLING + "metrics.py",
             "trajectories[t.rollout_id] = t", "trajectories[(t.rollout_id, len(trajectories))] = t"),
    # §8 batches
    Mutation("surplus-trained", "R26", SAMPLING + "controller.py",
             "elif len(kept) < self.target:", "elif True:"),
    Mutation("batch-in-reverse-submission-order", "R27", SAMPLING + "controller.py",
             "batch = sorted((int(i), Verdict.parse(v)) for i, v in completions)",
             "batch = sorted(((int(i), Verdict.parse(v)) for i, v in completions), reverse=True)"),
)


def check_applies(mutations: tuple[Mutation, ...]) -> list[str]:
    """Every mutation's text must occur exactly once in the working tree's file (read only)."""
    problems = []
    for mu in mutations:
        text = (ROOT / mu.path).read_text(encoding="utf-8")
        if text.count(mu.old) != 1:
            problems.append(f"{mu.name}: {mu.old!r} occurs {text.count(mu.old)} times in {mu.path} (expected once); "
                            f"update scripts/mutate.py to the current code")
    return problems


def copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "*.pyc")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def run_tests(copy: Path, timeout: float, examples_only: bool = False) -> tuple[str, str, float]:
    """Run the sampling tests on the copy: ("pass" | "fail" | "timeout" | "error: ...", first failed test, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    # the rule examples first and the property tests last: -x stops at the first failure, and a
    # failing hypothesis test spends seconds shrinking its example
    files = sorted(p.relative_to(copy).as_posix() for p in (copy / TESTS).glob("test_*.py"))
    files.sort(key=lambda f: (not f.endswith("test_rules.py"), f.endswith("test_properties.py")))
    if examples_only:
        files = [f for f in files if not f.endswith("test_properties.py")]
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", time.perf_counter() - start
    elapsed = time.perf_counter() - start
    if done.returncode == 0:
        return "pass", "", elapsed
    if done.returncode == 1:
        failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        return "fail", (failed[0].removeprefix(TESTS + "/").split("[")[0] if failed else ""), elapsed
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return f"error: pytest exit {done.returncode}: {' | '.join(tail)}", "", elapsed


def imports_from(copy: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, "-c", "import shopsimrl.sampling as s; print(s.__file__)"], cwd=copy,
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="match", help="only the mutations whose name contains this text")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--examples-only", action="store_true",
                        help="leave out the hypothesis property tests (test_properties.py): is every mutation "
                        "killed by an example test?")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run (default 300)")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs keep whole test names
    mutations = tuple(mu for mu in MUTATIONS if not args.match or args.match in mu.name)
    if not mutations:
        console.print(f"[red]error:[/] no mutation name contains {args.match!r}; see --list")
        return 2
    if args.list:
        table = Table("mutation", "rule", "file", "edit")
        for mu in mutations:
            table.add_row(mu.name, mu.rule, mu.path, f"{mu.old.strip()}  ->  {mu.new.strip()}")
        console.print(table)
        return 0
    problems = check_applies(mutations)
    if problems:
        for p in problems:
            console.print(f"[red]error:[/] {p}")
        return 2

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shopsimrl-mutate-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        where = imports_from(copy)
        if not where.startswith(str(copy)):
            console.print(f"[red]error:[/] the copy imports shopsimrl from {where}, not from {copy}")
            return 2
        outcome, _, seconds = run_tests(copy, args.timeout, args.examples_only)
        if outcome != "pass":
            console.print(f"[red]error:[/] {TESTS} does not pass without any mutation ({outcome}); fix that first")
            return 2
        console.print(f"baseline: {TESTS} passes on the unmutated copy ({seconds:.1f} s)")
        table = Table("mutation", "rule", "file", "result", "first failing test", "seconds", title=f"mutations of shopsimrl/sampling vs {TESTS}")
        survived = 0
        for n, mu in enumerate(mutations, 1):
            target = copy / mu.path
            original = target.read_text(encoding="utf-8")
            try:
                target.write_text(original.replace(mu.old, mu.new, 1), encoding="utf-8")
                outcome, first, seconds = run_tests(copy, args.timeout, args.examples_only)
            finally:
                target.write_text(original, encoding="utf-8")
            result = {"fail": "[green]killed[/]", "timeout": "[green]killed (timeout)[/]",
                      "pass": "[red]SURVIVED[/]"}.get(outcome, f"[red]{outcome}[/]")
            survived += outcome not in ("fail", "timeout")
            table.add_row(mu.name, mu.rule, mu.path.removeprefix(SAMPLING), result, first, f"{seconds:.1f}")
            console.print(f"[{n}/{len(mutations)}] {mu.name}: {result} ({seconds:.1f} s)")
    console.print(table)
    total = time.perf_counter() - started
    killed = len(mutations) - survived
    console.print(f"{killed}/{len(mutations)} mutations killed in {total:.0f} s")
    return 0 if survived == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
