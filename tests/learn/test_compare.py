"""``shopsimrl compare``: eval success against generated episodes, read back from run folders."""

from __future__ import annotations

import json

from shopsimrl.cli import main
from shopsimrl.io import append_jsonl
from shopsimrl.learn.compare import read_run


def fake_run(root, successes, per_step=256, every=2, selection="seed"):
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"learner": "grpo", "selection": selection, "waves": "fixed"}))
    for step in range(1, len(successes) * every):
        row = {"step": step, "rollout/shopsim/waste/episodes_submitted": per_step}
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
    fake_run(tmp_path / "inf-0", [0.4, 0.5, 0.8], per_step=200, selection="informative")
    chart = tmp_path / "c.png"
    assert main(["compare", str(tmp_path / "seed-0"), str(tmp_path / "inf-0"), "--chart", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "seed-0" in out and "inf-0" in out and "0.800" in out and "grpo/informative/fixed" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_refuses_a_run_without_evaluations(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    append_jsonl(tmp_path / "r" / "metrics.jsonl", {"step": 1})
    assert main(["compare", str(tmp_path / "r"), "--chart", str(tmp_path / "c.png")]) == 2
    assert "no evaluation" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing")]) == 2
