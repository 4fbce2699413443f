"""``shopsimrl compare``: eval success against generated episodes, read back from run folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shopsimrl.cli import main
from shopsimrl.io import append_jsonl
from shopsimrl.learn.compare import read_run
from shopsimrl.rollout.journal import RunJournal, options_digest


def fake_run(root, successes, per_step=256, every=2, selection="seed", step_s=None):
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"learner": "grpo", "selection": selection, "waves": "fixed"}))
    for step in range(1, len(successes) * every):
        row = {"step": step, "rollout/shopsim/waste/episodes_submitted": per_step}
        if step_s is not None:  # a run on the modelled clock
            row["rollout/shopsim/clock/total_s"] = step * step_s
        if step == 1:
            row |= {"eval/shopsim/trained_steps": 0, "eval/shopsim/success_rate": successes[0]}
        elif step % every == 0:
            row |= {"eval/shopsim/trained_steps": step, "eval/shopsim/success_rate": successes[step // every],
                    "eval/shopsim/greedy/success_rate": 0.9}
        append_jsonl(root / "metrics.jsonl", row)


def test_an_eval_sits_at_the_episodes_generated_by_the_steps_it_was_trained_on(tmp_path):
    fake_run(tmp_path / "a", [0.4, 0.6, 0.7, 0.7], per_step=100)
    curve = read_run(tmp_path / "a")
    assert [(p.trained_steps, p.generated, p.success) for p in curve.points] == [
        (0, 0.0, 0.4), (2, 200.0, 0.6), (4, 400.0, 0.7), (6, 600.0, 0.7)]
    assert curve.episodes_to_reach(0.7) == 400.0 and curve.label == "grpo/seed/fixed"


def test_compare_prints_the_table_and_draws_one_chart(tmp_path, capsys):
    fake_run(tmp_path / "seed-0", [0.4, 0.6, 0.7])
    fake_run(tmp_path / "inf-0", [0.4, 0.5, 0.8], per_step=200, selection="skip")
    chart = tmp_path / "c.png"
    assert main(["compare", str(tmp_path / "seed-0"), str(tmp_path / "inf-0"), "--chart", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "seed-0" in out and "inf-0" in out and "0.800" in out and "grpo/skip/fixed" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_draws_success_against_modelled_wall_time_and_refuses_a_run_on_the_machine_clock(tmp_path, capsys):
    fake_run(tmp_path / "seed-0", [0.4, 0.6, 0.7], step_s=360.0)
    fake_run(tmp_path / "inf-0", [0.4, 0.5, 0.8], per_step=200, selection="skip", step_s=720.0)
    assert [p.wall_s for p in read_run(tmp_path / "inf-0").points] == [0.0, 1440.0, 2880.0]
    chart = tmp_path / "c.png"
    assert main(["compare", str(tmp_path / "seed-0"), str(tmp_path / "inf-0"), "--x", "wall", "--chart",
                 str(chart)]) == 0
    out = capsys.readouterr().out
    assert "modelled" in out and "0.40" in out and "0.80" in out  # the last evaluations: 4 steps of 360 s, of 720 s
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fake_run(tmp_path / "machine", [0.4, 0.6])
    assert main(["compare", str(tmp_path / "seed-0"), str(tmp_path / "machine"), "--x", "wall"]) == 2
    assert "machine ran on the machine's clock" in capsys.readouterr().err


def test_compare_refuses_a_run_without_evaluations(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    append_jsonl(tmp_path / "r" / "metrics.jsonl", {"step": 1})
    assert main(["compare", str(tmp_path / "r"), "--chart", str(tmp_path / "c.png")]) == 2
    assert "no evaluation" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing")]) == 2


# -- sums by step number: gaps and repeats refused ----------------------------------------------------------


def _rows(root, rows, config=None):
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps(config or {"learner": "grpo", "selection": "seed", "waves": "fixed"}))
    for row in rows:
        append_jsonl(root / "metrics.jsonl", row)
    return root


def _eval(step, trained, success=0.5):
    return {"step": step, "rollout/shopsim/waste/episodes_submitted": 64,
            "eval/shopsim/trained_steps": trained, "eval/shopsim/success_rate": success}


def test_generated_episodes_are_summed_by_step_number_whatever_the_line_order(tmp_path):
    root = _rows(tmp_path / "r", [_eval(3, 3, 0.7), _eval(1, 0, 0.4),
                                  {"step": 2, "rollout/shopsim/waste/episodes_submitted": 64}])
    assert [(p.trained_steps, p.generated) for p in read_run(root).points] == [(0, 0.0), (3, 192.0)]


def test_a_missing_step_is_refused_naming_the_run_and_the_step(tmp_path, capsys):
    root = _rows(tmp_path / "gap", [_eval(1, 0), {"step": 2, "rollout/shopsim/waste/episodes_submitted": 64},
                                    {"step": 3, "rollout/shopsim/waste/episodes_submitted": 64}, _eval(5, 5)])
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gap" in err and "step 4 is missing" in err and "1..3 then 5" in err


def test_a_repeated_step_is_refused_naming_the_run_the_step_and_both_lines(tmp_path, capsys):
    root = _rows(tmp_path / "dup", [_eval(1, 0), {"step": 2, "rollout/shopsim/waste/episodes_submitted": 64},
                                    {"step": 2, "rollout/shopsim/waste/episodes_submitted": 64}])
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dup" in err and "step 2 appears twice" in err and "lines 2 and 3" in err


# -- a run written as a journal: only the steps with a completion marker count ---------------------------

JOURNAL_CONFIG = {"learner": "grpo", "selection": "seed", "waves": "fixed", "run_id": "0123456789abcdef"}


def _journal_run(root, rows, marked):
    """A run folder with run.json's run_id and the journal's own markers for the steps in ``marked``."""
    _rows(root, rows, JOURNAL_CONFIG)
    journal = RunJournal(JOURNAL_CONFIG["run_id"], options_digest(JOURNAL_CONFIG))
    for step in marked:
        (root / f"step-{step}").mkdir()
        journal.complete(root / f"step-{step}", step)
    return root


STEPS = [_eval(1, 0, 0.4), {"step": 2, "rollout/shopsim/waste/episodes_submitted": 64}, _eval(3, 3, 0.6),
         _eval(4, 4, 0.9)]


def test_a_row_of_a_step_without_its_marker_is_left_out_and_named(tmp_path, capsys):
    """A crash between step 4's metrics.jsonl line and its marker: step 4 did not finish, its eval is not shown."""
    root = _journal_run(tmp_path / "crashed", STEPS, marked=[1, 2, 3])
    curve = read_run(root)
    assert [(p.trained_steps, p.generated, p.success) for p in curve.points] == [(0, 0.0, 0.4), (3, 192.0, 0.6)]
    assert curve.incomplete == [4]
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "note: crashed: metrics.jsonl row(s) of step(s) 4 left out: no completion marker" in out
    assert "0.900" not in out  # the incomplete step's eval is not in the table


def test_every_marked_step_counts_and_no_note_is_printed(tmp_path, capsys):
    root = _journal_run(tmp_path / "whole", STEPS, marked=[1, 2, 3, 4])
    curve = read_run(root)
    assert curve.incomplete == [] and curve.last() is not None and curve.last().generated == 256.0
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_run_written_before_markers_keeps_every_row(tmp_path):
    """No run_id in run.json: the run predates the markers, every row counts as before."""
    root = _rows(tmp_path / "old", STEPS)
    curve = read_run(root)
    assert curve.incomplete == [] and [p.trained_steps for p in curve.points] == [0, 3, 4]


def test_an_unmarked_step_before_a_marked_one_is_a_gap_refused_in_one_line(tmp_path, capsys):
    root = _journal_run(tmp_path / "holed", STEPS, marked=[1, 3, 4])
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holed" in err and "step 2 has no completion marker but step 3 has one" in err


def test_a_marker_of_another_step_is_refused_in_one_line(tmp_path, capsys):
    root = _journal_run(tmp_path / "copied", STEPS, marked=[1, 2, 3, 4])
    (root / "step-4" / "complete.json").write_bytes((root / "step-3" / "complete.json").read_bytes())
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "copied" in err and "marker of step 3, not of step 4" in err


def test_a_marker_that_is_a_fifo_is_refused_without_hanging(tmp_path, capsys):
    root = _journal_run(tmp_path / "fifo", STEPS, marked=[1, 2, 3])
    (root / "step-4").mkdir()
    os.mkfifo(root / "step-4" / "complete.json")
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fifo" in err


# -- concentration of training on few prompts, next to held-out success ------------------------------------

CONCENTRATION = "rollout/shopsim/concentration/"


def test_compare_shows_the_last_concentration_figures_and_a_dash_for_a_run_without_them(tmp_path, capsys):
    with_them = [_eval(1, 0, 0.4) | {CONCENTRATION + "distinct_prompts_epoch": 40, CONCENTRATION +
                                     "max_trainings_per_prompt": 2, CONCENTRATION + "top10_share": 0.125},
                 _eval(2, 2, 0.6) | {CONCENTRATION + "distinct_prompts_epoch": 77, CONCENTRATION +
                                     "max_trainings_per_prompt": 3, CONCENTRATION + "top10_share": 0.25}]
    _rows(tmp_path / "conc", with_them)
    _rows(tmp_path / "plain", [_eval(1, 0, 0.4), _eval(2, 2, 0.6)])
    curve = read_run(tmp_path / "conc")
    assert (curve.concentration.distinct_prompts, curve.concentration.max_trainings,
            curve.concentration.top10_share) == (77.0, 3.0, 0.25)
    assert main(["compare", str(tmp_path / "conc"), str(tmp_path / "plain"), "--chart", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    conc = next(line for line in out.splitlines() if "conc" in line)
    plain = next(line for line in out.splitlines() if "plain" in line)
    assert "77" in conc and "0.250" in conc and conc.count(" - ") == 1  # last greedy: not evaluated
    assert plain.count(" - ") == 4  # and prompts this epoch, max per prompt, top-10 share


# -- hostile folders: one line and exit 2, never a traceback, never a hang -----------------------------------

OK_ROW = {"step": 1, "rollout/shopsim/waste/episodes_submitted": 64, "eval/shopsim/trained_steps": 0,
          "eval/shopsim/success_rate": 0.5}


def _write(text: str | bytes, name: str = "metrics.jsonl"):
    def make(root):
        data = text.encode() if isinstance(text, str) else text
        (root / name).write_bytes(data)
    return make


def _fifo(name):
    def make(root):
        (root / name).unlink(missing_ok=True)
        os.mkfifo(root / name)
    return make


def _link(name, target):
    def make(root):
        (root / name).unlink(missing_ok=True)
        (root / name).symlink_to(target)
    return make


def _dir(name):
    def make(root):
        (root / name).unlink(missing_ok=True)
        (root / name).mkdir()
    return make


def _line(row) -> str:
    return (row if isinstance(row, str) else json.dumps(row)) + "\n"


HOSTILE = {
    "metrics-rows-are-lists": _write(_line([1, 2, 3])),
    "metrics-row-a-string": _write(_line('"step 1"')),
    "metrics-row-null": _write(_line("null")),
    "step-null": _write(_line(OK_ROW | {"step": None})),
    "step-missing": _write(_line({"rollout/shopsim/waste/episodes_submitted": 64})),
    "step-a-string": _write(_line(OK_ROW | {"step": "1"})),
    "step-a-fraction": _write(_line(OK_ROW | {"step": 1.5})),
    "step-zero": _write(_line(OK_ROW | {"step": 0})),
    "step-true": _write(_line(OK_ROW | {"step": True})),
    "step-huge": _write(_line('{"step": 1' + "0" * 400 + "}")),
    "generated-a-string": _write(_line(OK_ROW | {"rollout/shopsim/waste/episodes_submitted": "64"})),
    "generated-negative": _write(_line(OK_ROW | {"rollout/shopsim/waste/episodes_submitted": -1})),
    "success-a-string": _write(_line(OK_ROW | {"eval/shopsim/success_rate": "high"})),
    "success-above-one": _write(_line(OK_ROW | {"eval/shopsim/success_rate": 7})),
    "success-a-list": _write(_line(OK_ROW | {"eval/shopsim/success_rate": [0.5]})),
    "trained-steps-a-dict": _write(_line(OK_ROW | {"eval/shopsim/trained_steps": {"n": 0}})),
    "trained-steps-after-the-step": _write(_line(OK_ROW | {"eval/shopsim/trained_steps": 9})),
    "number-1e999": _write(_line('{"step": 1, "eval/shopsim/trained_steps": 0, "eval/shopsim/success_rate": 1e999}')),
    "NaN": _write(_line('{"step": 1, "eval/shopsim/trained_steps": 0, "eval/shopsim/success_rate": NaN}')),
    "deeply-nested": _write(_line('{"step": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")),
    "not-json": _write("{step: 1}\n"),
    "binary": _write(os.urandom(4096).replace(b"\n", b"") + b"\n"),
    "not-utf8": _write(b'{"step": 1, "x": "\xff\xfe"}\n'),
    "huge-line": _write('{"step": 1, "x": "' + "a" * (2 << 20) + '"}\n'),
    "empty": _write(""),
    "only-a-torn-line": _write('{"step": 1'),
    "metrics-a-fifo": _fifo("metrics.jsonl"),
    "metrics-dev-zero": _link("metrics.jsonl", "/dev/zero"),
    "metrics-a-directory": _dir("metrics.jsonl"),
    "metrics-missing": lambda root: (root / "metrics.jsonl").unlink(),
    "metrics-a-dangling-link": _link("metrics.jsonl", "/nonexistent/metrics.jsonl"),
    "run-json-a-list": _write('["grpo", "seed", "fixed"]', "run.json"),
    "run-json-labels-not-strings": _write('{"learner": {"name": "grpo"}, "selection": 3}', "run.json"),
    "run-json-not-json": _write("{learner: grpo", "run.json"),
    "run-json-nested": _write('{"learner": ' + "[" * 50_000 + "]" * 50_000 + "}", "run.json"),
    "run-json-a-fifo": _fifo("run.json"),
    "run-json-dev-zero": _link("run.json", "/dev/zero"),
    "run-json-a-directory": _dir("run.json"),
    "run-json-1e999": _write('{"learner": "grpo", "x": 1e999}', "run.json"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_run_folder_is_one_line_and_exit_2(tmp_path, capsys, name):
    root = _rows(tmp_path / "hostile", [OK_ROW])
    HOSTILE[name](root)
    command = ["compare", str(root), "--chart", str(tmp_path / "c.png")]
    if "fifo" in name or "dev-zero" in name:  # what once hung or filled the memory runs in a process of its own
        done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", *command], capture_output=True, text=True,
                              timeout=60)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        code = main(command)
        out, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("shopsimrl compare: refused: ") and out == ""
    assert not (tmp_path / "c.png").exists()


def test_escape_sequences_and_rich_markup_in_names_and_labels_reach_the_terminal_as_text(tmp_path, capsys):
    hostile = "\x1b[2J\x1b]0;owned\x07[link=http://x]click[/link][bold red]"
    root = _rows(tmp_path / f"run{hostile}", [_eval(1, 0, 0.4), _eval(2, 2, 0.6)],
                 {"learner": f"grpo{hostile}", "selection": "$\\frac{a}{$", "waves": "\x9b31m"})
    assert main(["compare", str(root), "--chart", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) < 0xA0 for c in out)  # no control character
    assert "\\x1b]0;owned\\x07" in out  # shown, not run
    assert "[link=http://x]" in out and "click[/link]" in out  # printed as text, not turned into a link
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"  # and "$" stays literal in the chart's legend
