"""The ``forecast`` rule on slime: the prompt data carries each prompt's instruction and labels, the data source reads
them as the main job does, a file without them works from history alone (said once), a malformed line is refused in one
line naming the file and the line (exit 2 at launch), and a saved forecast is refused for other prompt data."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from shopsimrl.cli import main as cli_main
from shopsimrl.sampling.forecast import ForecastStateError, SpreadForecast
from shopsimrl.slime.data import PromptDataError, descriptions_of, read_prompts, with_labels
from shopsimrl.slime.data_source import SelectorDataSource
from shopsimrl.slime_metrics import enrich_rollout_metrics, record_generated_rollout_groups


def write(path, metas):
    path.write_text("".join(json.dumps({"prompt": m["task_id"], "metadata": m}) + "\n" for m in metas))
    return path


def described(i: int) -> dict:
    kind = "hard" if i % 2 else "plain"
    return {"task_id": f"task-{i}", "split": "train", "instruction": f"Find me {kind} red shoes under ${10 + i}",
            "category": "Shoes" if i % 3 else "Bags"}


@pytest.fixture
def args(tmp_path):
    prompts = write(tmp_path / "train.jsonl", [described(i) for i in range(60)])
    return SimpleNamespace(prompt_data=str(prompts), input_key="prompt", metadata_key="metadata", n_samples_per_prompt=4,
                           rollout_seed=0, save=str(tmp_path / "ckpt"), load=str(tmp_path / "ckpt"),
                           reward_key="reward", shopsim_selection="forecast")


def test_the_data_source_forecasts_from_the_instruction_and_every_label_of_the_prompt_data(args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    forecast = source.selector.forecast
    assert source.selector.described == 60
    # the same descriptions the main job passes: the instruction and the labels, not the bookkeeping keys
    _ids, metadata = read_prompts(args.prompt_data)
    assert descriptions_of(metadata)["task-1"] == {"instruction": "Find me hard red shoes under $11", "category": "Shoes"}
    groups = source.get_samples(20)
    done = [kit.scored_group(g, [0.0] * 4 if "hard" in g[0].metadata["instruction"] else [1.0, 0.0, 1.0, 0.0],
                             g[0].metadata["task_id"]) for g in groups]
    record_generated_rollout_groups(args, done, source)
    metrics: dict = {}  # slime's log of the step (W&B too): the forecast's calibration beside the selector's figures
    enrich_rollout_metrics(1, args, [s for g in done for s in g], metrics, 1.0)
    assert metrics["rollout/shopsim/selector/forecast/groups"] == 20
    assert 0.0 <= metrics["rollout/shopsim/selector/forecast/brier"] <= 1.0
    hard = sum("hard" in g[0].metadata["instruction"] for g in groups)  # every hard prompt's group failed whole
    assert metrics["rollout/shopsim/selector/forecast/observed_zero_spread"] == pytest.approx(hard / 20)
    assert forecast.scored == pytest.approx(sum(0.995 ** k for k in range(20)))
    ev = source.selector.evidence
    unseen = [i for i in range(60) if not ev.observed[i]]
    hard = [forecast.predict(i, "new") for i in unseen if int(ev.ids[i].split("-")[1]) % 2]
    plain = [forecast.predict(i, "new") for i in unseen if not int(ev.ids[i].split("-")[1]) % 2]
    assert hard and plain and min(hard) > max(plain)  # the instruction's word "hard" read from the prompt data


def test_a_numeric_label_of_the_prompt_data_is_read_by_its_decile_as_the_main_job_reads_it(tmp_path, args, kit):
    """A pass rate added to the exported file: slime's data source buckets it as the main job's forecast does."""
    metas = [{**described(i), "instruction": "Find me red shoes", "pass_rate": round((i * 37 % 100) / 100, 2)}
             for i in range(100)]
    args.prompt_data = str(write(tmp_path / "rated.jsonl", metas))
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    ids, metadata = read_prompts(args.prompt_data)
    main_job = SpreadForecast(ids, with_labels(None, descriptions_of(metadata), ids, args.prompt_data))
    assert source.selector.forecast.fingerprint == main_job.fingerprint
    rate = {m["task_id"]: m["pass_rate"] for m in metas}
    for _ in range(4):  # a prompt at either end of the pass rate never spreads; the middle always does
        groups = source.get_samples(10)
        done = [kit.scored_group(g, [1.0, 0.0, 1.0, 0.0] if 0.2 < rate[g[0].metadata["task_id"]] < 0.8
                                 else [float(rate[g[0].metadata["task_id"]] >= 0.8)] * 4, g[0].metadata["task_id"])
                for g in groups]
        record_generated_rollout_groups(args, done, source)
    ev, forecast = source.selector.evidence, source.selector.forecast
    unseen = [i for i in range(100) if not ev.observed[i]]
    ends = [forecast.predict(i, "new") for i in unseen if not 0.2 < rate[ev.ids[i]] < 0.8]
    middle = [forecast.predict(i, "new") for i in unseen if 0.2 < rate[ev.ids[i]] < 0.8]
    assert ends and middle and sum(ends) / len(ends) > sum(middle) / len(middle) + 0.05


def test_prompt_data_without_text_or_labels_works_from_history_and_says_so_once(tmp_path, args, kit, caplog):
    args.prompt_data = str(write(tmp_path / "bare.jsonl", [{"task_id": f"task-{i}", "split": "train"} for i in range(30)]))
    with caplog.at_level(logging.WARNING, logger="shopsimrl.slime.data_source"):
        source = SelectorDataSource(args, sample_cls=kit.Sample)
        groups = source.get_samples(4)
        record_generated_rollout_groups(args, [kit.scored_group(g, [1.0] * 4, g[0].metadata["task_id"]) for g in groups],
                                        source)
        source.get_samples(4)
    said = [r.getMessage() for r in caplog.records if "history alone" in r.getMessage()]
    assert len(said) == 1 and "bare.jsonl" in said[0]
    assert source.selector.described == 0


@pytest.mark.parametrize(("line", "says"), [
    ("not json", "not valid JSON"),
    ('{"prompt": "t", "metadata": {"task_id": "t", "pass_rate": NaN}}', "not valid JSON"),
    (json.dumps({"prompt": "t", "metadata": ["a"]}), "must be a JSON object"),
    (json.dumps({"prompt": "t", "metadata": {"task_id": "t", "instruction": 3}}), "instruction must be a string"),
    (json.dumps({"prompt": "t", "metadata": {"task_id": "t", "category": {"a": 1}}}), "label 'category'"),
])
def test_malformed_metadata_is_refused_naming_the_file_and_the_line(tmp_path, line, says):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "ok", "metadata": {"task_id": "ok"}}) + "\n" + line + "\n")
    with pytest.raises(PromptDataError, match=f"bad.jsonl:2: .*{says}"):
        read_prompts(path)


def test_malformed_metadata_is_one_line_and_exit_2_at_launch(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "t", "metadata": {"task_id": "t", "category": [1]}}) + "\n")
    for name, value in (("RUN_DIR", str(tmp_path)), ("SELECTION", "forecast"), ("PROMPT_DATA", str(path))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SHOPSIM_WAVE_CUSHION", raising=False)
    assert cli_main(["train", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:1" in err and "label 'category'" in err


def test_a_saved_forecast_is_refused_for_other_prompt_data(tmp_path, args, kit):
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    groups = source.get_samples(5)
    record_generated_rollout_groups(args, [kit.scored_group(g, [1.0, 0.0, 0.0, 1.0], g[0].metadata["task_id"])
                                           for g in groups], source)
    source.save(3)
    same = SelectorDataSource(args, sample_cls=kit.Sample)
    same.load(3)
    assert same.selector.forecast.state_dict() == source.selector.forecast.state_dict()
    args.prompt_data = str(write(tmp_path / "other.jsonl", [{**described(i), "instruction": "Buy socks"} for i in range(60)]))
    other = SelectorDataSource(args, sample_cls=kit.Sample)
    with pytest.raises(ForecastStateError, match="other prompt texts and labels"):
        other.load(3)
