"""``shopsimrl replay``: the CLI over the replay API."""

import json

from shopsimrl.cli import main


def test_replay_example_spec4_as_json(capsys):
    assert main(["replay", "--example", "spec4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["kept"] == 16 and out["fallback"] == [16, 17]
    assert out["summary"]["zero_std_group_drop_count"] == 16 and out["summary"]["waves"] == 1


def test_replay_reads_a_csv_supply(tmp_path, capsys):
    supply = tmp_path / "supply.csv"
    supply.write_text("verdict,duration\n" + "varied,1\n" * 3 + "zero_std,0.5\n", encoding="utf-8")
    assert main(["replay", str(supply), "--rollout-batch-size", "2", "--over-sampling-batch-size", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dropped"]["shopsim_zero_std_group"] == [3] and out["kept"] == [0, 1] and out["surplus"] == [2]


def test_replay_refuses_bad_knobs_with_exit_code_2(capsys):
    assert main(["replay", "--example", "spec4", "--over-sampling-batch-size", "8"]) == 2
    assert "at least 16" in capsys.readouterr().err


def test_replay_reports_the_stop_with_exit_code_3(tmp_path, capsys):
    supply = tmp_path / "s.json"
    supply.write_text(json.dumps([["technical", 1]] * 32), encoding="utf-8")
    assert main(["replay", str(supply)]) == 3
    assert "TooManyTechnicalFailures" in capsys.readouterr().err
