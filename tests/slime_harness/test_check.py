"""``shopsimrl slime check`` names what does not fit, and never says PASS without evidence.

- a path that is no slime is refused; a slime function whose signature moved is named, and so is
  the slime double the in-process tests use, which no longer matches;
- a broken slime (broken checkouts from the slime double, ``double/checkouts.py``; no real slime needed): an empty tree, an
  import that blocks (killed at ``--timeout``), a ``train.py`` that exits early: no PASS for a
  check that did not run (before the fix an empty tree gave 24 PASS verdicts of 31, a blocking
  import hung the check for ever, an early exit ended in ``KeyError: 'trained'``);
- SIGTERM stops the check, a real process: its children killed, its temporary folder removed
  (before the fix it left the folder behind).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from local_processes import alive

from shopsimrl.cli import main
from shopsimrl.slime.harness.checks import CHECKS, _same_state, check_feedback
from shopsimrl.slime.harness.double import checkouts
from shopsimrl.slime.harness.loop import CONFIGURATIONS, LoopSettings, run_configuration
from shopsimrl.slime.harness.outcome import Status

#: one verdict per line: status, then the check's name (see shopsimrl.slime.check.Report)
STATUSES = ("PASS", "FAIL", "NOT RUN", "N/A")
ALL_CHECKS = 1 + 2 * len(CONFIGURATIONS) * len(CHECKS) + 2  # surface, each configuration's in both loops, launch, episodes


def test_a_path_that_is_not_slime_is_refused(tmp_path, capsys):
    assert main(["slime", "check", "--slime-src", str(tmp_path)]) == 2
    assert "is not a slime checkout" in capsys.readouterr().err


def surface(src: Path, scratch: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "shopsimrl.slime.harness.surface", str(src), str(scratch)],
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_surface_check_names_a_changed_signature(slime_src, tmp_path):
    assert surface(slime_src, tmp_path) == {"imported": True, "problems": []}
    copy = tmp_path / "slime"
    shutil.copytree(slime_src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "slime" / "rollout" / "sglang_rollout.py"
    text = module.read_text()
    assert "async def abort(args: Namespace, rollout_id: int)" in text
    module.write_text(text.replace("async def abort(args: Namespace, rollout_id: int)",
                                   "async def abort(args: Namespace, step: int)"))
    assert surface(copy, tmp_path)["problems"] == [
        "slime.rollout.sglang_rollout.abort: signature changed: (args, step), ShopSim passes (args, rollout_id)",
        "the slime double's abort(args, rollout_id, retry_seconds) does not take slime's (args, step)",  # the tests' double
    ]


def check(src: Path, tmp_path: Path, *options: str, timeout: float = 120) -> tuple[int, dict[str, str], str]:
    """Run the check as a user does; (exit status, {check: status}, output).  Its temporary folder goes to tmp_path."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "slime", "check", "--slime-src", str(src), *options],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "TMPDIR": str(scratch)})
    verdicts = {}
    for line in done.stdout.splitlines():
        status = next((s for s in STATUSES if line.startswith(s + " ")), None)
        if status:
            verdicts[line[len(status):].strip().split("  (")[0]] = status
    assert list(scratch.iterdir()) == [], "the check left its temporary folder behind"
    return done.returncode, verdicts, done.stdout + done.stderr


def test_an_empty_slime_tree_gives_no_pass(tmp_path):
    code, verdicts, out = check(checkouts.empty(tmp_path / "slime"), tmp_path)
    assert code == 1, out
    assert len(verdicts) == ALL_CHECKS, out
    assert verdicts.pop("surface") == "FAIL"
    assert set(verdicts.values()) == {"NOT RUN"}, out
    assert "slime does not import with the stand-ins: ModuleNotFoundError" in out


def test_a_slime_import_that_blocks_is_killed_at_the_time_limit(tmp_path):
    tree = checkouts.blocking_import(tmp_path / "slime")
    started = time.monotonic()
    code, verdicts, out = check(tree, tmp_path, "--timeout", "10")
    assert time.monotonic() - started < 60, "the check waited past its time limit"
    assert code == 1 and verdicts["surface"] == "FAIL" and "did not import within 10 s (--import-timeout)" in out, out
    assert [s for name, s in verdicts.items() if name != "surface"] == ["NOT RUN"] * (ALL_CHECKS - 1)
    assert checkouts.pids(tree) and not any(alive(pid) for pid in checkouts.pids(tree))


def test_a_slime_that_exits_early_fails_with_the_reason(tmp_path):
    tree = checkouts.importable(tmp_path / "slime", checkouts.EXIT_EARLY)
    result = run_configuration(tree, tmp_path / "loop", "seed", "fixed", LoopSettings(steps=2, tasks=50), legs=("full",))
    loop = result.checks["loop"]
    assert loop.status is Status.FAIL
    assert loop.problems == (loop.problems[0],) and "exited early (exit status 0) without its result" in loop.problems[0]
    for name in CHECKS[1:]:
        assert result.checks[name].status is Status.NOT_RUN, name
        assert "did not finish" in result.checks[name].reason or name == "resume"
    assert not result.passed and result.figures == {}


def test_sigterm_stops_the_check_kills_slime_and_removes_its_folder(tmp_path):
    """SIGTERM while slime's import blocks (tests/faults/test_slime_check_stops.py: SIGINT and SIGKILL too, while
    the loop legs run)."""
    stop = signal.SIGTERM
    tree = checkouts.blocking_import(tmp_path / "slime")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "shopsimrl.cli", "slime", "check", "--slime-src", str(tree)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(scratch)})
    try:
        deadline = time.monotonic() + 60
        while not checkouts.pids(tree):  # slime's import is running (and blocked) in the check's child
            assert time.monotonic() < deadline and process.poll() is None, "slime's import never started"
            time.sleep(0.05)
        assert len(list(scratch.iterdir())) == 1  # the check's temporary folder
        process.send_signal(stop)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + stop, (out, err)
    assert f"stopped by {stop.name}" in err and "Traceback" not in err, err
    assert list(scratch.iterdir()) == []
    assert not any(alive(pid) for pid in checkouts.pids(tree))


def leg_with(order: list[list], source: str = "shopsimrl.slime.data_source.SelectorDataSource") -> dict:
    return {"status": 0, "trained": {"0": {}}, "args": {"data_source_path": source}, "feedback": order}


def test_the_feedback_check_needs_step_ks_records_before_step_k_plus_2_picks():
    in_time = [["hand", 0], ["record", 0], ["hand", 1], ["hand", 2], ["record", 1], ["hand", 3]]
    assert check_feedback(leg_with(in_time)).status is Status.PASS
    late = [["hand", 0], ["hand", 1], ["hand", 2], ["record", 0], ["record", 1]]  # step 0's feedback after step 2 picked
    outcome = check_feedback(leg_with(late))
    assert outcome.status is Status.FAIL and outcome.problems == ("step 0: feedback recorded after step 2 began picking",)
    assert check_feedback(leg_with(in_time, source="slime.rollout.data_source.RolloutDataSourceWithBuffer")).status \
        is Status.NOT_APPLICABLE
    assert check_feedback(leg_with([])).status is Status.NOT_RUN
    assert check_feedback({"status": None, "error": "exited early"}).status is Status.NOT_RUN


def test_the_resume_check_compares_trained_prompt_counts_by_their_sum_only(tmp_path):
    """Which prompts the concentration counts name follows slime's choice among groups that finished in one
    event-loop turn, which differs between processes; their sum, and everything else, must be equal."""
    def state(counts, records, name):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"selector": {"records": records, "concentration": {
            "counts": counts, "epoch_prompts": sorted(i for i, _ in counts), "handed_out": 40, "epoch": 1}}}))
        return path

    full = state([[1, 2], [5, 1]], [[1, 0.5]], "full")
    assert _same_state(full, state([[1, 2], [7, 1]], [[1, 0.5]], "tie"))  # another of the tied groups trained
    assert not _same_state(full, state([[1, 2]], [[1, 0.5]], "lost"))  # a trained group lost
    assert not _same_state(full, state([[1, 2], [5, 1]], [[1, 0.25]], "record"))  # a record differs
