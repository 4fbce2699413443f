"""``rollout --prompt-labels FILE``: the ``forecast`` rule of the main job reads a prompt file's labels (a pass rate
measured earlier, say) over the env's instruction and category, as slime's data source reads the same file; a file
that is malformed, belongs to other tasks, or is given to a rule that reads no labels is refused in one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl.commands import rollout as cli
from shopsimrl.sampling.forecast import fingerprint
from shopsimrl.slime.data import PromptDataError, read_prompts, with_labels

SMALL = ["--products", "2000", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4", "--over-sampling-batch-size",
         "8", "--global-batch-size", "8", "--view", "plain", "--no-timeline", "--steps", "1"]


def export(tmp_path: Path, capsys) -> Path:
    out = tmp_path / "prompts.jsonl"
    from shopsimrl.cli import main

    assert main(["data", "export", "--products", "2000", "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def labelled(path: Path, out: Path) -> Path:
    """The exported file with a numeric label per task (a pass rate someone measured)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for i, record in enumerate(lines):
        record["metadata"]["pass_rate"] = round((i * 37 % 100) / 100, 2)
    out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return out


def forecast_fingerprint(run: Path) -> int:
    return json.loads((run / "step-1" / "state.json").read_text())["prompt_source"]["rule"]["forecast"]["fingerprint"]


def test_the_forecast_of_the_main_job_reads_the_prompt_files_labels(tmp_path, cli_cache, capsys):
    exported = export(tmp_path, capsys)
    labels = labelled(exported, tmp_path / "labelled.jsonl")
    argv = [*SMALL, "--selection", "forecast", "--out", str(tmp_path / "runs")]
    assert cli.main([*argv, "--name", "plain"]) == 0
    assert cli.main([*argv, "--name", "labelled", "--prompt-labels", str(labels)]) == 0
    capsys.readouterr()
    ids, metadata = read_prompts(labels)
    merged = {t: {k: v for k, v in m.items() if k not in ("task_id", "split")} for t, m in metadata.items()}
    assert merged[ids[1]]["pass_rate"] == 0.37
    # the forecast was fitted on the file's labels: its fingerprint is that of the merged descriptions
    assert forecast_fingerprint(tmp_path / "runs" / "labelled") == fingerprint(ids, merged)
    assert forecast_fingerprint(tmp_path / "runs" / "plain") != forecast_fingerprint(tmp_path / "runs" / "labelled")
    assert json.loads((tmp_path / "runs" / "labelled" / "run.json").read_text())["prompt_labels"] == str(labels)
    # a resumed run without the labels it was fitted on is refused
    assert cli.main([*argv, "--name", "labelled", "--resume", "--steps", "2"]) == 2
    assert "prompt_labels" in capsys.readouterr().err


def test_a_prompt_file_of_other_tasks_is_refused_in_one_line(tmp_path, cli_cache, capsys):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "train-99999", "metadata": {"task_id": "train-99999", "x": 1}}) + "\n")
    code = cli.main([*SMALL, "--selection", "forecast", "--prompt-labels", str(other), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "1 of its tasks are not among this run's 160 train tasks (the first: 'train-99999')" in err


@pytest.mark.parametrize(("content", "says"), [
    (b'{"prompt": "t"}\n' + b"[" * 100_000 + b"\n", "other.jsonl:2: JSON nested more than"),
    (b'{"prompt": "t", "metadata": {"task_id": "t", "category": "caf\xe9"}}\n', "other.jsonl:1: not UTF-8 text"),
    (b'{"prompt": "t", "metadata": {"task_id": "t", "pass_rate": [0.5]}}\n', "label 'pass_rate' must be a string"),
])
def test_a_malformed_prompt_file_is_refused_naming_the_line_before_any_work(tmp_path, capsys, no_work, content, says):
    path = tmp_path / "other.jsonl"
    path.write_bytes(content)
    with pytest.raises(PromptDataError, match=says.split(": ", 1)[-1].replace("(", r"\(").replace(")", r"\)")):
        read_prompts(path)
    code = cli.main([*SMALL, "--selection", "forecast", "--prompt-labels", str(path), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err


def test_labels_given_to_a_rule_that_reads_none_are_refused(tmp_path, capsys, no_work):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "t", "metadata": {"task_id": "t", "pass_rate": 0.5}}) + "\n")
    assert cli.main([*SMALL, "--selection", "skip", "--prompt-labels", str(path), "--out", str(tmp_path / "r")]) == 2
    assert "only the forecast rule reads labels" in capsys.readouterr().err


def test_the_files_text_and_labels_go_over_the_envs_and_tasks_it_omits_keep_the_envs():
    env = {"a": {"instruction": "Find a lamp", "category": "Lamps"}, "b": {"instruction": "Find a mug"}}
    merged = with_labels(env, {"a": {"pass_rate": 0.25, "category": "Home"}}, ["a", "b"], "f.jsonl")
    assert merged == {"a": {"instruction": "Find a lamp", "category": "Home", "pass_rate": 0.25},
                      "b": {"instruction": "Find a mug"}}


def decisions(run: Path, steps: list[int]) -> dict[str, list[int]]:
    """(zero-spread groups, scored groups) per task, counted from the steps' events as the test reads them."""
    out: dict[str, list[int]] = {}
    for k in steps:
        for line in (run / f"step-{k}" / "events.jsonl").read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "decision" and event["verdict"] != "technical":
                pair = out.setdefault(event["task_id"], [0, 0])
                pair[0] += event["verdict"] == "zero_std"
                pair[1] += 1
    return out


def test_an_export_labels_each_task_with_its_zero_spread_share_on_the_complete_steps_of_earlier_runs(
        tmp_path, cli_cache, capsys):
    from shopsimrl.cli import main

    assert cli.main([*SMALL, "--steps", "3", "--out", str(tmp_path), "--name", "earlier"]) == 0
    run = tmp_path / "earlier"
    (run / "step-3" / "complete.json").unlink()  # a step cut short: its decisions do not count
    out = tmp_path / "labelled.jsonl"
    assert main(["data", "export", "--products", "2000", "--out", str(out), "--zero-spread-from", str(run)]) == 0
    assert "labelled from 1 runs" in capsys.readouterr().out
    counted = decisions(run, [1, 2])
    _ids, metadata = read_prompts(out)
    labelled = {t: m["zero_spread_share"] for t, m in metadata.items() if "zero_spread_share" in m}
    assert labelled == {t: round(z / n, 3) for t, (z, n) in counted.items()}
    assert 0 < len(labelled) < len(metadata) and all("instruction" in m for m in metadata.values())
    assert {t for t in decisions(run, [3])} - set(counted) <= set(metadata) - set(labelled)


@pytest.mark.parametrize(("make", "says"), [
    (lambda root: root, "not a run folder of shopsimrl rollout (no run.json)"),
    (lambda root: (root / "run.json").write_text('{"env": "inprocess", "products": 2000, "catalog_seed": 0}') and root,
     "no complete step (complete.json)"),
    (lambda root: (root / "run.json").write_text('{"env": "inprocess", "products": 5000, "catalog_seed": 0}') and root,
     "ran on the in-process catalog {'products': 5000, 'catalog_seed': 0}, not this export's"),
])
def test_an_export_from_a_folder_that_is_not_an_earlier_run_of_its_catalog_is_refused(tmp_path, capsys, make, says):
    from shopsimrl.cli import main

    folder = make(tmp_path)
    out = tmp_path / "p.jsonl"
    assert main(["data", "export", "--products", "2000", "--out", str(out), "--zero-spread-from", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and not out.exists()
